-- hunt-runner provision --role hunts: least-privilege ClickHouse identity "hunt_hunts"
-- coordination database "hunt_runner"
-- source databases hunts may read: sample
-- The password is never printed; --apply reads it from HUNT_RUNNER_PROVISION_PASSWORD or --password-file.
-- Applying this sets the password of an existing user too (rotation).

CREATE SETTINGS PROFILE IF NOT EXISTS `hunt_hunts_profile` SETTINGS readonly = 2 CONST, allow_ddl = 0 CONST, allow_introspection_functions = 0 CONST, max_execution_time = 600 MAX 600, max_memory_usage = 1073741824 MAX 1073741824, max_result_bytes = 1073741824 MAX 1073741824, result_overflow_mode = 'throw' CONST;

ALTER SETTINGS PROFILE `hunt_hunts_profile` SETTINGS readonly = 2 CONST, allow_ddl = 0 CONST, allow_introspection_functions = 0 CONST, max_execution_time = 600 MAX 600, max_memory_usage = 1073741824 MAX 1073741824, max_result_bytes = 1073741824 MAX 1073741824, result_overflow_mode = 'throw' CONST;

CREATE USER IF NOT EXISTS `hunt_hunts` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>'
DEFAULT DATABASE `sample` SETTINGS PROFILE `hunt_hunts_profile`;

ALTER USER `hunt_hunts` DEFAULT DATABASE `sample` SETTINGS PROFILE `hunt_hunts_profile`;

GRANT
  SELECT ON `sample`.*
TO `hunt_hunts` WITH REPLACE OPTION;

ALTER USER `hunt_hunts` IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>';
-- sha256: 0d401300ffc01f538101d2e60d6064db55581762a5038f9ea1ddc5a32390f088
