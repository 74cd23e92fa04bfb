-- hunt-runner provision --role scaler: least-privilege ClickHouse identity "hunt_scaler"
-- coordination database "hunt_runner"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing.

CREATE OR REPLACE VIEW `hunt_runner`.`hunt_backlog_v1`
DEFINER = CURRENT_USER SQL SECURITY DEFINER
AS SELECT toUInt64(least(due, 100000)) AS value FROM (
SELECT toUInt64(count()) AS due FROM (
SELECT hunt_id, fire, has_wm, wm, has_lease, lu_ms, has_req, rf FROM (
  SELECT hunt_id, has_wm, wm, has_lease, lu_ms, has_req, rf,
    toInt64(i) AS iv, intDiv(toInt64(now()), iv) * iv + toInt64(p) % iv AS cur,
    if(toInt64(now()) >= cur, cur, cur - iv) AS fire
  FROM (
  SELECT hunt_id,
    argMaxIf(interval_seconds, v, k = 0) AS i, argMaxIf(phase_offset, v, k = 0) AS p, argMaxIf(enabled, v, k = 0) AS e,
    countIf(k = 1) > 0 AS has_wm, argMaxIf(x, v, k = 1) AS wm,
    countIf(k = 2) > 0 AS has_lease, argMaxIf(x, (v, c), k = 2) AS lu_ms,
    countIf(k = 3) > 0 AS has_req, maxIf(x, k = 3) AS rf
  FROM (
    SELECT 0 AS k, hunt_id, updated AS v, toUUID('00000000-0000-0000-0000-000000000000') AS c, interval_seconds, phase_offset, enabled, toInt64(0) AS x FROM `hunt_runner`.hunt_schedule
    UNION ALL SELECT 1, hunt_id, updated, toUUID('00000000-0000-0000-0000-000000000000'), 0, 0, 0, toInt64(watermark) FROM `hunt_runner`.hunt_watermark
    UNION ALL SELECT 2, hunt_id, claimed, claim_id, 0, 0, 0, toUnixTimestamp64Milli(lease_until) FROM `hunt_runner`.hunt_lease
    UNION ALL SELECT 3, hunt_id, toDateTime64(0, 6, 'UTC'), toUUID('00000000-0000-0000-0000-000000000000'), 0, 0, 0, toInt64(requested_fire) FROM `hunt_runner`.hunt_request
  )
  GROUP BY hunt_id
  HAVING countIf(k = 0) > 0 AND e = 1 AND i > 0
)
  WHERE i > 0
)
WHERE (has_lease = 0 OR lu_ms <= toInt64(now()) * 1000)
  AND (has_wm = 0 OR wm < fire OR (has_req = 1 AND rf > wm))
)
);

CREATE SETTINGS PROFILE IF NOT EXISTS `hunt_scaler_profile` SETTINGS readonly = 1, max_execution_time = 5;

ALTER SETTINGS PROFILE `hunt_scaler_profile` SETTINGS readonly = 1, max_execution_time = 5;

CREATE USER IF NOT EXISTS `hunt_scaler` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunt_runner` SETTINGS PROFILE `hunt_scaler_profile`;

ALTER USER `hunt_scaler` DEFAULT DATABASE `hunt_runner` SETTINGS PROFILE `hunt_scaler_profile`;

GRANT SELECT ON `hunt_runner`.`hunt_backlog_v1` TO `hunt_scaler` WITH REPLACE OPTION;
-- sha256: 52e11c1c5e2c644b0d00f51d89ab18d5fc399670fa8fd3c95dec8193340234ff
