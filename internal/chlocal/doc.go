// Package chlocal serves ClickHouse's HTTP interface over chDB, ClickHouse
// built as a shared library (libchdb.so), loaded at run time with purego so
// that no cgo is needed and `go build ./...` works without the library.
//
// It exists so that tests and `hunt-runner dev` run against the real
// ClickHouse engine instead of a fake: clickhouse-go v2 with
// Protocol: clickhouse.HTTP talks to it unchanged. Production code never
// imports it; `hunt-runner run` always talks to a real server.
//
// What it reproduces of clickhouse-server: the clickhouse-go handshake,
// Native results re-framed for the client's client_protocol_version,
// settings per request (restored afterwards to a startup snapshot),
// param_* query parameters, INSERT bodies of any size, gzip/deflate request
// bodies, LZ4/ZSTD block compression, the exception header and body, /ping,
// and the defaults of a server (async_insert=0, mutations_sync=0,
// date_time_input_format=basic, implicit_select=0). An opt-in rewrite turns
// Replicated*MergeTree engines and ON CLUSTER clauses into their single-node
// forms, since chDB cannot replicate.
//
// Limits: HTTP only (no native TCP protocol); one chDB session per process,
// so requests are serialised and session state leaks between them (SET or
// USE sent as a statement, temporary tables); no authentication (user and
// password are ignored); no session_id sessions, external tables, progress
// headers or streaming (results are buffered); a request whose client gave
// up still runs to completion; one engine per process (a second Start
// fails). GET /chlocal/stats reports how many SQL requests were served.
//
// For tests it adds what a real server cannot do on demand: fault rules
// (Options.Faults, SetFaults, PUT/GET/DELETE /chlocal/faults) that answer
// chosen statements late, hold them before they run, or answer them with a
// ClickHouse exception before or after they ran; and a bounded statement log
// (GET /chlocal/log) of each statement's SQL and settings as received.
//
// It answers only loopback clients that name a loopback Host and are not web
// pages (Options.AllowRemote relaxes the first two), because it runs
// whatever it is sent with full rights. See docs/chlocal.md.
package chlocal
