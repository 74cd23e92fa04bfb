package configsrc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// ErrQueryRefused is wrapped by CheckWithServer when the server's parser rejects a hunt query
// or shows it to be something other than a read-only SELECT within the policy.
var ErrQueryRefused = errors.New("hunt query refused")

// RefusedError is a refusal by CheckWithServer. Line and Column place it in the hunt's query
// (1-based) when the server named a position, and are 0 otherwise. It wraps ErrQueryRefused.
type RefusedError struct {
	Line, Column int
	Msg          string
	// File and FileLine, when FileLine > 0, place a refusal that is not in the query: of an
	// exception (its where: or match:), in the hunt's file or a shared list's.
	File                 string
	FileLine, FileColumn int
}

func (e *RefusedError) Error() string { return ErrQueryRefused.Error() + ": " + e.Msg }
func (e *RefusedError) Unwrap() error { return ErrQueryRefused }

func refused(format string, args ...any) error {
	return &RefusedError{Msg: fmt.Sprintf(format, args...)}
}

// CheckWithServer asks the ClickHouse server's own parser about the exact statement the runner
// sends for h (FindingsQuery), byte for byte, with the parameters bound out of band as the
// runner binds them (the statement is parsed, never run: EXPLAIN AST evaluates nothing). The
// server is the authority: whatever its parser makes of the text is what would run. The
// statement is accepted only when
//   - its tree outside the hunt's subquery is the wrapper's, node for node, so the hunt could
//     not close the wrapper's brackets and add a UNION, a JOIN or a clause of its own;
//   - the hunt's subtree holds only node kinds of a SELECT whose children the server prints
//     (anything unknown, or hiding expressions, is refused);
//   - every function is on the allowlist (functionAllowed), every table function too, with
//     literal arguments naming allowed databases (tableFunctionIssue), every dictionary allowed;
//   - no name is in system or information_schema (unless p.AllowSystem) or in
//     p.CoordinationDatabase;
//   - every SETTINGS name, as the server itself formats it (formatQuery), is on the allowlist,
//     with its value under the setting's ceiling.
//
// A syntax error names its line and column in the query as written.
//
// Every where: of h's exceptions is held to the same check, as the WHERE of a query over h's
// (whereCheckQuery); a refusal of one names the exception and is placed at its item.
func CheckWithServer(ctx context.Context, conn driver.Conn, h hunt.Hunt, p Policy) error {
	return checkWithServer(ctx, conn, h, p, nil)
}

// checkExceptionsWithServer is CheckWithServer's check of h's where: expressions.
func checkExceptionsWithServer(ctx context.Context, conn driver.Conn, h hunt.Hunt, p Policy, ref *astNode) error {
	return exceptionsVerdict(h, func(query string) error {
		var err error
		ref, err = checkQueryWithServer(ctx, conn, query, p, ref)
		return err
	})
}

