package configsrc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ErrQueryRefused is wrapped by CheckWithServer when the server's parser rejects a hunt query
// or shows it to be something other than a read-only SELECT within the policy.
var ErrQueryRefused = errors.New("hunt query refused")

// RefusedError is a refusal by CheckWithServer. Line and Column place it in the hunt's query
// (1-based) when the server named a position, and are 0 otherwise. It wraps ErrQueryRefused.
type RefusedError struct {
	Line, Column int
	Msg          string
}

func (e *RefusedError) Error() string { return ErrQueryRefused.Error() + ": " + e.Msg }
func (e *RefusedError) Unwrap() error { return ErrQueryRefused }

func refused(format string, args ...any) error {
	return &RefusedError{Msg: fmt.Sprintf(format, args...)}
}

// CheckWithServer asks the ClickHouse server's own parser about the exact statement the runner
// sends for h (FindingsQuery), with every parameter replaced by a typed literal (the statement
// is parsed, never run). The server is the authority: whatever its parser makes of the text is
// what would run. The statement is accepted only when
//   - its tree outside the hunt's subquery is the wrapper's, node for node, so the hunt could
//     not close the wrapper's brackets and add a UNION, a JOIN or a clause of its own;
//   - the hunt's subtree holds only node kinds of a SELECT (anything unknown is refused);
//   - every table function is allowed by p, no function reaches off the server unless allowed;
//   - no name is in system or information_schema (unless p.AllowSystem) or in
//     p.CoordinationDatabase;
//   - every SETTINGS name, as the server itself formats it (formatQuery), is on the allowlist.
//
// A syntax error names its line and column in the query as written.
func CheckWithServer(ctx context.Context, conn driver.Conn, h Hunt, p Policy) error {
	if err := identifiersReadable(h.Query); err != nil {
		return err
	}
	stmt, subs, err := substituteParams(FindingsQuery(h.Query))
	if err != nil {
		return refused("%v", err)
	}
	head := findingsHeadLen()
	tree, err := explain(ctx, conn, stmt)
	if err != nil {
		if !isServerException(err) {
			return fmt.Errorf("ask the server to parse the query: %w", err) // not a verdict: retried on the next reload
		}
		return serverRefusal(err, subs, head, h.Query)
	}
	ref, err := referenceTree(ctx, conn)
	if err != nil {
		return err
	}
	hunt, err := matchWrapper(ref, tree)
	if err != nil {
		return err
	}
	sets, err := walkHunt(hunt, p)
	if err != nil {
		return err
	}
	if sets > 0 {
		return checkServerSettings(ctx, conn, stmt, sets)
	}
	return nil
}

// ResolveWithServer has the server resolve every name the hunt's statement uses (databases,
// tables, columns, functions) without running it: EXPLAIN QUERY TREE of the exact statement,
// analysed as the connection's user. validate runs it after CheckWithServer, as an operator
// with read access to the sources; the runner does not (its coordination identity cannot read
// source tables, and a table created after the hunt must not make the hunt invalid). A server
// refusal (an unknown table or column, say) is a RefusedError placed in the query.
func ResolveWithServer(ctx context.Context, conn driver.Conn, h Hunt) error {
	stmt, subs, err := substituteParams(FindingsQuery(h.Query))
	if err != nil {
		return refused("%v", err)
	}
	rows, err := conn.Query(ctx, resolvePrefix+stmt)
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
		rows.Close()
	}
	if err == nil {
		return nil
	}
	if !isServerException(err) {
		return fmt.Errorf("ask the server to resolve the query's names: %w", err)
	}
	r := serverRefusal(err, subs, findingsHeadLen()-len(explainPrefix)+len(resolvePrefix), h.Query).(*RefusedError)
	r.Msg = strings.Replace(r.Msg, "the server's parser says: ", "the server says: ", 1)
	return r
}

const resolvePrefix = "EXPLAIN QUERY TREE "

