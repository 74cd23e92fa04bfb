package configsrc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// TestDefaultFunctionsExist: every name on the default allowlist (and on the reviewed left-out
// list) is a function of the engine, spelt as the engine spells it, so a typo cannot hide a
// missing entry; aggregates are aggregates; names equal but for case are one function; the
// syntax-only names are what the parser writes; no word the lexer passes as syntax before a
// bracket is a function off the allowlist.
func TestDefaultFunctionsExist(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	type fn struct {
		aggregate bool
		alias     string
	}
	engine := map[string]fn{}
	rows, err := db.Conn.Query(ctx, "SELECT name, is_aggregate, alias_to FROM system.functions")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, alias string
		var agg uint8
		if err := rows.Scan(&name, &agg, &alias); err != nil {
			t.Fatal(err)
		}
		engine[name] = fn{agg == 1, alias}
	}
	rows.Close()
	if len(engine) < 1000 {
		t.Fatalf("system.functions lists %d functions", len(engine))
	}
	for _, list := range [][]string{defaultScalars, defaultAggregates, dictionaryFunctions, leftOut} {
		for _, name := range list {
			if _, ok := engine[name]; !ok {
				t.Errorf("%s is listed but the engine has no such function", name)
			}
		}
	}
	for _, name := range defaultAggregates {
		if f, ok := engine[name]; ok && !f.aggregate {
			t.Errorf("%s is listed as an aggregate (combinators allowed) but is not one", name)
		}
	}
	for _, name := range defaultScalars {
		if f, ok := engine[name]; ok && f.aggregate {
			t.Errorf("%s is an aggregate listed as a scalar: its combinators would be refused", name)
		}
	}
	// Case-insensitive matching is sound only if names equal but for case are one function.
	canonical := func(n string) string {
		if a := engine[n].alias; a != "" {
			return a
		}
		return n
	}
	byLower := map[string]string{}
	for name := range engine {
		l := strings.ToLower(name)
		if prev, ok := byLower[l]; ok && canonical(prev) != canonical(name) && !strings.EqualFold(canonical(prev), canonical(name)) {
			t.Errorf("%s and %s differ only by case but are different functions", prev, name)
		}
		byLower[l] = name
	}
	for _, word := range mapKeys(callKeywords) {
		if name, ok := byLower[word]; ok && !(Policy{}).functionAllowed(name) {
			t.Errorf("the lexer passes %s( as syntax, but %s is a function off the allowlist", word, name)
		}
	}
	for _, name := range syntaxFunctions {
		if _, ok := engine[name]; ok {
			t.Errorf("%s is a function of the engine: list it with the others", name)
		}
	}
	tree, err := explain(ctx, db.Conn, "SELECT arrayMap(x -> x, [1]), EXISTS (SELECT 1)")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(n *astNode)
	walk = func(n *astNode) {
		if n.kind() == "Function" {
			seen[n.name()] = true
		}
		for _, k := range n.kids {
			walk(k)
		}
	}
	walk(tree)
	for _, name := range syntaxFunctions {
		if !seen[name] {
			t.Errorf("the parser does not write %s for its syntax", name)
		}
	}
	for _, name := range []string{"hasColumnInTable", "currentDatabase", "getSetting", "url", "file", "aiGenerate", "chdb", "joinGet", "throwIf", "sleep", "arrayReduce", "formatRow", "currentUser"} {
		if (Policy{}).functionAllowed(name) {
			t.Errorf("%s is on the default allowlist", name)
		}
	}
}

