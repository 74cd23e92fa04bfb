-- The sample schema that examples/hunts read, in a Replicated database so both replicas have it.
-- Run by the clickhouse-server image on first start (/docker-entrypoint-initdb.d); idempotent.
CREATE DATABASE IF NOT EXISTS sample
ENGINE = Replicated('/clickhouse/databases/sample', '{shard}', '{replica}');

CREATE TABLE IF NOT EXISTS sample.auth_events (
    ts      DateTime64(3, 'UTC'),
    user    String,
    src_ip  String,
    outcome LowCardinality(String),
    country LowCardinality(String)
) ENGINE = ReplicatedMergeTree ORDER BY ts;

CREATE TABLE IF NOT EXISTS sample.process_events (
    ts      DateTime64(3, 'UTC'),
    host    String,
    process String,
    parent  String,
    cmdline String
) ENGINE = ReplicatedMergeTree ORDER BY ts;

CREATE TABLE IF NOT EXISTS sample.dns_events (
    ts    DateTime64(3, 'UTC'),
    host  String,
    query String,
    qtype LowCardinality(String),
    bytes UInt32
) ENGINE = ReplicatedMergeTree ORDER BY ts;
