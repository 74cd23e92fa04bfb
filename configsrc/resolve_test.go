package configsrc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// TestValidateRunsNothing: checking and resolving a hunt whose scalar subquery would raise if it
// were evaluated succeeds, and the server's statement log shows only the exact statement under
// EXPLAIN AST (parameters bound out of band) and reads of the catalogue: nothing that runs the
// analyzer. The analyzer (EXPLAIN QUERY TREE, what name resolution used) does evaluate it.
func TestValidateRunsNothing(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "CREATE TABLE "+db.Name+".ev (ts DateTime64(3, 'UTC'), user String) ENGINE = MergeTree ORDER BY ts"); err != nil {
		t.Fatal(err)
	}
	q := "SELECT user FROM " + db.Name + ".ev WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}" +
		" AND user = toString((SELECT throwIf(1, 'hunt code was evaluated')))"
	h := hunt.Hunt{ID: "side-effect", Query: q}
	p := Policy{CoordinationDatabase: "hunt_runner", AllowFunctions: []string{"throwIf"}}
	start := len(srv.StatementLog(t))
	if err := CheckWithServer(ctx, db.Conn, h, p); err != nil {
		t.Fatalf("check: %v", err)
	}
	checked := len(srv.StatementLog(t))
	if err := ResolveWithServer(ctx, db.Conn, h); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	log := srv.StatementLog(t)[start:]
	exact := false
	for i, st := range log {
		upper := strings.ToUpper(strings.TrimSpace(st.SQL))
		switch {
		case st.SQL == explainPrefix+FindingsQuery(q):
			exact = exact || (start+i < checked && st.Params["window_start"] != "" && st.Params[ParamLimit] != "")
		case strings.HasPrefix(upper, "EXPLAIN AST "):
		case strings.HasPrefix(upper, "SELECT FORMATQUERY("):
		case strings.Contains(st.SQL, "throwIf"):
			t.Errorf("a statement other than the parse ran the hunt's code: %s", st.SQL)
		case strings.HasPrefix(upper, "EXPLAIN"):
			t.Errorf("validate ran %s", st.SQL)
		}
		if st.ErrorCode == 395 { // FUNCTION_THROW_IF_VALUE_IS_NON_ZERO
			t.Errorf("the subquery was evaluated by %s", st.SQL)
		}
	}
	if !exact {
		t.Errorf("the check did not ask the server about the exact statement the runner sends, with its parameters bound; log: %+v", log)
	}
	// The premise: what name resolution used to ask evaluates the subquery.
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(checkParams))
	rows, err := db.Conn.Query(qctx, "EXPLAIN QUERY TREE "+FindingsQuery(q))
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
		rows.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "hunt code was evaluated") {
		t.Errorf("EXPLAIN QUERY TREE did not evaluate the subquery (%v): the test proves nothing", err)
	}
}

// TestResolveNames: resolution reads the catalogue for what the tree names: unknown databases,
// tables and columns are refused by name; aliases, WITH names, lambda parameters, qualified and
// Nested names are known; a query over a table function skips the column check.
func TestResolveNames(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "CREATE TABLE "+db.Name+".ev (ts DateTime64(3, 'UTC'), user String, tags Array(String), n Nested(k String, v UInt8)) ENGINE = MergeTree ORDER BY ts"); err != nil {
		t.Fatal(err)
	}
	ev := db.Name + ".ev"
	const w = windowClause
	for _, tc := range []struct{ query, want string }{
		{"SELECT user, count() AS c FROM " + ev + w + " GROUP BY user HAVING c > 1 ORDER BY c", ""},
		{"SELECT e.user, ev.tags, n.k, arrayMap(x -> upper(x), tags) AS up FROM " + ev + " AS e" + w, ""},
		{"WITH recent AS (SELECT user, ts FROM " + ev + w + ") SELECT user FROM recent", ""},
		{"SELECT user, t FROM " + ev + " ARRAY JOIN tags AS t" + w, ""},
		{"SELECT number FROM numbers(3)" + w, ""},
		{"SELECT user FROM " + ev + w + " AND user IN " + ev, ""},
		{"SELECT usr FROM " + ev + w, "column usr is not a column"},
		{"SELECT user FROM " + db.Name + ".nope" + w, "table " + db.Name + ".nope does not exist"},
		{"SELECT user FROM nope_db.ev" + w, "database nope_db does not exist"},
		{"SELECT user FROM ev" + w, ""}, // the connection's database
		{"SELECT user FROM " + ev + w + " AND user IN " + db.Name + ".gone", "table " + db.Name + ".gone does not exist"},
	} {
		h := hunt.Hunt{ID: "h", Query: tc.query}
		if err := CheckWithServer(ctx, db.Conn, h, Policy{}); err != nil {
			t.Fatalf("%s: the parse check refused it: %v", tc.query, err)
		}
		err := ResolveWithServer(ctx, db.Conn, h)
		var r *RefusedError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.query, err)
		case tc.want != "" && (!errors.As(err, &r) || !strings.Contains(r.Msg, tc.want)):
			t.Errorf("%s: %v, want a refusal containing %q", tc.query, err, tc.want)
		}
	}
}
