-- hunt-runner provision --role scaler: least-privilege ClickHouse identity "keda_reader"
-- coordination database "hunts", ON CLUSTER "main"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing (an existing user keeps its password).

CREATE SETTINGS PROFILE IF NOT EXISTS `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

ALTER SETTINGS PROFILE `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

CREATE USER IF NOT EXISTS `keda_reader` ON CLUSTER `main` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

ALTER USER `keda_reader` ON CLUSTER `main` DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

GRANT ON CLUSTER `main` SELECT ON `hunts`.`hunt_backlog_v1`, SELECT ON `hunts`.`hunt_schema` TO `keda_reader` WITH REPLACE OPTION;
-- sha256: 173a3d679747ab9ac9d3bef09b67b9dab7e7ed7de9be9f55e7b752f51eb6f4ca
