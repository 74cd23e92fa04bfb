package configsrc

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// ResolveWithServer checks that the databases, tables and columns h's query names exist, without
// running any of it: it reads the names from the server's parse (EXPLAIN AST, which evaluates
// nothing) and looks them up in system.databases, system.tables and system.columns. It never
// uses EXPLAIN QUERY TREE, PLAN or SYNTAX, which run the analyzer, and the analyzer evaluates
// scalar subqueries and constant functions: hunt code. Call it only after CheckWithServer
// accepted h, as validate does, on a connection that may read the sources' metadata. A missing
// name is a RefusedError.
//
// Columns are checked only when every table the query reads is a table (not a table function,
// whose columns the catalogue does not list); a name is known when it is a column (or a Nested
// or JSON column's prefix) of a table the query reads, or an alias, WITH name or lambda
// parameter of the query.
func ResolveWithServer(ctx context.Context, conn driver.Conn, h hunt.Hunt) error {
	tree, err := explain(ctx, conn, FindingsQuery(h.Query))
	if err != nil {
		if !isServerException(err) {
			return fmt.Errorf("ask the server to parse the query: %w", err)
		}
		return serverRefusal(err, len(explainPrefix)+findingsHeadLen(), h.Query)
	}
	hunt, err := huntSubtree(ctx, conn, tree)
	if err != nil {
		return err
	}
	n := collectNames(hunt)
	withs := map[string]bool{}
	for _, w := range withNames(h.Query) {
		n.local[w], withs[w] = true, true
	}
	var current string
	if err := conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&current); err != nil {
		return fmt.Errorf("read the connection's database: %w", err)
	}
	type table struct{ db, name string }
	var tables []table
	dbs := map[string]bool{}
	for _, t := range n.tables {
		for _, part := range strings.Split(t, ".") {
			n.local[part] = true // t.col, db.t.col and t.* name a column through the table
		}
	}
	for _, t := range n.tables {
		db, name, ok := strings.Cut(t, ".")
		if !ok {
			if withs[t] {
				continue // a WITH name
			}
			db, name = current, t
		}
		tables = append(tables, table{db, name})
		dbs[db] = true
	}
	dbList := mapKeys(dbs)
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"dbs": stringArray(dbList)}))

	known := map[string]bool{}
	rows, err := conn.Query(qctx, "SELECT name FROM system.databases WHERE name IN {dbs:Array(String)}")
	if err := scanNames(rows, err, func(s ...string) { known[s[0]] = true }); err != nil {
		return fmt.Errorf("read system.databases: %w", err)
	}
	for _, db := range dbList {
		if !known[db] {
			return refused("database %s does not exist on the server", shownName(db))
		}
	}
	existing := map[table]bool{}
	rows, err = conn.Query(qctx, "SELECT database, name FROM system.tables WHERE database IN {dbs:Array(String)}")
	if err := scanNames(rows, err, func(s ...string) { existing[table{s[0], s[1]}] = true }); err != nil {
		return fmt.Errorf("read system.tables: %w", err)
	}
	for _, t := range tables {
		if !existing[t] {
			return refused("table %s.%s does not exist on the server", shownName(t.db), shownName(t.name))
		}
	}
	if n.tableFunctions || len(tables) == 0 {
		return nil
	}
	read := map[table]bool{}
	for _, t := range tables {
		read[t] = true
	}
	columns := map[string]bool{}
	types := map[string]string{}
	rows, err = conn.Query(qctx, "SELECT database, table, name, type FROM system.columns WHERE database IN {dbs:Array(String)}")
	if err := scanNames(rows, err, func(s ...string) {
		if read[table{s[0], s[1]}] {
			columns[s[2]] = true
			types[s[2]] = s[3]
			if head, _, nested := strings.Cut(s[2], "."); nested {
				columns[head] = true // n.x of a Nested n: n alone is an array of tuples
			}
		}
	}); err != nil {
		return fmt.Errorf("read system.columns: %w", err)
	}
	for _, id := range n.columns {
		if !n.known(id, columns) {
			return refused("column %s is not a column of the tables the query reads (nor an alias of the query)", shownName(id))
		}
	}
	isKnown := func(c string) bool { return n.known(c, columns) }
	if err := explainColumnsKnown(h, isKnown); err != nil {
		return err
	}
	return exceptionColumnsKnown(h, isKnown, func(c string) string {
		if n.local[c] {
			return "" // an alias of the query: its type is not in the catalogue
		}
		return types[c]
	})
}

// exceptionColumnsKnown refuses a match: column the query cannot output, and an IP range on a
// column whose type (from the catalogue; "" when unknown) holds no address.
func exceptionColumnsKnown(h hunt.Hunt, known func(string) bool, typeOf func(string) string) error {
	for _, e := range h.Exceptions {
		for _, m := range e.Match {
			at := func(format string, args ...any) error {
				return &RefusedError{Msg: fmt.Sprintf("exception %s: "+format, append([]any{e.ID}, args...)...), File: e.File, FileLine: max(m.Line, 1), FileColumn: m.Col}
			}
			if !known(m.Column) {
				return at("match column %s is not an output column of the query (neither a column of the tables it reads nor an alias)", m.Column)
			}
			if len(m.Ranges) == 0 {
				continue
			}
			if t := typeOf(m.Column); t != "" && !ipTyped(t) {
				return at("match.%s gives an IP range, but the column is %s; ranges match only IPv4, IPv6 and String columns", m.Column, shownType(t))
			}
		}
	}
	return nil
}

