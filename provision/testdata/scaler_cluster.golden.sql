-- hunt-runner provision --role scaler: least-privilege ClickHouse identity "keda_reader"
-- coordination database "hunts", ON CLUSTER "main"
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing.

CREATE SETTINGS PROFILE IF NOT EXISTS `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

ALTER SETTINGS PROFILE `keda_reader_profile` ON CLUSTER `main` SETTINGS readonly = 1, max_execution_time = 5;

CREATE USER IF NOT EXISTS `keda_reader` ON CLUSTER `main` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

ALTER USER `keda_reader` ON CLUSTER `main` DEFAULT DATABASE `hunts` SETTINGS PROFILE `keda_reader_profile`;

GRANT ON CLUSTER `main` SELECT ON `hunts`.`hunt_backlog_v1` TO `keda_reader` WITH REPLACE OPTION;
-- sha256: eaf278deabaf13cae41eca77d49daf3a26eee3a7700a2ec4b6b3218eb7bdecb7
