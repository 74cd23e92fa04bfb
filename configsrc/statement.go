package configsrc

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hunt-runner/hunt-runner/hunt"
)

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

// ParamExceptionPrefix starts the names of the parameters that carry exception values
// (ExceptionsQuery): hr_x<k>_<m>_v and hr_x<k>_<m>_r, exception k, match column m.
const ParamExceptionPrefix = "hr_x"

// ExceptionsQuery is the statement the runner sends for a hunt query with live exceptions, and
// the values of its exception parameters. With none it is FindingsQuery itself, byte for byte,
// so a hunt without live exceptions sends what it always sent.
//
// Each row of the hunt's result gets hr_exception: the number (from 1, in live's order) of the
// first exception it matches, 0 for none, and hr_hits, the rows each exception matched (an
// array in live's order, over the whole result). Rows with 0 are findings exactly as in
// FindingsQuery (hr_total, hr_truncated and the byte cap count only them; their document is
// the only one formatted); of the excluded rows one is kept, with an empty document, so that
// hr_hits arrives even when every row was excluded, and it comes first. The excluded rows are
// dropped before the sorted window, so they cost the statement little and never reach the
// runner. Values are query parameters (Array(String)), compared with the column's text
// (toString) or, for IP ranges, with isIPAddressInRange; the column names are plain identifiers
// (the decoder's rule) and quoted. A where: expression is placed in brackets it cannot close
// (checkWhere), after its own offline and server checks.
//
// The parameter hr_limit of this statement must be max_findings + 2: the marker row comes first.
func ExceptionsQuery(query string, live []hunt.Exception) (string, map[string]string) {
	if len(live) == 0 {
		return FindingsQuery(query), nil
	}
	params := map[string]string{}
	var conds, hitCounts []string
	for k, e := range live {
		// One frameless count per exception: cheaper than one array aggregate (measured).
		hitCounts = append(hitCounts, fmt.Sprintf("countIf(hr_exception = %d) OVER ()", k+1))
		var terms []string
		for m, mt := range e.Match {
			if !exceptionColumnOK(mt.Column) {
				// The decoder admits only plain names; any other never reaches the text, and
				// the exception then matches nothing rather than more than it says.
				terms = append(terms, "0")
				continue
			}
			col := "toString(`" + mt.Column + "`)"
			var alts []string
			if len(mt.Values) > 0 {
				p := fmt.Sprintf("%s%d_%d_v", ParamExceptionPrefix, k+1, m+1)
				params[p] = stringArray(mt.Values)
				alts = append(alts, col+" IN {"+p+":Array(String)}")
			}
			if len(mt.Ranges) > 0 {
				p := fmt.Sprintf("%s%d_%d_r", ParamExceptionPrefix, k+1, m+1)
				params[p] = stringArray(mt.Ranges)
				// isIPAddressInRange refuses text that is no address, so such text is replaced
				// by one and the result is then discarded.
				ip := "(isIPv4String(" + col + ") OR isIPv6String(" + col + "))"
				alts = append(alts, "("+ip+" AND arrayExists(hr_r -> isIPAddressInRange(if("+ip+", "+col+", '::'), hr_r), {"+p+":Array(String)}))")
			}
			terms = append(terms, "("+strings.Join(alts, " OR ")+")")
		}
		if e.Where != "" {
			terms = append(terms, "(\n"+e.Where+"\n)")
		}
		if len(terms) == 0 {
			terms = append(terms, "0") // the decoder requires match:; a hunt built by hand without one matches nothing
		}
		conds = append(conds, strings.Join(terms, " AND ")+", "+strconv.Itoa(k+1))
	}
	const maxF = "{" + ParamMaxFindingBytes + ":UInt64}"
	return "SELECT if(hr_exception = 0, if(length(hr_document) <= " + maxF + ", hr_document, concat('{\"hr_truncated_bytes\":', toString(length(hr_document)), " +
		"',\"hr_hash\":\"', hex(cityHash64(hr_document)), '\",\"hr_prefix\":', toJSONString(leftUTF8(hr_document, intDiv(" + maxF + ", 8))), '}')), '') AS hr_finding, " +
		"countIf(hr_exception = 0) OVER () AS hr_total, countIf(hr_exception = 0 AND length(hr_document) > " + maxF + ") OVER () AS hr_truncated, " +
		"sum(if(hr_exception = 0, length(hr_finding) + {" + ParamRowBytes + ":UInt64}, 0)) OVER (ORDER BY cityHash64(hr_finding), hr_finding ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS hr_before, " +
		"hr_exception, hr_hits\n" +
		"FROM (SELECT hr_document, hr_exception, [" + strings.Join(hitCounts, ", ") + "] AS hr_hits, " +
		"countIf(hr_exception != 0) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS hr_nth\n" +
		"FROM (SELECT if(hr_exception = 0, formatRowNoNewline('JSONEachRow', *), '') AS hr_document, toUInt16(multiIf(" + strings.Join(conds, ", ") + ", 0)) AS hr_exception FROM (\n" +
		TrimQuery(query) + "\n))\n" +
		"QUALIFY hr_exception = 0 OR hr_nth = 1)\n" +
		"QUALIFY hr_exception != 0 OR hr_before < {" + ParamMaxRunBytes + ":UInt64}\n" +
		"ORDER BY hr_exception = 0, cityHash64(hr_finding), hr_finding\nLIMIT {" + ParamLimit + ":UInt64}", params
}
