// Package hunttest runs hunts the way a fire does, without the fire's writes: unit tests of a
// hunt against fixture rows (`hunt-runner test`, files *.test.yaml next to the hunts), and
// previews over past windows (`preview`, `diff`).
//
// A test creates its fixture tables as the hunt names them (logs.auth_events) in databases it
// creates for the test and drops afterwards — on the embedded engine, or on a server where
// those databases do not exist — so the statement checked and run is the hunt's own, never a
// rewrite. The hunt runs through runner.Preview (configsrc.FindingsQuery, the runner's
// parameters, settings and max_findings cap) after the server-side containment check the
// runner's loader applies (configsrc.CheckWithServer). Findings are compared with expect as a
// set of rows over the columns expect names, each value read by the hunt's column type by the
// server itself (format(JSONEachRow, …)), so 5 and "5", or 2026-01-01T00:01:00Z and
// 2026-01-01 00:01:00.000, are equal exactly when ClickHouse says so.
package hunttest
