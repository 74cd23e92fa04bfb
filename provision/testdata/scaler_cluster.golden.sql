-- hunt-runner provision --role scaler: least-privilege ClickHouse identity "keda_reader"
-- coordination database "hunts", ON CLUSTER "main"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing (an existing user keeps its password).

CREATE OR REPLACE VIEW `hunts`.`hunt_backlog_v1` ON CLUSTER `main`
DEFINER = CURRENT_USER SQL SECURITY DEFINER
AS SELECT toUInt64(least(due, 100000)) AS value FROM (
SELECT toUInt64(count()) AS due FROM (
WITH (SELECT groupArray(hunt_id), groupArray(rf) FROM (SELECT hunt_id, toInt64(max(requested_fire)) AS rf FROM `hunts`.hunt_request GROUP BY hunt_id)) AS reqs
SELECT hunt_id, fire, has_wm, wm, toUInt8(0) AS has_lease, toInt64(0) AS lu_ms, toUInt8(rf0 != toInt64(-9223372036854775808)) AS has_req, if(has_req = 1, rf0, 0) AS rf FROM (
  SELECT hunt_id, has_wm, wm, held, toInt64(i) AS iv, intDiv(toInt64(now()), iv) * iv + toInt64(p) % iv AS cur,
    if(toInt64(now()) >= cur, cur, cur - iv) AS fire, transform(hunt_id, reqs.1, reqs.2, toInt64(-9223372036854775808)) AS rf0
  FROM (SELECT hunt_id, interval_seconds AS i, phase_offset AS p FROM `hunts`.hunt_schedule FINAL WHERE enabled = 1 AND interval_seconds > 0) AS s
  LEFT JOIN (SELECT hunt_id, toUInt8(1) AS has_wm, toInt64(watermark) AS wm FROM `hunts`.hunt_watermark FINAL) AS w USING (hunt_id)
  LEFT JOIN (SELECT hunt_id, toUInt8(1) AS held FROM `hunts`.hunt_lease
      WHERE hunt_id IN (SELECT hunt_id FROM `hunts`.hunt_lease WHERE toUnixTimestamp64Milli(lease_until) > toInt64(now()) * 1000)
      GROUP BY hunt_id
      HAVING toUnixTimestamp64Milli(argMax(lease_until, (claimed, claim_id))) > toInt64(now()) * 1000) AS l USING (hunt_id)
  WHERE i > 0
)
WHERE held = 0 AND (has_wm = 0 OR wm < fire OR rf0 > wm)
)
SETTINGS join_algorithm = 'full_sorting_merge', join_use_nulls = 0, optimize_move_to_prewhere_if_final = 0, split_intersecting_parts_ranges_into_layers_final = 0
);

CREATE SETTINGS PROFILE IF NOT EXISTS `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

ALTER SETTINGS PROFILE `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

CREATE USER IF NOT EXISTS `keda_reader` ON CLUSTER `main` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

ALTER USER `keda_reader` ON CLUSTER `main` DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

GRANT ON CLUSTER `main` SELECT ON `hunts`.`hunt_backlog_v1` TO `keda_reader` WITH REPLACE OPTION;
-- sha256: 6a409f4a6d1107dd40d12f408f5816694cf140073ab36e76a13a378d510e921e
