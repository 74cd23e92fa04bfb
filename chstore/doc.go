// Package chstore owns hunt-runner's connection to ClickHouse and the schema of its
// coordination tables.
//
// Connection: Options names the server by URL (clickhouse:// for the native protocol, http(s)://
// for HTTP), the user, and a password that comes from the environment or a file, never a flag.
// Open retries only what waiting can fix (DNS, refused, timeouts) within ConnectTimeout and
// classifies failures as ErrDNS, ErrRefused, ErrTimeout, ErrAuth, ErrUnknownDatabase, ErrTLS or
// ErrConfig.
// The password never appears in a log line or an error: URLs are shown through Redact and
// driver errors are scrubbed before they leave this package.
//
// Schema: DDL renders every table of docs/contracts.md for a Topology — one node, a Replicated
// database, or ON CLUSTER with {shard}/{replica} macros (and ClickHouse Cloud). The rendered
// DDL is pinned in testdata/*.golden.sql. Apply creates what is missing and reports what it
// created, and upgrades an older layout in place (migrate.go: columns added, re-keyed tables
// moved aside and copied, never dropped); it records the layout version in hunt_schema only
// once the upgrade is complete, and refuses a newer one. CheckLayout is how the commands that
// act on the coordination state refuse any other layout. ApplyRetention sets the TTLs of
// findings and commit rows (retention.go), refusing settings that would hide committed
// findings.
package chstore
