-- hunt-runner provision --role runner: least-privilege ClickHouse identity "hunt_runner"
-- coordination database "hunt_runner"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing (an existing user keeps its password).

CREATE USER IF NOT EXISTS `hunt_runner` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunt_runner`;

ALTER USER `hunt_runner` DEFAULT DATABASE `hunt_runner`;

GRANT
  SELECT ON `hunt_runner`.`hunt_schedule`,
  SELECT ON `hunt_runner`.`hunt_publish`,
  SELECT, INSERT ON `hunt_runner`.`hunt_lease`,
  SELECT, INSERT ON `hunt_runner`.`hunt_watermark`,
  SELECT, INSERT ON `hunt_runner`.`hunt_state`,
  SELECT, INSERT ON `hunt_runner`.`hunt_run`,
  SELECT, INSERT ON `hunt_runner`.`hunt_findings`,
  SELECT ON `hunt_runner`.`hunt_request`,
  SELECT, INSERT ON `hunt_runner`.`hunt_delivery`,
  SELECT, INSERT ON `hunt_runner`.`hunt_suppress`,
  SELECT ON `hunt_runner`.`hunt_pause`,
  SELECT ON `hunt_runner`.`hunt_snooze`,
  SELECT ON `hunt_runner`.`hunt_backfill`,
  SELECT ON `hunt_runner`.`hunt_schema`,
  SELECT, INSERT ON `hunt_runner`.`hunt_runner_heartbeat`,
  SELECT, INSERT ON `hunt_runner`.`hunt_check`,
  SELECT ON system.`databases`,
  SELECT ON system.`replicas`,
  SELECT ON system.`workloads`
TO `hunt_runner` WITH REPLACE OPTION;

CREATE WORKLOAD IF NOT EXISTS all;

CREATE WORKLOAD IF NOT EXISTS live IN all SETTINGS priority = 0;

CREATE WORKLOAD IF NOT EXISTS backfill IN all SETTINGS priority = 1;

CREATE WORKLOAD IF NOT EXISTS preview IN all SETTINGS priority = 2;
-- sha256: 5378a315e671b897dac6a40b063eeb0788b512d1946c39bedfdbbc2df3731a39