// ipTyped reports whether a column type can hold an address a range matches.
func ipTyped(t string) bool {
	for _, wrap := range []string{"Nullable(", "LowCardinality("} {
		for strings.HasPrefix(t, wrap) && strings.HasSuffix(t, ")") {
			t = t[len(wrap) : len(t)-1]
		}
	}
	return t == "IPv4" || t == "IPv6" || t == "String" || strings.HasPrefix(t, "FixedString(")
}

// shownType shows a catalogue type in a message when it is plain.
func shownType(t string) string {
	if len(t) <= 64 && !hasControl(t) {
		return t
	}
	return "(a type)"
}

// explainColumnsKnown refuses a title:, dedup: or severity_from: column that known says the
// query cannot output: the server's catalogue sees through a * the offline check cannot.
func explainColumnsKnown(h hunt.Hunt, known func(string) bool) error {
	for _, k := range []struct{ key, text string }{{"title", h.Title}, {"dedup", h.Dedup}} {
		t, err := hunt.ParseTemplate(k.text)
		if err != nil {
			return refused("%s: %v", k.key, err)
		}
		for _, c := range t.Columns() {
			if !known(c) {
				return refused("%s names {{%s}}, which is not an output column of the query (neither a column of the tables it reads nor an alias)", k.key, c)
			}
		}
	}
	if h.SeverityFrom != "" && !known(h.SeverityFrom) {
		return refused("severity_from names %s, which is not an output column of the query (neither a column of the tables it reads nor an alias)", shownName(h.SeverityFrom))
	}
	return nil
}

// names are what the hunt's tree names, for ResolveWithServer.
type names struct {
	tables         []string        // TableIdentifier and IN t names, as printed (db.t or t)
	columns        []string        // Identifier names in expressions, as printed (maybe a.b.c)
	local          map[string]bool // aliases, WITH names, lambda parameters, table aliases
	tableFunctions bool            // a table function is read: its columns are not in the catalogue
}

func collectNames(root *astNode) *names {
	n := &names{local: map[string]bool{}}
	var walk func(a, parent *astNode)
	walk = func(a, parent *astNode) {
		if _, alias, ok := strings.Cut(a.label, " (alias "); ok {
			n.local[strings.TrimSuffix(alias, ")")] = true
		}
		switch a.kind() {
		case "TableIdentifier":
			n.tables = append(n.tables, a.name())
		case "Identifier":
			n.columns = append(n.columns, a.name())
		case "Function":
			lower := strings.ToLower(a.name())
			if parent != nil && parent.kind() == "TableExpression" {
				n.tableFunctions = true
				return // its arguments name databases and patterns, not columns
			}
			ar := args(a)
			if lower == "lambda" && len(ar) > 0 {
				for _, p := range args(ar[0]) {
					n.local[p.name()] = true
				}
			}
			if inFunctions[lower] && len(ar) == 2 && ar[1].kind() == "Identifier" {
				walk(ar[0], a)
				n.tables = append(n.tables, ar[1].name())
				return
			}
		case "InterpolateElement":
			if _, col, ok := strings.Cut(a.label, "(column "); ok {
				n.columns = append(n.columns, strings.TrimSuffix(col, ")"))
			}
		}
		for _, k := range a.kids {
			walk(k, a)
		}
	}
	walk(root, nil)
	return n
}

// known reports whether an identifier (a, t.a, db.t.a, a.sub) names a column of the tables
// read or something the query defines: any of its dotted parts will do, which is lenient on
// purpose (tuple and JSON subcolumns, table aliases) and still catches a misspelt name.
func (n *names) known(id string, columns map[string]bool) bool {
	if columns[id] || n.local[id] {
		return true
	}
	for _, part := range strings.Split(id, ".") {
		if columns[part] || n.local[part] {
			return true
		}
	}
	return false
}

// withNames are the names a query defines with WITH name AS (…): the server's tree does not
// print them, and the query reads them like tables.
func withNames(q string) []string {
	toks, issue := lexQuery(q)
	if issue != nil {
		return nil
	}
	var out []string
	for i := 0; i+2 < len(toks); i++ {
		if (toks[i].kind == tkWord || toks[i].kind == tkQuoted) && strings.EqualFold(toks[i+1].text, "AS") && toks[i+2].text == "(" {
			out = append(out, toks[i].name())
		}
	}
	return out
}

func scanNames(rows driver.Rows, err error, add func(...string)) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		cols := rows.Columns()
		vals := make([]string, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		add(vals...)
	}
	return rows.Err()
}

// stringArray writes a query parameter value of type Array(String).
func stringArray(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quoteString(s)
	}
	return "[" + strings.Join(q, ",") + "]"
}

func mapKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// shownName shows a name from the query when it is a plain identifier, and "(a name)" otherwise,
// so a message never carries arbitrary file content; the hunt's file says which.
func shownName(s string) string {
	if identRe.MatchString(s) {
		return s
	}
	return "(a name)"
}
