-- hunt-runner provision --role runner: least-privilege ClickHouse identity "hunt_runner"
-- coordination database "hunt_runner"
-- source databases: edr, logs
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing.

CREATE USER IF NOT EXISTS `hunt_runner` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunt_runner`;

ALTER USER `hunt_runner` DEFAULT DATABASE `hunt_runner`;

GRANT
  SELECT, INSERT ON `hunt_runner`.`hunt_schedule`,
  SELECT, INSERT ON `hunt_runner`.`hunt_publish`,
  SELECT, INSERT ON `hunt_runner`.`hunt_lease`,
  SELECT, INSERT ON `hunt_runner`.`hunt_watermark`,
  SELECT, INSERT ON `hunt_runner`.`hunt_state`,
  SELECT, INSERT ON `hunt_runner`.`hunt_run`,
  SELECT, INSERT, ALTER DELETE ON `hunt_runner`.`hunt_findings`,
  SELECT, INSERT ON `hunt_runner`.`hunt_request`,
  SELECT, INSERT ON `hunt_runner`.`hunt_delivery`,
  SELECT, INSERT ON `hunt_runner`.`hunt_suppress`,
  SELECT, INSERT ON `hunt_runner`.`hunt_schema`,
  SELECT ON `edr`.*,
  SELECT ON `logs`.*,
  SELECT ON system.`databases`,
  SELECT ON system.`replicas`
TO `hunt_runner` WITH REPLACE OPTION;
-- sha256: 1edfa8d73444c67fa89ac93654a947c76eb1818370a9b030c2e5130697a8cba2