// exceptionsVerdict is the verdict on h's where: expressions, given check, the verdict on one
// statement (each where: is checked as the WHERE of a query over h's, whereCheckQuery): the
// first refusal, named after its exception and placed at its item.
func exceptionsVerdict(h hunt.Hunt, check func(query string) error) error {
	for _, e := range h.Exceptions {
		if e.Where == "" {
			continue
		}
		err := check(whereCheckQuery(h.Query, e.Where))
		var re *RefusedError
		if errors.As(err, &re) {
			return &RefusedError{Msg: fmt.Sprintf("exception %s: where: %s", e.ID, strings.TrimPrefix(re.Msg, ErrQueryRefused.Error()+": ")), File: e.File, FileLine: e.Line, FileColumn: e.Col}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkWithServer is CheckWithServer against ref, the server's tree of the wrapper
// (referenceTree), asked once for a whole load; nil asks for it.
func checkWithServer(ctx context.Context, conn driver.Conn, h hunt.Hunt, p Policy, ref *astNode) error {
	ref, err := checkQueryWithServer(ctx, conn, h.Query, p, ref)
	if err != nil {
		return err
	}
	return checkExceptionsWithServer(ctx, conn, h, p, ref)
}

// checkQueryWithServer is the check of one query (a hunt's, or a where:'s check query) in its
// own statement, and returns the reference tree, asked only once the statement parsed when ref
// is nil, so that a syntax error costs one request.
func checkQueryWithServer(ctx context.Context, conn driver.Conn, query string, p Policy, ref *astNode) (*astNode, error) {
	if err := identifiersReadable(query); err != nil {
		return ref, err
	}
	stmt := FindingsQuery(query)
	tree, err := explain(ctx, conn, stmt)
	if err != nil {
		if !isServerException(err) {
			return ref, fmt.Errorf("ask the server to parse the query: %w", err) // not a verdict: retried on the next reload
		}
		return ref, serverRefusal(err, len(explainPrefix)+findingsHeadLen(), query)
	}
	if ref == nil {
		if ref, err = referenceTree(ctx, conn); err != nil {
			return nil, err
		}
	}
	sub, err := matchWrapper(ref, tree)
	if err != nil {
		return ref, err
	}
	return ref, judgeHunt(ctx, conn, stmt, sub, p)
}

// judgeHunt is the verdict on the hunt's subtree sub of statement stmt, which matched the
// wrapper: the allowlist walk, then the SETTINGS as the server formats them.
func judgeHunt(ctx context.Context, conn driver.Conn, stmt string, sub *astNode, p Policy) error {
	sets, err := walkHunt(sub, p)
	if err != nil {
		return err
	}
	if sets > 0 {
		return checkServerSettings(ctx, conn, stmt, sets)
	}
	return nil
}

// huntSubtree matches a statement's tree against the wrapper's and returns the hunt's part.
func huntSubtree(ctx context.Context, conn driver.Conn, tree *astNode) (*astNode, error) {
	ref, err := referenceTree(ctx, conn)
	if err != nil {
		return nil, err
	}
	return matchWrapper(ref, tree)
}

// checkParams are the values the check binds: any values of the parameters' types do, since
// the server substitutes them after parsing, as literals.
var checkParams = clickhouse.Parameters{ParamLimit: "1", ParamMaxFindingBytes: "1", ParamMaxRunBytes: "1",
	ParamRowBytes: "1", "window_start": "946684800", "window_end": "946684800"}

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

// childrenSuffix starts what the server ends a node's line with when the node has children:
// " (children N)". It is cut by hand, not by a regexp, since a load's check reads a line for
// every node of every hunt.
const childrenSuffix = " (children "

// cutChildren splits a line's label from the children count it ends with, if any.
func cutChildren(line string) (label string, declared int) {
	rest, ok := strings.CutSuffix(line, ")")
	i := strings.LastIndex(rest, childrenSuffix)
	if !ok || i < 0 {
		return line, 0
	}
	digits := rest[i+len(childrenSuffix):]
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return line, 0
	}
	declared, _ = strconv.Atoi(digits)
	return line[:i], declared
}

// explain runs EXPLAIN AST and reads the tree, checking that every node has the children the
// server says it has; output that does not read as one consistent tree is refused.
func explain(ctx context.Context, conn driver.Conn, stmt string) (*astNode, error) {
	rows, err := conn.Query(clickhouse.Context(ctx, clickhouse.WithParameters(checkParams)), explainPrefix+stmt)
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
		n := &astNode{}
		n.label, n.declared = cutChildren(label)
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
	ref, err := explain(ctx, conn, FindingsQuery("SELECT 1"))
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

// selectKinds are the node kinds EXPLAIN AST prints for a SELECT, with every expression under
// them printed as children. A kind not listed (an INSERT, a new clause of a newer server) is
// refused until someone looks at it, and so are the kinds whose expressions the server does not
// print: a named WINDOW clause (WindowListElement) and APPLY (ColumnsApplyTransformer), which
// calls a function given by name.
var selectKinds = map[string]bool{
	"SelectWithUnionQuery": true, "SelectIntersectExceptQuery": true, "SelectQuery": true,
	"ExpressionList": true, "Function": true, "Identifier": true, "TableIdentifier": true,
	"Literal": true, "Asterisk": true, "QualifiedAsterisk": true,
	"ColumnsRegexpMatcher": true, "ColumnsListMatcher": true,
	"QualifiedColumnsRegexpMatcher": true, "QualifiedColumnsListMatcher": true,
	"ColumnsTransformerList": true, "ColumnsExceptTransformer": true,
	"ColumnsReplaceTransformer": true, "ColumnsReplaceTransformer::Replacement": true,
	"TablesInSelectQuery": true, "TablesInSelectQueryElement": true, "TableExpression": true,
	"TableJoin": true, "ArrayJoin": true, "Subquery": true, "WithElement": true,
	"OrderByElement": true, "InterpolateElement": true, "WindowDefinition": true,
	"SampleRatio": true, "Set": true,
}

// hiddenKinds are refused with a message of their own: they are SELECT syntax, but their
// content is not in the server's tree, so it cannot be checked.
var hiddenKinds = map[string]string{
	"WindowListElement":       "a named window (WINDOW w AS (…)), whose definition the server's tree does not show; write the window inline, OVER (PARTITION BY … ORDER BY …)",
	"ColumnsApplyTransformer": "APPLY, which calls a function the server's tree does not name; call the function on the columns instead",
}

// inFunctions take a table (or subquery, or tuple) as their right-hand side: a bare identifier
// there is a table read.
var inFunctions = map[string]bool{
	"in": true, "notin": true, "globalin": true, "globalnotin": true,
	"nullin": true, "notnullin": true, "globalnullin": true, "globalnotnullin": true,
}

// walkHunt checks every node of the hunt's subtree and counts its SETTINGS clauses (Set nodes).
func walkHunt(root *astNode, p Policy) (sets int, err error) {
	// tfArg: n is an argument of a table function, checked there (tableFunctionIssue).
	var walk func(n, parent *astNode, tfArg bool) error
	walk = func(n, parent *astNode, tfArg bool) error {
		kind := n.kind()
		if why, hidden := hiddenKinds[kind]; hidden {
			return refused("the query uses %s", why)
		}
		if !selectKinds[kind] {
			return refused("the query holds a %s, which is not part of a plain SELECT", safeKind(kind))
		}
		tableFunction := false
		switch kind {
		case "Set":
			sets++
		case "Function":
			switch {
			case parent != nil && parent.kind() == "TableExpression":
				if err := tableFunctionIssue(n, p); err != nil {
					return err
				}
				tableFunction = true
			case tfArg && strings.EqualFold(n.name(), "REGEXP"):
				// merge(REGEXP('…'), …): the pattern was checked with the table function.
			default:
				if err := functionIssue(n, p); err != nil {
					return err
				}
			}
		case "Identifier", "TableIdentifier":
			if err := nameIssue(n.name(), kind == "TableIdentifier", p); err != nil {
				return err
			}
		case "Literal":
			if err := literalIssue(n, p); err != nil {
				return err
			}
		}
		for _, k := range n.kids {
			if tableFunction && k.kind() == "ExpressionList" {
				for _, a := range k.kids {
					if err := walk(a, k, true); err != nil {
						return err
					}
				}
				continue
			}
			if err := walk(k, n, false); err != nil {
				return err
			}
		}
		return nil
	}
	return sets, walk(root, nil, false)
}

// nameIssue checks a (maybe qualified) name the tree prints. The printed name joins its parts
// with dots whatever their quoting, so a quoted name with a dot in it is read as qualified:
// refused if it looks like one of ours, never the other way round.
func nameIssue(name string, table bool, p Policy) error {
	if db, _, ok := strings.Cut(name, "."); ok {
		if issue := p.schemaIssue(db); issue != "" {
			return refused("%s", issue)
		}
	} else if table {
		if issue := p.tableIssue(name); issue != "" {
			return refused("%s", issue)
		}
	}
	return nil
}

// literalIssue refuses a string naming hunt-runner's database, alone or as a qualifier: dictGet,
// joinGet, hasColumnInTable and table functions name databases and tables in strings.
func literalIssue(n *astNode, p Policy) error {
	if p.CoordinationDatabase == "" {
		return nil
	}
	lit := strings.TrimPrefix(n.label, "Literal ")
	if i := strings.Index(lit, " (alias "); i >= 0 {
		lit = lit[:i]
	}
	if strings.Contains(lit, "'"+p.CoordinationDatabase+".") || strings.Contains(lit, "'"+p.CoordinationDatabase+"'") {
		return refused("query names hunt-runner's own database in a string; a hunt may read only source data")
	}
	return nil
}

// args are the argument nodes of a function node (its first ExpressionList).
func args(n *astNode) []*astNode {
	if len(n.kids) == 0 || n.kids[0].kind() != "ExpressionList" {
		return nil
	}
	return n.kids[0].kids
}

// functionIssue checks a scalar, aggregate or window function call.
func functionIssue(n *astNode, p Policy) error {
	name := n.name()
	lower := strings.ToLower(name)
	if !p.functionAllowed(name) {
		if why, bad := offServerReason(lower); bad {
			return refused("query calls %s(), which %s; a hunt may read only tables on the ClickHouse server", safeName(name), why)
		}
		return refused("%s", functionRefusal(name))
	}
	if db, _, ok := strings.Cut(name, "."); ok { // a qualified function: a UDF of some database
		if issue := p.schemaIssue(db); issue != "" {
			return refused("%s", issue)
		}
	}
	a := args(n)
	if dictionarySet[lower] {
		if len(a) == 0 || a[0].kind() != "Literal" {
			return refused("%s() must name its dictionary in a plain string literal ('db.dictionary'); hunt-runner refuses what it cannot check", functionName(name))
		}
		if issue := p.dictionaryIssue(name, literalText(a[0])); issue != "" {
			return refused("%s", issue)
		}
	}
	if inFunctions[lower] && len(a) == 2 && a[1].kind() == "Identifier" {
		// x IN t reads table t (or a WITH alias of the query's, which is checked where it is defined).
		if err := nameIssue(a[1].name(), true, p); err != nil {
			return err
		}
	}
	return nil
}

// literalText is a Literal's value as the server prints it (a string keeps its quotes).
func literalText(n *astNode) string {
	lit := strings.TrimPrefix(n.label, "Literal ")
	if i := strings.Index(lit, " (alias "); i >= 0 {
		lit = lit[:i]
	}
	return lit
}

// intLiteral reads an integer Literal as the server prints it (UInt64_10, Int64_-1).
func intLiteral(n *astNode) (string, bool) {
	if n.kind() != "Literal" {
		return "", false
	}
	lit := literalText(n)
	for _, prefix := range []string{"UInt64_", "Int64_"} {
		if v, ok := strings.CutPrefix(lit, prefix); ok {
			return v, true
		}
	}
	return "", false
}

// tableFunctionIssue checks a table function: on the allowlist, and its arguments literals or
// names that can be proven not to reach hunt-runner's database or system tables. The default
// generators must have integer literal bounds within MaxGeneratedRows.
func tableFunctionIssue(n *astNode, p Policy) error {
	name := n.name()
	if !p.tableFunctionAllowed(name) {
		return refused("%s", tableFunctionRefusal(name))
	}
	lower := strings.ToLower(name)
	a := args(n)
	if slices.Contains(defaultTableFunctions, lower) && !p.allowedTableFunctions()[lower] {
		vals := make([]string, len(a))
		for i, arg := range a {
			v, ok := intLiteral(arg)
			if !ok {
				return refused("%s() takes integer literals here, so its size is known before it runs; an operator can lift that with --allow-table-functions %s", name, lower)
			}
			vals[i] = v
		}
		if rows, ok := generatedRows(lower, vals); !ok || rows > MaxGeneratedRows {
			return refused("%s() generates more than %d rows (or its bounds are not understood); narrow it, or an operator can lift the bound with --allow-table-functions %s", name, MaxGeneratedRows, lower)
		}
		return nil
	}
	if lower == "merge" && len(a) < 2 {
		return refused("merge() without a database reads the connection's current database, which cannot be checked; name the database: merge(db, 'regexp')")
	}
	for i, arg := range a {
		switch arg.kind() {
		case "Literal":
			lit := literalText(arg)
			if v, ok := plainString(lit); ok {
				if err := argNameIssue(v, p); err != nil {
					return err
				}
			} else if strings.HasPrefix(lit, "'") {
				return refused("%s() has a string argument with escapes; hunt-runner refuses what it cannot check", name)
			}
		case "Identifier":
			if err := argNameIssue(arg.name(), p); err != nil {
				return err
			}
		case "Function":
			if lower == "merge" && i == 0 && strings.EqualFold(arg.name(), "REGEXP") {
				if err := regexpDatabasesIssue(arg, p); err != nil {
					return err
				}
				continue
			}
			return refused("%s() has an argument that is an expression (such as currentDatabase()); table-function arguments must be literals, so that what they name can be checked", name)
		case "SelectWithUnionQuery", "Subquery":
			// view(SELECT …): the subquery is walked like any other.
		default:
			return refused("%s() has an argument that is not a literal; table-function arguments must be literals, so that what they name can be checked", name)
		}
	}
	return nil
}

// argNameIssue checks a name given to a table function, as a string or an identifier: it may
// be a database, a table or db.table, so it is checked as each.
func argNameIssue(v string, p Policy) error {
	if strings.Contains(v, ".") {
		return nameIssue(v, true, p)
	}
	if issue := cmpOrIssue(p.schemaIssue(v), p.tableIssue(v)); issue != "" {
		return refused("%s", issue)
	}
	return nil
}

func cmpOrIssue(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// regexpDatabasesIssue checks merge(REGEXP('…'), …): the pattern must be a plain literal that
// matches none of the databases a hunt may not read. Go's regexp is RE2's syntax, which
// ClickHouse uses; a pattern Go cannot compile is refused.
func regexpDatabasesIssue(fn *astNode, p Policy) error {
	a := args(fn)
	if len(a) != 1 || a[0].kind() != "Literal" {
		return refused("merge(REGEXP(…)) must take one string literal")
	}
	pat, ok := plainString(literalText(a[0]))
	if !ok {
		return refused("merge(REGEXP(…)) must take a plain string literal, without escapes")
	}
	return patternIssue(pat, p)
}

// patternIssue refuses a merge() database pattern that matches a database no hunt may read,
// or that hunt-runner cannot read.
func patternIssue(pat string, p Policy) error {
	re, err := regexp.Compile(pat)
	if err != nil {
		return refused("merge(REGEXP(…)): hunt-runner cannot read the pattern, so it cannot prove which databases it matches")
	}
	for _, db := range p.forbiddenDatabases() {
		for _, spelling := range []string{db, strings.ToUpper(db), strings.ToLower(db)} {
			if re.MatchString(spelling) {
				return refused("merge(REGEXP(…)) matches a database a hunt may not read (%s); anchor the pattern to the source databases, e.g. '^sample$'", spellingShown(db, p))
			}
		}
	}
	return nil
}

func spellingShown(db string, p Policy) string {
	if db == p.CoordinationDatabase {
		return "hunt-runner's own database"
	}
	return db
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

var (
	failedAtRe      = regexp.MustCompile(`failed at position (\d+)`)
	serverLineColRe = regexp.MustCompile(` \(line \d+, col \d+\)`)
	// syntaxEchoRe is what a syntax error says after its position: the failing token in
	// brackets, then the statement from there on up to " Expected …" (or the error's name),
	// which quotes the rest of the file and the wrapper the author never wrote.
	syntaxEchoRe = regexp.MustCompile(`^( \((?:[^()]|\([^()]*\))*\))?: (?s:.*?)( Expected |\s*\([A-Z_]+\)\s*$)`)
	versionRe    = regexp.MustCompile(` \(version [0-9.]+[^)]*\)`)
)

// maxEchoedToken is the longest failing token a refusal names; a longer one (a string
// literal, say) is file content, and the line and column already point at it.
const maxEchoedToken = 32

// dropEcho removes the statement a syntax error echoes after its position, keeping a short
// failing token and what the server expected.
func dropEcho(rest string) string {
	m := syntaxEchoRe.FindStringSubmatchIndex(rest)
	if m == nil {
		return rest
	}
	token := ""
	if m[2] >= 0 && m[3]-m[2] <= maxEchoedToken+3 {
		token = rest[m[2]:m[3]]
	}
	tail := rest[m[4]:]
	if strings.HasPrefix(tail, " Expected ") {
		return token + "." + tail
	}
	return token + "." + " " + strings.TrimSpace(tail)
}

// serverRefusal turns a server error about the statement into a refusal placed in the query as
// written: "failed at position N" (a byte offset into what was sent, head bytes before the
// query) becomes a line and column of the query.
func serverRefusal(err error, head int, query string) error {
	msg := serverMessage(err)
	e := &RefusedError{}
	if m := failedAtRe.FindStringSubmatchIndex(msg); m != nil {
		if pos, err := strconv.Atoi(msg[m[2]:m[3]]); err == nil {
			// TrimQuery dropped the query's leading blanks from the statement.
			off := pos - 1 - head + len(query) - len(strings.TrimLeftFunc(query, unicode.IsSpace))
			if off >= 0 && off <= len(query) {
				e.Line = 1 + strings.Count(query[:off], "\n")
				e.Column = 1 + off - (strings.LastIndex(query[:off], "\n") + 1)
				// The server's own "(line L, col C)" counts in the whole statement: drop it.
				rest := dropEcho(serverLineColRe.ReplaceAllString(msg[m[1]:], ""))
				msg = msg[:m[0]] + fmt.Sprintf("failed at line %d, column %d of the query", e.Line, e.Column) + rest
			} else {
				// Past the query's end: the wrapper's closing text is what failed, which means
				// the query left something open.
				msg = msg[:m[0]] + "failed after the end of the query (is a bracket, string or comment left open?)" + dropEcho(serverLineColRe.ReplaceAllString(msg[m[1]:], ""))
			}
		}
	}
	e.Msg = serverParserSays + versionRe.ReplaceAllString(msg, "")
	return e
}

// serverParserSays opens a syntax error's refusal (CheckWithParser names another parser).
const serverParserSays = "the server's parser says: "

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
