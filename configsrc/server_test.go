package configsrc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// TestCheckWithServer asks the real engine's parser (EXPLAIN AST) about every good corpus hunt
// and about queries only the server can judge.
func TestCheckWithServer(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	set := loadCorpus(t)
	for _, h := range set.Hunts {
		if err := CheckWithServer(ctx, db.Conn, h, Policy{}); err != nil {
			t.Errorf("%s: %v\n%s", h.ID, err, h.Query)
		}
	}

	for _, tc := range []struct{ name, query, want string }{
		{"syntax error the lexer cannot see",
			"SELECT count( FROM sample.auth_events WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}",
			"Syntax error"},
		// The error is placed in the query as written, after the substituted parameters: the
		// second "=" is on the second line, column 80 (counted by hand).
		{"syntax error placed in the original text",
			"SELECT count() FROM sample.auth_events\nWHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} = = 1",
			"failed at line 2, column 80 of the query"},
		// A stray ')' closes the wrapper's bracket: the wrapper's own ')' is then unmatched.
		{"stray bracket",
			"SELECT count() FROM sample.auth_events\nWHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)})",
			"Unmatched parentheses"},
		{"parameters shown as written",
			"SELECT count( FROM sample.auth_events WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}",
			"AND ts < {window_end:DateTime64(3)}"},
		{"table function hidden from a naive lexer",
			"SELECT * FROM url/* comment */('http://198.51.100.7/x.csv', CSV, 'a String') WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}",
			"query calls url(), which fetches data over HTTP"},
		{"scalar file()",
			"SELECT file('/etc/passwd') WHERE now() BETWEEN {window_start:DateTime64(3)} AND {window_end:DateTime64(3)}",
			"query calls file(), which reads files on the server's filesystem"},
		{"not a select",
			"SHOW TABLES",
			"Syntax error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckWithServer(ctx, db.Conn, hunt.Hunt{ID: "x", Query: tc.query}, Policy{})
			if !errors.Is(err, ErrQueryRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrQueryRefused containing %q", err, tc.want)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

// TestASTReading: the tree reader fails closed. A forged line (one more child than the server
// declared) makes the output unreadable, and a node kind outside a SELECT is refused.
func TestASTReading(t *testing.T) {
	good := []string{
		"SelectWithUnionQuery (children 1)",
		" ExpressionList (children 1)",
		"  SelectQuery (children 1)",
		"   ExpressionList (children 1)",
		"    Identifier a",
	}
	root, err := parseAST(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := walkHunt(root, Policy{}); err != nil {
		t.Fatalf("plain select refused: %v", err)
	}
	for name, lines := range map[string][]string{
		"extra child":    append(append([]string{}, good...), "    Function url (children 1)", "     ExpressionList"),
		"skipped level":  {"SelectWithUnionQuery (children 1)", "   ExpressionList"},
		"second root":    append(append([]string{}, good...), "SelectWithUnionQuery"),
		"missing child":  {"SelectWithUnionQuery (children 2)", " ExpressionList"},
		"trailing blank": append(append([]string{}, good...), "    Identifier b "),
	} {
		if _, err := parseAST(lines); err != errUnreadable {
			t.Errorf("%s: err = %v, want unreadable", name, err)
		}
	}
	odd := []string{
		"SelectWithUnionQuery (children 1)",
		" ExpressionList (children 1)",
		"  InsertQuery",
	}
	root, err = parseAST(odd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := walkHunt(root, Policy{}); err == nil || !strings.Contains(err.Error(), "InsertQuery, which is not part of a plain SELECT") {
		t.Errorf("unknown kind: %v", err)
	}
}

// TestPolicyWidens: what an operator allows passes both checks, and only that.
func TestPolicyWidens(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	const w = " WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"
	for _, tc := range []struct {
		query  string
		policy Policy
		ok     bool
	}{
		{"SELECT number FROM numbers(10)" + w, Policy{AllowTableFunctions: []string{"numbers"}}, true},
		{"SELECT number FROM NUMBERS(10)" + w, Policy{AllowTableFunctions: []string{"numbers"}}, true},
		{"SELECT number FROM zeros(10)" + w, Policy{AllowTableFunctions: []string{"numbers"}}, false},
		{"SELECT dummy FROM system.one" + w, Policy{AllowSystem: true}, true},
		{"SELECT dummy FROM system.one" + w, Policy{AllowTableFunctions: []string{"numbers"}}, false},
		{"SELECT count() FROM hr.hunt_run" + w, Policy{AllowSystem: true, CoordinationDatabase: "hr"}, false},
		{"SELECT count() FROM other.hunt_run" + w, Policy{CoordinationDatabase: "hr"}, true},
	} {
		_, issues := checkQueryPolicy(tc.query, tc.policy)
		if (len(issues) == 0) != tc.ok {
			t.Errorf("offline %q under %+v: %v", tc.query, tc.policy, issues)
		}
		err := CheckWithServer(ctx, db.Conn, hunt.Hunt{ID: "p", Query: tc.query}, tc.policy)
		if (err == nil) != tc.ok {
			t.Errorf("server %q under %+v: %v", tc.query, tc.policy, err)
		}
	}
	if fns, err := ParseTableFunctions(" numbers, Merge,numbers,"); err != nil || strings.Join(fns, ",") != "merge,numbers" {
		t.Errorf("ParseTableFunctions = %v, %v", fns, err)
	}
	if _, err := ParseTableFunctions("url('x')"); err == nil {
		t.Error("a call was accepted as a table function name")
	}
}

// validate resolves names with the server: an unknown table or column is a problem, a query
// over existing ones is not. (CheckWithServer only parses, so both pass it.)
func TestResolveWithServer(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "CREATE TABLE "+db.Name+".ev (ts DateTime64(3, 'UTC'), user String) ENGINE = MergeTree ORDER BY ts"); err != nil {
		t.Fatal(err)
	}
	win := " WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}"
	for _, tc := range []struct {
		query, want string
	}{
		{"SELECT user FROM " + db.Name + ".ev" + win, ""},
		{"SELECT user FROM " + db.Name + ".no_such_table" + win, "no_such_table"},
		{"SELECT no_such_column FROM " + db.Name + ".ev" + win, "no_such_column"},
		// Templates over output columns: the catalogue sees through *, so a name neither a
		// column of ev nor an alias is refused; a column or an alias is not.
		{"SELECT * FROM " + db.Name + ".ev" + win + " -- title {{user}}", ""},
		{"SELECT *, 'x' AS tag FROM " + db.Name + ".ev" + win + " -- title {{tag}}", ""},
		{"SELECT * FROM " + db.Name + ".ev" + win + " -- title {{usr}}", "title names {{usr}}"},
		{"SELECT * FROM " + db.Name + ".ev" + win + " -- severity_from sev", "severity_from names sev"},
	} {
		h := hunt.Hunt{ID: "h", Query: tc.query}
		if _, tmpl, ok := strings.Cut(tc.query, " -- title "); ok {
			h.Title = tmpl
		}
		if _, col, ok := strings.Cut(tc.query, " -- severity_from "); ok {
			h.SeverityFrom = col
		}
		if err := CheckWithServer(ctx, db.Conn, h, Policy{}); err != nil {
			t.Fatalf("%s: the parse check refused it: %v", tc.query, err)
		}
		err := ResolveWithServer(ctx, db.Conn, h)
		var r *RefusedError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.query, err)
		case tc.want != "" && (!errors.As(err, &r) || !strings.Contains(r.Msg, tc.want)):
			t.Errorf("%s: %v, want a refusal naming %s", tc.query, err, tc.want)
		}
	}
}
