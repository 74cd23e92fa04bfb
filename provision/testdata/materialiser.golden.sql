-- hunt-runner provision --role materialiser: least-privilege ClickHouse identity "hunt_materialiser"
-- coordination database "hunt_runner"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing (an existing user keeps its password).

CREATE USER IF NOT EXISTS `hunt_materialiser` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunt_runner`;

ALTER USER `hunt_materialiser` DEFAULT DATABASE `hunt_runner`;

GRANT
  SELECT, INSERT ON `hunt_runner`.`hunt_schedule`,
  SELECT, INSERT ON `hunt_runner`.`hunt_publish`,
  SELECT, INSERT ON `hunt_runner`.`hunt_request`,
  SELECT ON `hunt_runner`.`hunt_schema`,
  SELECT ON system.`databases`
TO `hunt_materialiser` WITH REPLACE OPTION;
-- sha256: 2a5a677fd55a296c4118ad3fec2eaafa24b4d4e64d9a7f5cb8d8464f7a3b82b3
