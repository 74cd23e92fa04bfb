-- hunt-runner provision --role scaler: least-privilege ClickHouse identity "hunt_scaler"
-- coordination database "hunt_runner"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing (an existing user keeps its password).

CREATE SETTINGS PROFILE IF NOT EXISTS `hunt_scaler_profile` SETTINGS readonly = 1, max_execution_time = 5;

ALTER SETTINGS PROFILE `hunt_scaler_profile` SETTINGS readonly = 1, max_execution_time = 5;

CREATE USER IF NOT EXISTS `hunt_scaler` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunt_runner` SETTINGS PROFILE `hunt_scaler_profile`;

ALTER USER `hunt_scaler` DEFAULT DATABASE `hunt_runner` SETTINGS PROFILE `hunt_scaler_profile`;

GRANT SELECT ON `hunt_runner`.`hunt_backlog_v1`, SELECT ON `hunt_runner`.`hunt_schema` TO `hunt_scaler` WITH REPLACE OPTION;
-- sha256: 2303c60312efdb04319f482737c0da2d3f400cb98bbaf56109055cbcc7c315b2