// identifiersReadable refuses quoted identifiers the server's EXPLAIN output could not show on
// one line: an escaped newline in a name would print as lines of its own, and a hunt could
// forge tree nodes with it.
func identifiersReadable(q string) error {
	toks, issue := lexQuery(q)
	if issue != nil {
		return refused("%s", issue.msg)
	}
	for _, t := range toks {
		if t.kind == tkQuoted && (strings.Contains(t.text, "\\") || hasControl(t.text)) {
			return refused("a quoted identifier holds a backslash or control character; rename the column or use an alias")
		}
	}
	return nil
}

// findingsHeadLen is the length of the wrapper's text before the hunt's query.
func findingsHeadLen() int { return strings.Index(FindingsQuery("\x00"), "\x00") }

const explainPrefix = "EXPLAIN AST "

// astNode is one line of EXPLAIN AST output: its label without the children count.
type astNode struct {
	label    string
	kids     []*astNode
	declared int // the count the server printed, checked against kids
}

// kind is the node type, the label's first word.
func (n *astNode) kind() string {
	k, _, _ := strings.Cut(n.label, " ")
	return k
}

// name is the label's second word up to an "(alias" or the end: a function's or identifier's
// name.
func (n *astNode) name() string {
	_, rest, _ := strings.Cut(n.label, " ")
	if i := strings.Index(rest, " (alias "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

var childrenRe = regexp.MustCompile(` \(children ([0-9]+)\)$`)

// explain runs EXPLAIN AST and reads the tree, checking that every node has the children the
// server says it has; output that does not read as one consistent tree is refused.
func explain(ctx context.Context, conn driver.Conn, stmt string) (*astNode, error) {
	rows, err := conn.Query(ctx, explainPrefix+stmt)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, fmt.Errorf("read EXPLAIN AST: %w", err)
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return parseAST(lines)
}

var errUnreadable = refused("the server's parse of the query could not be read as one tree; hunt-runner refuses what it cannot check")

func parseAST(lines []string) (*astNode, error) {
	var stack []*astNode // stack[d] is the open node at depth d
	var root *astNode
	for _, l := range lines {
		label := strings.TrimLeft(l, " ")
		depth := len(l) - len(label)
		if label == "" || strings.TrimSpace(label) != label {
			return nil, errUnreadable
		}
		n := &astNode{label: label}
		if m := childrenRe.FindStringSubmatchIndex(label); m != nil {
			n.declared, _ = strconv.Atoi(label[m[2]:m[3]])
			n.label = label[:m[0]]
		}
		switch {
		case depth == 0 && root == nil:
			root = n
		case depth >= 1 && depth <= len(stack):
			parent := stack[depth-1]
			parent.kids = append(parent.kids, n)
		default:
			return nil, errUnreadable
		}
		stack = append(stack[:depth], n)
	}
	if root == nil || !consistent(root) {
		return nil, errUnreadable
	}
	return root, nil
}

func consistent(n *astNode) bool {
	if len(n.kids) != n.declared {
		return false
	}
	for _, k := range n.kids {
		if !consistent(k) {
			return false
		}
	}
	return true
}

// referenceTree is the server's tree of the wrapper around a trivial query: the shape every
// hunt's statement must have outside its subquery. It is asked of the same server, so a
// version that prints the wrapper differently still compares like with like.
func referenceTree(ctx context.Context, conn driver.Conn) (*astNode, error) {
	stmt, _, err := substituteParams(FindingsQuery("SELECT 1"))
	if err != nil {
		return nil, err
	}
	ref, err := explain(ctx, conn, stmt)
	if err != nil {
		return nil, fmt.Errorf("parse the findings wrapper: %w", err)
	}
	return ref, nil
}

// matchWrapper compares the statement's tree with the reference, node for node, except under
// the reference's one Subquery, and returns the hunt's subtree there.
func matchWrapper(ref, got *astNode) (*astNode, error) {
	var hunt *astNode
	var walk func(r, g *astNode) bool
	walk = func(r, g *astNode) bool {
		if r.label != g.label || len(r.kids) != len(g.kids) {
			return false
		}
		if r.kind() == "Subquery" {
			if hunt != nil || len(g.kids) != 1 {
				return false
			}
			hunt = g.kids[0]
			return true
		}
		for i := range r.kids {
			if !walk(r.kids[i], g.kids[i]) {
				return false
			}
		}
		return true
	}
	if !walk(ref, got) || hunt == nil {
		return nil, refused("the query does not stay inside hunt-runner's wrapper (it closes the brackets around it and adds a clause, a UNION or a JOIN of its own); a hunt query must be one SELECT with balanced brackets")
	}
	if hunt.kind() != "SelectWithUnionQuery" {
		return nil, refused("the server parses the query as %s, not a SELECT", hunt.kind())
	}
	return hunt, nil
}

// selectKinds are the node kinds EXPLAIN AST prints for a SELECT. A kind not listed (an INSERT,
// a new clause of a newer server) is refused until someone looks at it.
var selectKinds = map[string]bool{
	"SelectWithUnionQuery": true, "SelectIntersectExceptQuery": true, "SelectQuery": true,
	"ExpressionList": true, "Function": true, "Identifier": true, "TableIdentifier": true,
	"Literal": true, "Asterisk": true, "QualifiedAsterisk": true,
	"ColumnsRegexpMatcher": true, "ColumnsListMatcher": true,
	"QualifiedColumnsRegexpMatcher": true, "QualifiedColumnsListMatcher": true,
	"ColumnsTransformerList": true, "ColumnsApplyTransformer": true, "ColumnsExceptTransformer": true,
	"ColumnsReplaceTransformer": true, "ColumnsReplaceTransformer::Replacement": true,
	"TablesInSelectQuery": true, "TablesInSelectQueryElement": true, "TableExpression": true,
	"TableJoin": true, "ArrayJoin": true, "Subquery": true, "WithElement": true,
	"OrderByElement": true, "InterpolateElement": true, "WindowDefinition": true,
	"WindowListElement": true, "SampleRatio": true, "Set": true,
}

// walkHunt checks every node of the hunt's subtree and counts its SETTINGS clauses (Set nodes).
func walkHunt(root *astNode, p Policy) (sets int, err error) {
	allowed := p.allowedTableFunctions()
	var walk func(n, parent *astNode) error
	walk = func(n, parent *astNode) error {
		kind := n.kind()
		if !selectKinds[kind] {
			return refused("the query holds a %s, which is not part of a plain SELECT", safeKind(kind))
		}
		switch kind {
		case "Set":
			sets++
		case "Function":
			name := n.name()
			lower := strings.ToLower(name)
			if parent != nil && parent.kind() == "TableExpression" && !allowed[lower] {
				if why, bad := offServerReason(lower); bad {
					return refused("query calls %s(), which %s; a hunt may read only tables on the ClickHouse server", safeName(name), why)
				}
				return refused("query calls table function %s(); a hunt may read only tables (an operator can allow it with --allow-table-functions)", safeName(name))
			}
			if why, bad := offServerReason(lower); bad && !allowed[lower] {
				return refused("query calls %s(), which %s; a hunt may read only tables on the ClickHouse server", safeName(name), why)
			}
			if db, _, ok := strings.Cut(name, "."); ok {
				if issue := p.schemaIssue(db); issue != "" {
					return refused("%s", issue)
				}
			}
		case "Identifier", "TableIdentifier":
			// The printed name joins its parts with dots whatever their quoting, so a quoted
			// name with a dot in it is read as qualified: refused if it looks like one of ours,
			// never the other way round.
			if db, _, ok := strings.Cut(n.name(), "."); ok {
				if issue := p.schemaIssue(db); issue != "" {
					return refused("%s", issue)
				}
			} else if kind == "TableIdentifier" {
				if issue := p.tableIssue(n.name()); issue != "" {
					return refused("%s", issue)
				}
			}
		case "Literal":
			if p.CoordinationDatabase != "" && strings.Contains(n.label, "'"+p.CoordinationDatabase+".") {
				// dictGet, joinGet and friends name tables in strings.
				return refused("query names hunt-runner's own database in a string; a hunt may read only source data")
			}
		}
		for _, k := range n.kids {
			if err := walk(k, n); err != nil {
				return err
			}
		}
		return nil
	}
	return sets, walk(root, nil)
}

func safeKind(k string) string {
	if regexp.MustCompile(`^[A-Za-z:]{1,64}$`).MatchString(k) {
		return k
	}
	return "part the server does not describe"
}

// checkServerSettings reads every SETTINGS clause of the statement as the server formats it,
// where quoting and spelling are normalised, and checks the names against the allowlist. It
// must find as many clauses as the tree has Set nodes, or the statement is refused.
func checkServerSettings(ctx context.Context, conn driver.Conn, stmt string, want int) error {
	var formatted string
	if err := conn.QueryRow(ctx, "SELECT formatQuery("+quoteString(stmt)+")").Scan(&formatted); err != nil {
		if !isServerException(err) {
			return fmt.Errorf("ask the server to format the query: %w", err)
		}
		return refused("the server could not format the query to read its SETTINGS: %s", serverMessage(err))
	}
	toks, issue := lexQuery(formatted)
	if issue != nil {
		return errUnreadable
	}
	var issues issueList
	found := 0
	for i := 0; i < len(toks); i++ {
		if toks[i].kind == tkWord && strings.EqualFold(toks[i].text, "SETTINGS") {
			if end, ok := settingsClause(toks, i, &issues); ok {
				found++
				i = end - 1
			}
		}
	}
	if len(issues) > 0 {
		return refused("%s", issues[0].msg)
	}
	if found < want {
		return errUnreadable
	}
	return nil
}

// quoteString writes s as a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

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
			return "", nil, fmt.Errorf("a query parameter has no type")
		}
		b.WriteString(q[last:t.pos])
		lit := fmt.Sprintf("CAST('2000-01-01 00:00:%02d', %s)", len(subs)%60, quoteString(strings.TrimSpace(typ)))
		if typ := strings.TrimSpace(typ); !strings.HasPrefix(typ, "DateTime") {
			lit = "CAST('1', " + quoteString(typ) + ")" // the same in every statement, so the wrapper compares equal
		}
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

// serverRefusal turns a server error about the statement into a refusal placed in the query as
// written: "failed at position N" (a byte offset into what was sent) becomes a line and column
// of the query, and the literals go back to the parameters the author wrote.
func serverRefusal(err error, subs substitutions, head int, query string) error {
	msg := serverMessage(err)
	e := &RefusedError{}
	if m := failedAtRe.FindStringSubmatchIndex(msg); m != nil {
		if pos, err := strconv.Atoi(msg[m[2]:m[3]]); err == nil {
			off := subs.original(pos-1-len(explainPrefix)) - head
			if off >= 0 && off <= len(query) {
				e.Line = 1 + strings.Count(query[:off], "\n")
				e.Column = 1 + off - (strings.LastIndex(query[:off], "\n") + 1)
				// The server's own "(line L, col C)" counts in the substituted text: drop it.
				rest := serverLineColRe.ReplaceAllString(msg[m[1]:], "")
				msg = msg[:m[0]] + fmt.Sprintf("failed at line %d, column %d of the query", e.Line, e.Column) + rest
			} else {
				// Past the query's end: the wrapper's closing text is what failed, which means
				// the query left something open.
				msg = msg[:m[0]] + "failed after the end of the query (is a bracket, string or comment left open?)" + serverLineColRe.ReplaceAllString(msg[m[1]:], "")
			}
		}
	}
	for _, s := range subs {
		msg = strings.ReplaceAll(msg, s.literal, s.orig)
	}
	e.Msg = "the server's parser says: " + msg
	return e
}

// original maps a byte offset in the substituted text back to the text before substitution.
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

var exceptionCodeRe = regexp.MustCompile(`\bcode: [0-9]+\b`)

// isServerException tells a verdict of the server (an exception: syntax error, unknown
// function) from a failure to reach it, which says nothing about the query.
func isServerException(err error) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) || exceptionCodeRe.MatchString(err.Error())
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
