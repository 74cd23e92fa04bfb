package configsrc

import "strings"

// Parameter names the runner binds on every hunt statement. They are prefixed hr_ so they
// cannot collide with a hunt's own parameters.
const (
	// ParamLimit caps the rows a run fetches: the hunt's max_findings plus one, so the runner
	// can tell "exactly at the cap" from "over it".
	ParamLimit = "hr_limit"
)

// FindingsQuery is the exact statement the runner sends for a hunt query, and the statement
// the server-side check parses: every result row becomes one JSON document (formatRowNoNewline
// keeps the column names and ClickHouse's own JSON rendering of every type), hr_total counts
// every row before the limit, and the order is deterministic (by the document's hash, then the
// document), so a capped run always keeps the same findings. The runner, not the hunt, writes
// the rows into hunt_findings: a hunt statement only ever reads.
//
// The newlines around the query keep a trailing line comment from swallowing the closing
// bracket; the lexical check keeps the query's own brackets balanced, so it cannot close the
// wrapper's.
func FindingsQuery(query string) string {
	return "SELECT formatRowNoNewline('JSONEachRow', *) AS hr_finding, count() OVER () AS hr_total\nFROM (\n" +
		TrimQuery(query) + "\n)\nORDER BY cityHash64(hr_finding), hr_finding\nLIMIT {" + ParamLimit + ":UInt64}"
}

// TrimQuery drops trailing semicolons and blanks, which a subquery cannot hold.
func TrimQuery(q string) string {
	return strings.TrimRight(strings.TrimSpace(q), "; \t\r\n")
}
