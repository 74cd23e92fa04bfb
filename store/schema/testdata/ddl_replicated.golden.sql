-- database hunt_runner
CREATE DATABASE IF NOT EXISTS `hunt_runner`
ENGINE = Replicated('/clickhouse/databases/hunt_runner', '{shard}', '{replica}');

-- table hunt_runner.hunt_schedule
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_schedule`
(
    hunt_id          String,
    interval_seconds UInt32,
    phase_offset     UInt32,
    enabled          UInt8,
    config_hash      String,
    updated          DateTime64(6, 'UTC'),
    hunt_set         LowCardinality(String) DEFAULT 'default'
)
ENGINE = ReplicatedReplacingMergeTree(updated)
ORDER BY hunt_id
COMMENT 'published schedule; written only by materialise, tombstone = enabled 0';

-- table hunt_runner.hunt_publish
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_publish`
(
    set_hash   String,
    hunt_count UInt32,
    source     String,
    published  DateTime64(6, 'UTC'),
    hunt_set   LowCardinality(String) DEFAULT 'default'
)
ENGINE = ReplicatedMergeTree
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
ENGINE = ReplicatedReplacingMergeTree(claimed)
ORDER BY hunt_id
TTL toDateTime(lease_until) + INTERVAL 1 DAY
COMMENT 'claims; newest row per hunt by (claimed, claim_id)';

-- table hunt_runner.hunt_watermark
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_watermark`
(
    hunt_id          String,
    watermark        DateTime('UTC'),
    claim_id         UUID,
    updated          DateTime64(6, 'UTC'),
    run_id           UUID,
    run_owner        String,
    run_start        DateTime('UTC'),
    run_rows         UInt64,
    run_started      DateTime64(6, 'UTC'),
    gap_start        DateTime('UTC'),
    gap_end          DateTime('UTC'),
    findings_dropped UInt64,
    kind             LowCardinality(String),
    interval_seconds UInt32,
    revision         String,
    exception_hits   Map(String, UInt64),
    overran          UInt8,
    PROJECTION latest (SELECT hunt_id, max(watermark) GROUP BY hunt_id)
)
ENGINE = ReplicatedMergeTree
ORDER BY (hunt_id, watermark)
TTL toDateTime(updated) + INTERVAL 91 DAY GROUP BY hunt_id SET watermark = argMax(watermark, watermark), claim_id = argMax(claim_id, watermark), updated = argMax(updated, watermark), run_id = argMax(run_id, watermark), run_owner = argMax(run_owner, watermark), run_start = argMax(run_start, watermark), run_rows = argMax(run_rows, watermark), run_started = argMax(run_started, watermark), gap_start = argMax(gap_start, watermark), gap_end = argMax(gap_end, watermark), findings_dropped = argMax(findings_dropped, watermark), kind = argMax(kind, watermark), interval_seconds = argMax(interval_seconds, watermark), revision = argMax(revision, watermark), exception_hits = argMax(exception_hits, watermark), overran = argMax(overran, watermark)
COMMENT 'commits: one row per committed fire; newest by (watermark, updated)';

-- table hunt_runner.hunt_state
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_state`
(
    hunt_id              String,
    status               LowCardinality(String),
    consecutive_failures UInt32,
    last_error           String,
    last_fire            DateTime('UTC'),
    updated              DateTime64(6, 'UTC'),
    retry_after          DateTime64(3, 'UTC'),
    overrun_count        UInt64,
    too_aggressive       UInt8
)
ENGINE = ReplicatedReplacingMergeTree(updated)
ORDER BY hunt_id
COMMENT 'per-hunt health; newest row by updated';

