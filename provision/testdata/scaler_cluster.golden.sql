-- hunt-runner provision --role scaler: least-privilege ClickHouse identity "keda_reader"
-- coordination database "hunts", ON CLUSTER "main"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing.

CREATE OR REPLACE VIEW `hunts`.`hunt_backlog_v1` ON CLUSTER `main`
DEFINER = CURRENT_USER SQL SECURITY DEFINER
AS SELECT toUInt64(least(due, 100000)) AS value FROM (
SELECT toUInt64(count()) AS due FROM (
SELECT hunt_id, fire, has_wm, wm, toUInt8(0) AS has_lease, toInt64(0) AS lu_ms, has_req, rf FROM (
  SELECT hunt_id, has_wm, wm, has_req, rf, toInt64(i) AS iv, intDiv(toInt64(now()), iv) * iv + toInt64(p) % iv AS cur,
    if(toInt64(now()) >= cur, cur, cur - iv) AS fire
  FROM (SELECT hunt_id, interval_seconds AS i, phase_offset AS p FROM `hunts`.hunt_schedule FINAL WHERE enabled = 1 AND interval_seconds > 0) AS s
  LEFT JOIN (SELECT hunt_id, toUInt8(1) AS has_wm, toInt64(watermark) AS wm FROM `hunts`.hunt_watermark FINAL) AS w USING (hunt_id)
  LEFT JOIN (SELECT hunt_id, toUInt8(1) AS has_req, toInt64(max(requested_fire)) AS rf FROM `hunts`.hunt_request GROUP BY hunt_id) AS r USING (hunt_id)
  WHERE i > 0
)
WHERE (has_wm = 0 OR wm < fire OR (has_req = 1 AND rf > wm))
  AND hunt_id NOT IN (
    SELECT hunt_id FROM `hunts`.hunt_lease
    WHERE hunt_id IN (SELECT hunt_id FROM `hunts`.hunt_lease WHERE toUnixTimestamp64Milli(lease_until) > toInt64(now()) * 1000)
    GROUP BY hunt_id
    HAVING toUnixTimestamp64Milli(argMax(lease_until, (claimed, claim_id))) > toInt64(now()) * 1000
  )
)
SETTINGS join_algorithm = 'full_sorting_merge', optimize_move_to_prewhere_if_final = 0
);

CREATE SETTINGS PROFILE IF NOT EXISTS `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

ALTER SETTINGS PROFILE `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

CREATE USER IF NOT EXISTS `keda_reader` ON CLUSTER `main` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

ALTER USER `keda_reader` ON CLUSTER `main` DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

GRANT ON CLUSTER `main` SELECT ON `hunts`.`hunt_backlog_v1` TO `keda_reader` WITH REPLACE OPTION;
-- sha256: a5f4392e657d52bcd07853d26043318384b5bca8c4f38574be454d04f44262da
