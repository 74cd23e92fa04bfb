-- database hunt_runner
CREATE DATABASE IF NOT EXISTS `hunt_runner`;

-- table hunt_runner.hunt_schedule
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_schedule`
(
    hunt_id          String,
    interval_seconds UInt32,
    phase_offset     UInt32,
    enabled          UInt8,
    config_hash      String,
    updated          DateTime64(6, 'UTC')
)
ENGINE = ReplacingMergeTree(updated)
ORDER BY hunt_id
COMMENT 'published schedule; written only by materialise, tombstone = enabled 0';

-- table hunt_runner.hunt_publish
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_publish`
(
    set_hash   String,
    hunt_count UInt32,
    source     String,
    published  DateTime64(6, 'UTC')
)
ENGINE = MergeTree
ORDER BY published
COMMENT 'one row per materialise that published a hunt set';

-- table hunt_runner.hunt_lease
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_lease`
(
    hunt_id     String,
    fire        DateTime('UTC'),
    owner       String,
    claim_id    UUID,
    claimed     DateTime64(6, 'UTC'),
    lease_until DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(claimed)
ORDER BY hunt_id
TTL toDateTime(lease_until) + INTERVAL 1 DAY
COMMENT 'claims; newest row per hunt by (claimed, claim_id)';

-- table hunt_runner.hunt_watermark
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_watermark`
(
    hunt_id     String,
    watermark   DateTime('UTC'),
    claim_id    UUID,
    updated     DateTime64(6, 'UTC'),
    run_id      UUID,
    run_owner   String,
    run_start   DateTime('UTC'),
    run_rows    UInt64,
    run_started DateTime64(6, 'UTC'),
    gap_start   DateTime('UTC'),
    gap_end     DateTime('UTC')
)
ENGINE = ReplacingMergeTree(updated)
ORDER BY hunt_id
COMMENT 'fenced progress per hunt; newest row by updated';

-- table hunt_runner.hunt_state
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_state`
(
    hunt_id              String,
    status               LowCardinality(String),
    consecutive_failures UInt32,
    last_error           String,
    last_fire            DateTime('UTC'),
    updated              DateTime64(6, 'UTC')
)
ENGINE = ReplacingMergeTree(updated)
ORDER BY hunt_id
COMMENT 'per-hunt health; newest row by updated';

-- table hunt_runner.hunt_run
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_run`
(
    hunt_id      String,
    fire         DateTime('UTC'),
    run_id       UUID,
    owner        String,
    status       LowCardinality(String),
    window_start DateTime('UTC'),
    window_end   DateTime('UTC'),
    rows_written UInt64,
    started      DateTime64(6, 'UTC'),
    finished     DateTime64(6, 'UTC'),
    error        String
)
ENGINE = MergeTree
ORDER BY (hunt_id, fire, finished)
TTL toDateTime(finished) + INTERVAL 90 DAY
COMMENT 'audit log, one row per finished attempt';

-- table hunt_runner.hunt_findings
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_findings`
(
    hunt_id    String,
    fire       DateTime('UTC'),
    finding_id UInt64,
    finding    String,
    severity   LowCardinality(String),
    labels     Map(String, String),
    run_id     UUID,
    found      DateTime64(6, 'UTC')
)
ENGINE = ReplacingMergeTree(found)
ORDER BY (hunt_id, fire, finding_id)
COMMENT 'hunt output; finding_id = cityHash64(finding)';

-- table hunt_runner.hunt_request
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_request`
(
    hunt_id        String,
    requested_fire DateTime('UTC'),
    request_id     UUID,
    requested_by   String,
    requested      DateTime64(6, 'UTC')
)
ENGINE = MergeTree
ORDER BY (hunt_id, requested_fire)
TTL toDateTime(requested) + INTERVAL 7 DAY
COMMENT 'run-now requests; pending while requested_fire > watermark';

-- table hunt_runner.hunt_watermark_run
CREATE MATERIALIZED VIEW IF NOT EXISTS `hunt_runner`.`hunt_watermark_run` TO `hunt_runner`.`hunt_run`
AS SELECT
    hunt_id,
    watermark AS fire,
    run_id,
    run_owner AS owner,
    status,
    if(status = 'gap', gap_start, run_start) AS window_start,
    if(status = 'gap', gap_end, watermark) AS window_end,
    if(status = 'gap', 0, run_rows) AS rows_written,
    run_started AS started,
    updated AS finished,
    if(status = 'gap', concat('outage longer than max_catchup: [', toString(toUnixTimestamp(gap_start)), ', ',
        toString(toUnixTimestamp(gap_end)), ') skipped'), '') AS error
FROM `hunt_runner`.`hunt_watermark`
ARRAY JOIN if(gap_end > gap_start, ['succeeded', 'gap'], ['succeeded']) AS status
WHERE run_id != toUUID('00000000-0000-0000-0000-000000000000');