-- table hunt_runner.hunt_run
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_run`
(
    hunt_id          String,
    fire             DateTime('UTC'),
    run_id           UUID,
    owner            String,
    status           LowCardinality(String),
    window_start     DateTime('UTC'),
    window_end       DateTime('UTC'),
    rows_written     UInt64,
    started          DateTime64(6, 'UTC'),
    finished         DateTime64(6, 'UTC'),
    error            String,
    findings_dropped UInt64,
    kind             LowCardinality(String),
    revision         String,
    exception_hits   Map(String, UInt64)
)
ENGINE = ReplicatedMergeTree
ORDER BY (hunt_id, fire, finished)
TTL toDateTime(finished) + INTERVAL 90 DAY
COMMENT 'attempts that did not commit (failed, lost); commits are in hunt_watermark, both read through hunt_runs';

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
    found      DateTime64(6, 'UTC'),
    title      String,
    dedup_key  String,
    runbook    String,
    mitre      Array(String),
    revision   String
)
ENGINE = ReplicatedReplacingMergeTree(found)
ORDER BY (hunt_id, fire, run_id, finding_id)
TTL toDateTime(found) + INTERVAL 90 DAY
COMMENT 'hunt output per attempt; read committed findings from hunt_findings_committed';

-- table hunt_runner.hunt_request
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_request`
(
    hunt_id        String,
    requested_fire DateTime('UTC'),
    request_id     UUID,
    requested_by   String,
    requested      DateTime64(6, 'UTC')
)
ENGINE = ReplicatedMergeTree
ORDER BY (hunt_id, requested_fire)
TTL toDateTime(requested) + INTERVAL 7 DAY
COMMENT 'run-now requests; pending while requested_fire > watermark';

