package configsrc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ErrQueryRefused is wrapped by CheckWithServer when the server's parser rejects a hunt query
// or shows it to be something other than a read-only SELECT.
var ErrQueryRefused = errors.New("hunt query refused")

var astFunctionRe = regexp.MustCompile(`^\s*Function (\S+)`)

// CheckWithServer asks the ClickHouse server's own parser about a hunt's query: EXPLAIN AST,
// with the window parameters replaced by typed literals (the statement is parsed, not run).
// The server is the authority: whatever its parser makes of the text is what would run. It
// checks that the statement is a SELECT (or UNION of SELECTs) and calls no function that
// reaches off the server.
func CheckWithServer(ctx context.Context, conn driver.Conn, h Hunt) error {
	q, err := substituteParams(h.Query)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrQueryRefused, err)
	}
	rows, err := conn.Query(ctx, "EXPLAIN AST "+q)
	if err != nil {
		return fmt.Errorf("%w: the server's parser says: %s", ErrQueryRefused, serverMessage(err))
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("read EXPLAIN AST: %w", err)
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: the server's parser says: %s", ErrQueryRefused, serverMessage(err))
	}
	if len(lines) == 0 {
		return fmt.Errorf("%w: EXPLAIN AST returned nothing", ErrQueryRefused)
	}
	if top := strings.Fields(lines[0]); len(top) == 0 || (top[0] != "SelectWithUnionQuery" && top[0] != "SelectIntersectExceptQuery") {
		return fmt.Errorf("%w: the server parses the query as %s, not a SELECT", ErrQueryRefused, strings.TrimSpace(lines[0]))
	}
	for _, l := range lines {
		if m := astFunctionRe.FindStringSubmatch(l); m != nil {
			if why, bad := offServerReason(m[1]); bad {
				return fmt.Errorf("%w: query calls %s(), which %s; a hunt may read only tables on the ClickHouse server", ErrQueryRefused, m[1], why)
			}
		}
	}
	return nil
}

// substituteParams replaces {name:Type} parameters with CAST literals of their type, so the
// server can parse the text without bound values.
func substituteParams(q string) (string, error) {
	toks, issue := lexQuery(q)
	if issue != nil {
		return "", errors.New(issue.msg)
	}
	var b strings.Builder
	last := 0
	for _, t := range toks {
		if t.kind != tkParam {
			continue
		}
		_, typ, ok := strings.Cut(strings.Trim(t.text, "{}"), ":")
		if !ok {
			return "", fmt.Errorf("parameter %s has no type", t.text)
		}
		b.WriteString(q[last:t.pos])
		fmt.Fprintf(&b, "CAST('2000-01-01 00:00:00', '%s')", strings.ReplaceAll(strings.TrimSpace(typ), "'", "\\'"))
		last = t.pos + len(t.text)
	}
	b.WriteString(q[last:])
	return b.String(), nil
}

// serverMessage trims a ClickHouse exception to its message, without the stack trace.
func serverMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "message: "); i >= 0 { // drop transport prefixes such as "sendQuery: [HTTP 400] code: 62,"
		msg = msg[i+len("message: "):]
	}
	if i := strings.Index(msg, "Stack trace"); i > 0 {
		msg = msg[:i]
	}
	return strings.TrimSpace(msg)
}
