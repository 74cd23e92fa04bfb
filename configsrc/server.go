package configsrc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
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
// reaches off the server. A syntax error names its line and column in the query as written.
func CheckWithServer(ctx context.Context, conn driver.Conn, h Hunt) error {
	q, subs, err := substituteParams(h.Query)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrQueryRefused, err)
	}
	rows, err := conn.Query(ctx, explainPrefix+q)
	if err != nil {
		return fmt.Errorf("%w: the server's parser says: %s", ErrQueryRefused, subs.restore(serverMessage(err), h.Query))
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
		return fmt.Errorf("%w: the server's parser says: %s", ErrQueryRefused, subs.restore(serverMessage(err), h.Query))
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

const explainPrefix = "EXPLAIN AST "

// substitution is one parameter replaced by a literal: at..end in the text sent, orig as written.
type substitution struct {
	at, end int
	orig    string
	literal string
}

type substitutions []substitution

// substituteParams replaces {name:Type} parameters with CAST literals of their type, so the
// server can parse the text without bound values. Each parameter gets its own second, so that
// restore can tell them apart in an error message.
func substituteParams(q string) (string, substitutions, error) {
	toks, issue := lexQuery(q)
	if issue != nil {
		return "", nil, errors.New(issue.msg)
	}
	var b strings.Builder
	var subs substitutions
	last := 0
	for _, t := range toks {
		if t.kind != tkParam {
			continue
		}
		_, typ, ok := strings.Cut(strings.Trim(t.text, "{}"), ":")
		if !ok {
			return "", nil, fmt.Errorf("parameter %s has no type", t.text)
		}
		b.WriteString(q[last:t.pos])
		lit := fmt.Sprintf("CAST('2000-01-01 00:00:%02d', '%s')", len(subs)%60, strings.ReplaceAll(strings.TrimSpace(typ), "'", "\\'"))
		subs = append(subs, substitution{at: b.Len(), end: b.Len() + len(lit), orig: t.text, literal: lit})
		b.WriteString(lit)
		last = t.pos + len(t.text)
	}
	b.WriteString(q[last:])
	return b.String(), subs, nil
}

var (
	failedAtRe      = regexp.MustCompile(`failed at position (\d+)`)
	serverLineColRe = regexp.MustCompile(` \(line \d+, col \d+\)`)
)

// restore rewrites a server message about the substituted text in terms of the query as
// written: "failed at position N" (a byte offset into what was sent) becomes a line and column
// of the query, and the literals go back to the parameters the author wrote.
func (subs substitutions) restore(msg, query string) string {
	if m := failedAtRe.FindStringSubmatchIndex(msg); m != nil {
		if pos, err := strconv.Atoi(msg[m[2]:m[3]]); err == nil {
			off := subs.original(pos - 1 - len(explainPrefix))
			if off >= 0 && off <= len(query) {
				line := 1 + strings.Count(query[:off], "\n")
				col := 1 + off - (strings.LastIndex(query[:off], "\n") + 1)
				// The server's own "(line L, col C)" counts in the substituted text: drop it.
				rest := serverLineColRe.ReplaceAllString(msg[m[1]:], "")
				msg = msg[:m[0]] + fmt.Sprintf("failed at line %d, column %d of the query", line, col) + rest
			}
		}
	}
	for _, s := range subs {
		msg = strings.ReplaceAll(msg, s.literal, s.orig)
	}
	return msg
}

// original maps a byte offset in the substituted text back to the query as written.
func (subs substitutions) original(off int) int {
	shift := 0
	for _, s := range subs {
		if off < s.at {
			break
		}
		if off < s.end {
			return s.at - shift
		}
		shift += (s.end - s.at) - len(s.orig)
	}
	return off - shift
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
