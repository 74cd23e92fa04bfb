-- hunt-runner provision --role scaler: least-privilege ClickHouse identity "keda_reader"
-- coordination database "hunts", ON CLUSTER "main"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing (an existing user keeps its password).

CREATE SETTINGS PROFILE IF NOT EXISTS `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

ALTER SETTINGS PROFILE `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

CREATE USER IF NOT EXISTS `keda_reader` ON CLUSTER `main` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

ALTER USER `keda_reader` ON CLUSTER `main` DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

GRANT ON CLUSTER `main` SELECT ON `hunts`.`hunt_backlog_v1` TO `keda_reader` WITH REPLACE OPTION;
-- sha256: d7f3c43d1a0e473740cf8bf4ecc147bc06d91ac9e52d82812eff9b3533f32ac4
