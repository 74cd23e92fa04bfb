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
-- sha256: 7616ff0c579ae93189372f2f546bcbd889327c63c659b0aceef939167f19f997
