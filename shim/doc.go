// Package shim is the KEDA metrics-api adapter (`hunt-runner shim`): it answers KEDA's HTTP
// polls with one number per query of a catalogue (the built-in one, builtin.yaml, or a
// --queries file), so KEDA can size the runner Deployment from the due backlog with no runner
// alive.
//
// The built-in queries carry no SQL of their own: backlog_view reads store's backlog view
// (store.BacklogValueSQL) as the scaler identity, and due_count runs store.DueCountSQL.
//
// A ClickHouse fault never reaches KEDA as an error: every success is cached per query and
// canonical parameters, and on any failure (unreachable, timeout, a query error, a bad result) the
// Server answers 200 with the last good value, or the query's cold value when it has none, and
// says so in the answer's held fields and metrics. Only configuration mistakes (an unknown
// query, a bad parameter, a missing token) are 4xx; readiness is never tied to ClickHouse.
// A Server is safe for concurrent use: concurrent polls of one query share one fetch.
//
// docs/shim.md is the operator's view.
package shim
