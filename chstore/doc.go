// Package chstore opens hunt-runner's connections to ClickHouse; it holds no schema and builds
// no SQL on hunt-runner's tables (those are the store's: store/schema for the tables, store for
// the statements).
//
// Options names the server by URL (clickhouse:// for the native protocol, http(s):// for HTTP),
// the user, and a password that comes from the environment or a file, never a flag. Open
// retries only what waiting can fix (DNS, refused, timeouts) within ConnectTimeout and
// classifies failures as ErrDNS, ErrRefused, ErrTimeout, ErrAuth, ErrUnknownDatabase, ErrTLS or
// ErrConfig. The password never appears in a log line or an error: URLs are shown through Redact
// and driver errors are scrubbed before they leave this package.
//
// Consistency is connection-level: Open resolves the mode from the engines of the coordination
// tables (read by schema.Engines) and puts its settings on every statement of the connection.
package chstore
