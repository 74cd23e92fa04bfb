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
  SELECT ON `edr`.*,
  SELECT ON `logs`.*,
  SELECT ON system.`databases`,
  SELECT ON system.`replicas`
TO `hunt_runner` WITH REPLACE OPTION;
-- sha256: 56aa8f9a06ec4b8010aa2f0666e349782647757c78c20b264cb07dcce045dc63