// TestAllowlist: both checks, offline and on the server's parse, allow what the lists name and
// refuse the rest, naming the function and the flag that allows it. Table-function arguments
// naming hunt-runner's database are refused however they are spelt, even with merge allowed.
func TestAllowlist(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	const w = windowClause
	base := Policy{CoordinationDatabase: "hunt_runner"}
	merge := Policy{CoordinationDatabase: "hunt_runner", AllowTableFunctions: []string{"merge"}}
	mergeCurrent := Policy{CoordinationDatabase: "hunt_runner", AllowTableFunctions: []string{"merge"}, AllowFunctions: []string{"currentDatabase"}}
	withHas := Policy{CoordinationDatabase: "hunt_runner", AllowFunctions: []string{"hasColumnInTable"}}
	dicts := Policy{CoordinationDatabase: "hunt_runner", AllowDictionaries: []string{"geo.country"}}
	for _, tc := range []struct {
		name, query string
		p           Policy
		want        string // "" = accepted by both
	}{
		{"aggregates with combinators", "SELECT countIf(x > 1), sumArrayIf(a, b), uniqState(u), avgOrNull(v), quantilesIf(0.5, 0.9)(v, x > 0) FROM sample.t" + w, base, ""},
		{"operators, lambdas, conditionals", "SELECT if(x = 1 AND NOT y, 'a', 'b'), arrayMap(v -> v * 2, arr), multiIf(x > 1, 1, 2), x IN (1, 2), CAST(x AS Nullable(String)), toStartOfInterval(ts, INTERVAL 5 MINUTE) FROM sample.t" + w, base, ""},
		{"string, ip, json, hashing", "SELECT lower(u), IPv4NumToString(ip), JSONExtractString(j, 'k'), cityHash64(u), isIPAddressInRange(s, '10.0.0.0/8'), extract(u, 'x(.)') FROM sample.t" + w, base, ""},
		{"window function inline", "SELECT row_number() OVER (PARTITION BY u ORDER BY ts) FROM sample.t" + w, base, ""},
		{"numbers with literal bounds", "SELECT number FROM numbers(100)" + w, base, ""},
		{"generate_series with literal bounds", "SELECT * FROM generate_series(1, 10)" + w, base, ""},
		{"numbers flood", "SELECT number FROM numbers(10000000)" + w, base, "generates more than 1000000 rows"},
		{"numbers with an expression", "SELECT number FROM numbers(toUInt64(10))" + w, base, "integer literals"},
		{"hasColumnInTable off the list", "SELECT hasColumnInTable('127.0.0.1:9000', 'default', '', 'db', 't', 'c')" + w, base, "hasColumnInTable(), which is not on hunt-runner's function allowlist (docs/hunts.md); an operator can allow it with --allow-functions hasColumnInTable"},
		{"unknown function not echoed", "SELECT frobnicate(x) FROM sample.t" + w, base, "query calls (a name)(), which is not on hunt-runner's function allowlist (docs/hunts.md); an operator can allow it with --allow-functions NAME"},
		{"currentDatabase", "SELECT currentDatabase()" + w, base, "--allow-functions currentDatabase"},
		{"allowed by the operator", "SELECT hasColumnInTable('sample', 't', 'c')" + w, withHas, ""},
		{"allowed, but names hunt-runner's database", "SELECT hasColumnInTable('hunt_runner', 'hunt_lease', 'c')" + w, withHas, "hunt-runner's own database"},
		{"IN a coordination table", "SELECT 1 FROM sample.t" + w + " AND x IN hunt_schedule", base, "hunt-runner's own tables"},
		{"IN a bracketed coordination table", "SELECT 1 FROM sample.t" + w + " AND x GLOBAL NOT IN (`hunt_lease`)", base, "hunt-runner's own tables"},
		{"APPLY hides a call", "SELECT * APPLY(x -> hostName()) FROM sample.t" + w, base, "APPLY"},
		{"named window hides calls", "SELECT count() OVER w FROM sample.t" + w + " WINDOW w AS (PARTITION BY hostName())", base, "named window"},
		{"merge by identifier", "SELECT * FROM merge(hunt_runner, '^hunt')" + w, merge, "hunt-runner's own database"},
		{"merge by string", "SELECT * FROM merge('hunt_runner', '^hunt')" + w, merge, "hunt-runner's own database"},
		{"merge by regexp", "SELECT * FROM merge(REGEXP('hunt.*'), '^hunt')" + w, merge, "hunt-runner's own database"},
		{"merge by regexp matching system", "SELECT * FROM merge(REGEXP('^sys'), '^query')" + w, merge, "system"},
		{"merge by currentDatabase()", "SELECT * FROM merge(currentDatabase(), '^hunt')" + w, merge, "currentDatabase()"},
		{"merge by currentDatabase(), allowed as a function", "SELECT * FROM merge(currentDatabase(), '^hunt')" + w, mergeCurrent, "table-function arguments must be literals"},
		{"merge of system by string", "SELECT * FROM merge('system', '^query_log$')" + w, merge, "reads system tables"},
		{"merge without a database", "SELECT * FROM merge('^hunt')" + w, merge, "merge() without a database"},
		{"merge of a source database", "SELECT * FROM merge(REGEXP('^sample$'), '^events')" + w, merge, ""},
		{"merge not allowed", "SELECT * FROM merge(sample, '^events')" + w, base, "--allow-table-functions merge"},
		{"dictionary not allowed", "SELECT dictGet('geo.city', 'name', toUInt64(1)) FROM sample.t" + w, dicts, "--allow-dictionaries"},
		{"dictionary allowed", "SELECT dictGet('geo.country', 'name', toUInt64(1)) FROM sample.t" + w, dicts, ""},
		{"dictionary by expression", "SELECT dictGet(concat('geo.', 'country'), 'name', toUInt64(1)) FROM sample.t" + w, dicts, "plain string literal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, issues := checkQueryPolicy(tc.query, tc.p)
			var offline []string
			for _, is := range issues {
				offline = append(offline, is.msg)
			}
			if got := strings.Join(offline, " | "); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("offline: %q, want %q", got, tc.want)
			}
			err := CheckWithServer(ctx, db.Conn, hunt.Hunt{ID: "x", Query: tc.query}, tc.p)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("server: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrQueryRefused) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("server: %v, want a refusal containing %q", err, tc.want)
			}
		})
	}
	if fns, err := ParseFunctions(" throwIf,THROWIF, sleep"); err != nil || !slices.Equal(fns, []string{"sleep", "throwif"}) {
		t.Errorf("ParseFunctions = %v, %v", fns, err)
	}
	if d, err := ParseDictionaries("geo.Country, x"); err != nil || !slices.Equal(d, []string{"geo.Country", "x"}) {
		t.Errorf("ParseDictionaries = %v, %v", d, err)
	}
	if _, err := ParseDictionaries("a.b.c"); err == nil {
		t.Error("a three-part dictionary name was accepted")
	}
}

