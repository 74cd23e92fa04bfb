-- hunt-runner provision --role hunts: least-privilege ClickHouse identity "hunt_hunts"
-- coordination database "hunt_runner"
-- source databases hunts may read: edr, logs
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Repeatable: applying this again changes nothing (an existing user keeps its password).

CREATE SETTINGS PROFILE IF NOT EXISTS `hunt_hunts_profile` SETTINGS readonly = 2 CONST, allow_ddl = 0 CONST, allow_introspection_functions = 0 CONST, max_execution_time = 3600 MAX 3600, max_memory_usage = 8589934592 MAX 8589934592, max_result_bytes = 1073741824 MAX 1073741824, result_overflow_mode = 'throw' CONST;

ALTER SETTINGS PROFILE `hunt_hunts_profile` SETTINGS readonly = 2 CONST, allow_ddl = 0 CONST, allow_introspection_functions = 0 CONST, max_execution_time = 3600 MAX 3600, max_memory_usage = 8589934592 MAX 8589934592, max_result_bytes = 1073741824 MAX 1073741824, result_overflow_mode = 'throw' CONST;

CREATE USER IF NOT EXISTS `hunt_hunts` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `edr` SETTINGS PROFILE `hunt_hunts_profile`;

ALTER USER `hunt_hunts` DEFAULT DATABASE `edr` SETTINGS PROFILE `hunt_hunts_profile`;

GRANT
  SELECT ON `edr`.*,
  SELECT ON `logs`.*
TO `hunt_hunts` WITH REPLACE OPTION;
-- sha256: 582953f16e22b8bf66c19359e14d756192c76b5fd7b503db6430256e289f90a6
