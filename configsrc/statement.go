package configsrc

import "strings"

// Parameter names the runner binds on every hunt statement. They are prefixed hr_ so they
// cannot collide with a hunt's own parameters.
const (
	// ParamLimit caps the rows a run fetches: the hunt's max_findings plus one, so the runner
	// can tell "exactly at the cap" from "over it".
	ParamLimit = "hr_limit"
	// ParamMaxFindingBytes is the per-finding byte cap: a longer document is sent as a short
	// truncation record instead (see FindingsQuery).
	ParamMaxFindingBytes = "hr_max_finding_bytes"
	// ParamMaxRunBytes is the per-run byte cap: rows are sent while the bytes of the rows
	// before them (document plus ParamRowBytes each) are under it.
	ParamMaxRunBytes = "hr_max_run_bytes"
	// ParamRowBytes is what one stored row costs the runner beyond its document (its labels).
	ParamRowBytes = "hr_row_bytes"
)

// FindingsQuery is the exact statement the runner sends for a hunt query, and the statement
// the server-side check parses: every result row becomes one JSON document (formatRowNoNewline
// keeps the column names and ClickHouse's own JSON rendering of every type), hr_total counts
// every row before the limit, and the order is deterministic (by the document's hash, then the
// document), so a capped run always keeps the same findings. The runner, not the hunt, writes
// the rows into hunt_findings: a hunt statement only ever reads.
//
// Findings are bounded in bytes on the server, so a result the runner cannot hold is never
// sent: a document longer than ParamMaxFindingBytes becomes a truncation record (valid JSON:
// its length, its hash, so distinct findings stay distinct, and an escaped prefix that fits
// the cap) counted in hr_truncated, and QUALIFY stops the rows once those before them reach
// ParamMaxRunBytes. The first row always passes, so hr_total is known even then.
//
// The newlines around the query keep a trailing line comment from swallowing the closing
// bracket; the lexical check keeps the query's own brackets balanced, so it cannot close the
// wrapper's. The wrapper holds one subquery (the hunt's) so the server-side check can tell it
// from the hunt's own tree.
func FindingsQuery(query string) string {
	const maxF = "{" + ParamMaxFindingBytes + ":UInt64}"
	return "WITH formatRowNoNewline('JSONEachRow', *) AS hr_document\n" +
		"SELECT if(length(hr_document) <= " + maxF + ", hr_document, concat('{\"hr_truncated_bytes\":', toString(length(hr_document)), " +
		"',\"hr_hash\":\"', hex(cityHash64(hr_document)), '\",\"hr_prefix\":', toJSONString(leftUTF8(hr_document, intDiv(" + maxF + ", 8))), '}')) AS hr_finding, " +
		"count() OVER () AS hr_total, countIf(length(hr_document) > " + maxF + ") OVER () AS hr_truncated, " +
		"sum(length(hr_finding) + {" + ParamRowBytes + ":UInt64}) OVER (ORDER BY cityHash64(hr_finding), hr_finding ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS hr_before\n" +
		"FROM (\n" + TrimQuery(query) + "\n)\n" +
		"QUALIFY hr_before < {" + ParamMaxRunBytes + ":UInt64}\n" +
		"ORDER BY cityHash64(hr_finding), hr_finding\nLIMIT {" + ParamLimit + ":UInt64}"
}

// TrimQuery drops trailing semicolons and blanks, which a subquery cannot hold.
func TrimQuery(q string) string {
	return strings.TrimRight(strings.TrimSpace(q), "; \t\r\n")
}