// swallowQuery has a backslash in a parameter's type. This lexer, were it to take the
// parameter as ending at the first '}', would read "')} OR hostName() = '" as a string; the
// server's lexer reads the type as SQL, where '\' escapes the quote, so its string runs from the
// type to "s = '" and hostName() is code.
const swallowQuery = `SELECT 1 FROM sample.t WHERE ts >= {window_start:DateTime('\')} AND ts < {window_end:DateTime64(3)} AND s = ')} OR hostName() = '--'`

// TestParameterTypeBackslash: the checked statement is the run statement. A backslash or quote
// in a parameter's type is refused by both checks, and the server does read such a statement
// differently from a lexer that stops at the first '}'.
func TestParameterTypeBackslash(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	for _, q := range []string{
		swallowQuery,
		`SELECT 1 FROM sample.t WHERE ts >= {window_start:DateTime64(3, 'U\TC')} AND ts < {window_end:DateTime64(3)}`,
		`SELECT 1 FROM sample.t WHERE ts >= {window_start:DateTime64(3, "UTC")} AND ts < {window_end:DateTime64(3)}`,
		`SELECT 1 FROM sample.t WHERE ts >= {window_start:DateTime64(3, 'UTC)} AND ts < {window_end:DateTime64(3)}`,
	} {
		_, issues := checkQuery(q)
		if len(issues) != 1 || !strings.Contains(issues[0].msg, "parameter's type holds a backslash or a quote") {
			t.Errorf("offline %s: %v", q, issues)
		}
		err := CheckWithServer(ctx, db.Conn, hunt.Hunt{ID: "x", Query: q}, Policy{})
		if !errors.Is(err, ErrQueryRefused) || !strings.Contains(err.Error(), "parameter's type holds a backslash or a quote") {
			t.Errorf("server %s: %v", q, err)
		}
	}
	// The plain time zone form stays accepted.
	ok := `SELECT 1 FROM sample.t WHERE ts >= {window_start:DateTime64(3, 'Europe/Paris')} AND ts < {window_end:DateTime('UTC')}`
	if _, issues := checkQuery(ok); len(issues) != 0 {
		t.Errorf("offline %s: %v", ok, issues)
	}
	if err := CheckWithServer(ctx, db.Conn, hunt.Hunt{ID: "x", Query: ok}, Policy{}); err != nil {
		t.Errorf("server %s: %v", ok, err)
	}
	// What the server makes of it: the type's string runs on to "s = '", taking the second
	// parameter with it, which a lexer stopping at '}' would not see.
	_, err := explain(ctx, db.Conn, FindingsQuery(swallowQuery))
	if err == nil || !strings.Contains(serverMessage(err), "AND ts < {window_end:DateTime64(3)} AND s = ") {
		t.Errorf("the server read the statement as the naive lexer does: %v", err)
	}
}