-- table hunt_runner.hunt_delivery
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_delivery`
(
    hunt_id         String,
    fire            DateTime('UTC'),
    sink            String,
    run_id          UUID,
    idempotency_key String,
    status          LowCardinality(String),
    attempts        UInt32,
    last_error      String,
    next_attempt    DateTime64(3, 'UTC'),
    created         DateTime64(6, 'UTC'),
    delivered       DateTime64(6, 'UTC'),
    claim_id        UUID,
    owner           String,
    lease_until     DateTime64(3, 'UTC'),
    updated         DateTime64(6, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree(updated)
ORDER BY (hunt_id, fire, sink)
TTL toDateTime(updated) + INTERVAL 30 DAY
COMMENT 'notification delivery per (hunt, fire, sink); newest row by updated';

-- table hunt_runner.hunt_suppress
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_suppress`
(
    hunt_id      String,
    suppress_key String,
    fire         DateTime('UTC'),
    recorded     DateTime64(6, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree(recorded)
ORDER BY (hunt_id, suppress_key, fire)
TTL fire + INTERVAL 90 DAY
COMMENT 'notified suppression keys per hunt';

-- table hunt_runner.hunt_pause
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_pause`
(
    hunt_id      String,
    paused       UInt8,
    paused_until DateTime64(3, 'UTC'),
    reason       String,
    paused_by    String,
    updated      DateTime64(6, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree(updated)
ORDER BY hunt_id
COMMENT 'pause and resume; newest row per hunt by updated';

-- table hunt_runner.hunt_snooze
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_snooze`
(
    hunt_id       String,
    snoozed       UInt8,
    snoozed_until DateTime64(3, 'UTC'),
    reason        String,
    snoozed_by    String,
    updated       DateTime64(6, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree(updated)
ORDER BY hunt_id
COMMENT 'snooze and unsnooze of a hunt\'s notifications; newest row per hunt by updated';

-- table hunt_runner.hunt_backfill
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_backfill`
(
    backfill_id   String,
    hunt_id       String,
    range_start   DateTime('UTC'),
    range_end     DateTime('UTC'),
    chunk_seconds UInt32,
    state         LowCardinality(String),
    requested_by  String,
    requested     DateTime64(6, 'UTC'),
    updated       DateTime64(6, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree(updated)
ORDER BY backfill_id
COMMENT 'backfill requests; newest row per backfill_id by updated';

-- table hunt_runner.hunt_schema
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_schema`
(
    version UInt32,
    applied DateTime64(6, 'UTC'),
    note    String
)
ENGINE = ReplicatedMergeTree
ORDER BY version
COMMENT 'schema layout versions applied by hunt-runner schema';

-- table hunt_runner.hunt_runner_heartbeat
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_runner_heartbeat`
(
    owner      String,
    version    String,
    hunt_set   String,
    set_hash   String,
    hunts      UInt32,
    last_tick  DateTime64(3, 'UTC'),
    started    DateTime64(3, 'UTC'),
    hunt_files String
)
ENGINE = ReplicatedReplacingMergeTree(last_tick)
ORDER BY owner
TTL toDateTime(last_tick) + INTERVAL 1 DAY
COMMENT 'runner heartbeats; newest row per owner by last_tick';

-- table hunt_runner.hunt_check
CREATE TABLE IF NOT EXISTS `hunt_runner`.`hunt_check`
(
    scope     String,
    hunt_hash String,
    checked   DateTime64(3, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree(checked)
ORDER BY (scope, hunt_hash)
TTL toDateTime(checked) + INTERVAL 30 DAY
COMMENT 'hunt revisions the server-side containment check accepted, per check scope';

-- table hunt_runner.hunt_runs
CREATE VIEW IF NOT EXISTS `hunt_runner`.`hunt_runs` AS
SELECT hunt_id, fire, run_id, owner, status, window_start, window_end, rows_written, findings_dropped,
    kind, started, finished, error, revision, exception_hits
FROM `hunt_runner`.`hunt_run`
WHERE status NOT IN ('succeeded', 'gap')
UNION ALL
SELECT
    hunt_id,
    watermark AS fire,
    run_id,
    run_owner AS owner,
    status,
    if(status = 'gap', gap_start, run_start) AS window_start,
    if(status = 'gap', gap_end, watermark) AS window_end,
    if(status = 'gap', 0, run_rows) AS rows_written,
    if(status = 'gap', 0, findings_dropped) AS findings_dropped,
    kind,
    run_started AS started,
    updated AS finished,
    if(status = 'gap', concat('outage longer than max_catchup: [', toString(gap_start), ', ',
        toString(gap_end), ') skipped'), '') AS error,
    revision,
    if(status = 'gap', CAST(map(), 'Map(String, UInt64)'), exception_hits) AS exception_hits
FROM `hunt_runner`.`hunt_watermark`
ARRAY JOIN if(kind = 'imported', ['imported'], if(gap_end > gap_start, ['succeeded', 'gap'], ['succeeded'])) AS status
WHERE run_id != toUUID('00000000-0000-0000-0000-000000000000') AND kind != 'backfill'
UNION ALL
SELECT
    splitByChar('#', hunt_id)[1] AS hunt_id,
    watermark AS fire,
    run_id,
    run_owner AS owner,
    status,
    if(status = 'gap', gap_start, run_start) AS window_start,
    if(status = 'gap', gap_end, watermark) AS window_end,
    if(status = 'gap', 0, run_rows) AS rows_written,
    if(status = 'gap', 0, findings_dropped) AS findings_dropped,
    kind,
    run_started AS started,
    updated AS finished,
    if(status = 'gap', concat('outage longer than max_catchup: [', toString(gap_start), ', ',
        toString(gap_end), ') skipped'), '') AS error,
    revision,
    if(status = 'gap', CAST(map(), 'Map(String, UInt64)'), exception_hits) AS exception_hits
FROM `hunt_runner`.`hunt_watermark`
ARRAY JOIN if(kind = 'imported', ['imported'], if(gap_end > gap_start, ['succeeded', 'gap'], ['succeeded'])) AS status
WHERE run_id != toUUID('00000000-0000-0000-0000-000000000000') AND kind = 'backfill';

-- table hunt_runner.hunt_findings_committed
CREATE VIEW IF NOT EXISTS `hunt_runner`.`hunt_findings_committed` AS
SELECT hunt_id, fire, finding_id, finding, severity, labels, run_id, found, title, dedup_key, runbook,
    mitre, revision
FROM `hunt_runner`.`hunt_findings`
WHERE (hunt_id, run_id) IN (SELECT splitByChar('#', hunt_id)[1], run_id FROM `hunt_runner`.`hunt_watermark`);
