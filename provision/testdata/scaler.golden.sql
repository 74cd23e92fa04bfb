-- hunt-runner provision --role scaler: least-privilege ClickHouse identity "hunt_scaler"
-- coordination database "hunt_runner"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing.

CREATE SETTINGS PROFILE IF NOT EXISTS `hunt_scaler_profile` SETTINGS readonly = 1, max_execution_time = 5;

ALTER SETTINGS PROFILE `hunt_scaler_profile` SETTINGS readonly = 1, max_execution_time = 5;

CREATE USER IF NOT EXISTS `hunt_scaler` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunt_runner` SETTINGS PROFILE `hunt_scaler_profile`;

ALTER USER `hunt_scaler` DEFAULT DATABASE `hunt_runner` SETTINGS PROFILE `hunt_scaler_profile`;

GRANT SELECT ON `hunt_runner`.`hunt_backlog_v1` TO `hunt_scaler` WITH REPLACE OPTION;
-- sha256: b9c895efc7c0933e649580258d613616dd74cec219bcdb93617fbd7449db4119
