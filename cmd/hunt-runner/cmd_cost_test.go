package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunttest"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// costFixture is a source table of two hours of events, one per second, sorted by time in small
// granules, and two hunts over it: narrow reads its window (the sorting key prunes the rest),
// wide looks back a day, which is every granule of the table.
type costFixture struct {
	db     *chtest.DB
	src    string // the source database
	dir    string // hunt files
	common []string
}

func newCostFixture(t *testing.T) *costFixture {
	t.Helper()
	db := chtest.New(t)
	f := &costFixture{db: db, src: "src_" + strings.TrimPrefix(db.Name, "t_"), dir: t.TempDir(),
		common: []string{"--clickhouse-url", db.URL, "--database", db.Name}}
	ctx := context.Background()
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+f.src) })
	for _, q := range []string{
		"CREATE DATABASE " + f.src,
		"CREATE TABLE " + f.src + ".events (ts DateTime64(3, 'UTC'), id UInt32) ENGINE = MergeTree ORDER BY ts SETTINGS index_granularity = 64",
		// Ending ten minutes ago, before the end of the last window of any schedule of 10m.
		"INSERT INTO " + f.src + ".events SELECT now64(3) - toIntervalSecond(600 + number), number FROM numbers(7200)",
	} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for id, where := range map[string]string{
		"narrow": "ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}",
		"wide":   "ts >= {window_start:DateTime64(3)} - INTERVAL 1 DAY AND ts < {window_end:DateTime64(3)}",
	} {
		hunt := fmt.Sprintf("id: %s\ninterval: 10m\nquery: |\n  SELECT id FROM %s.events WHERE %s LIMIT 1\n", id, f.src, where)
		if err := os.WriteFile(filepath.Join(f.dir, id+".yaml"), []byte(hunt), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// preview runs hunt over the last hour through `hunt-runner preview`, as an operator would:
// real hunt statements, attributed as previews.
func (f *costFixture) preview(t *testing.T, hunt string) {
	t.Helper()
	if out, err := runApp(t, append(append([]string{"preview", "--from", "1h", "--hunts-dir", f.dir}, f.common...), hunt)...); err != nil {
		t.Fatalf("preview %s: %v\n%s", hunt, err, out)
	}
}

// huntStatements are the statements the server received that read the fixture's source table.
func (f *costFixture) huntStatements(t *testing.T, since uint64) []ctl.Statement {
	t.Helper()
	var out []ctl.Statement
	for _, st := range (&chtest.Server{URL: strings.TrimSuffix(f.db.URL, "/")}).StatementsSince(t, since) {
		if strings.Contains(st.SQL, f.src+".events") && strings.HasPrefix(st.QueryID, attrib.QueryIDPrefix) {
			out = append(out, st)
		}
	}
	return out
}

func (f *costFixture) mark(t *testing.T) uint64 {
	t.Helper()
	log := (&chtest.Server{URL: strings.TrimSuffix(f.db.URL, "/")}).StatementLog(t)
	if len(log) == 0 {
		return 0
	}
	return log[len(log)-1].Seq
}

type costJSON struct {
	Since   string        `json:"since"`
	By      string        `json:"by"`
	Entries []attrib.Cost `json:"entries"`
}

func (f *costFixture) cost(t *testing.T, args ...string) costJSON {
	t.Helper()
	out, err := runApp(t, append(append([]string{"cost", "--json"}, args...), f.common...)...)
	if err != nil {
		t.Fatalf("cost %v: %v\n%s", args, err, out)
	}
	var got costJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("cost --json: %v\n%s", err, out)
	}
	return got
}

// queryLogDDL is the part of system.query_log that cost reads, with the server's types.
const queryLogDDL = `(type Enum8('QueryStart' = 1, 'QueryFinish' = 2, 'ExceptionBeforeStart' = 3, 'ExceptionWhileProcessing' = 4),
	event_date Date, event_time DateTime, query_id String, log_comment String,
	read_rows UInt64, read_bytes UInt64, query_duration_ms UInt64, memory_usage Int64)
	ENGINE = MergeTree PARTITION BY event_date ORDER BY event_time`

// cost ranks hunts by the bytes they read, from the query log's rows of their real statements.
// chDB (26.5) keeps no system.query_log (its embedded server never starts the system logs, even
// with a <query_log> section), so the rows are written into a table of the query log's shape:
// one per statement the server received from real previews, with that statement's own
// log_comment and query_id; only the read counts, which chDB cannot measure, are the test's.
// TestCostOnTheServersQueryLog runs the same against a server that logs.
func TestCostRanksHuntsByReadBytes(t *testing.T) {
	f := newCostFixture(t)
	ctx := context.Background()
	mark := f.mark(t)
	f.preview(t, "narrow")
	f.preview(t, "wide")
	sts := f.huntStatements(t, mark)
	ql := f.db.Name + ".query_log"
	if err := f.db.Conn.Exec(ctx, "CREATE TABLE "+ql+" "+queryLogDDL); err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	insert := func(typ, comment string, ago time.Duration, rows, bytes uint64) {
		t.Helper()
		err := f.db.Conn.Exec(ctx, "INSERT INTO "+ql+" SELECT ?, toDate(now() - ?), now() - ?, '', ?, ?, ?, 12, 1048576",
			typ, int64(ago/time.Second), int64(ago/time.Second), comment, rows, bytes)
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range sts {
		var c struct{ HuntID, Kind, RunID string }
		if err := json.Unmarshal([]byte(st.Settings["log_comment"]), &struct {
			HuntID *string `json:"hunt_id"`
			Kind   *string `json:"kind"`
			RunID  *string `json:"run_id"`
		}{&c.HuntID, &c.Kind, &c.RunID}); err != nil {
			t.Fatalf("log_comment %q of %s: %v", st.Settings["log_comment"], st.QueryID, err)
		}
		if c.Kind != "preview" || st.QueryID != attrib.QueryIDPrefix+c.RunID {
			t.Fatalf("statement %s: kind %q, run %q", st.QueryID, c.Kind, c.RunID)
		}
		runs[c.HuntID]++
		rows := uint64(600) // one window of narrow
		if c.HuntID == "wide" {
			rows = 7200 // the whole table
		}
		insert("QueryStart", st.Settings["log_comment"], time.Minute, 0, 0) // not counted: its finish is
		insert("QueryFinish", st.Settings["log_comment"], time.Minute, rows, rows*12)
	}
	if runs["narrow"] == 0 || runs["wide"] == 0 {
		t.Fatalf("preview statements per hunt %v", runs)
	}
	// The period before: wide read half as much; narrow did not run. A failed statement of narrow
	// counts as a statement that failed. Rows that are not hunt-runner's, or older than two
	// periods, are not counted at all.
	insert("QueryFinish", `{"app":"hunt-runner","hunt_id":"wide","run_id":"r-old","kind":"live"}`, 90*time.Minute, 0, uint64(runs["wide"])*7200*6)
	insert("ExceptionWhileProcessing", `{"app":"hunt-runner","hunt_id":"narrow","run_id":"r-fail","kind":"live","hunt_set":"team-a"}`, time.Minute, 5, 60)
	insert("QueryFinish", `{"app":"hunt-runner","kind":"coordination","runner_id":"pod-a"}`, time.Minute, 3, 300)
	insert("QueryFinish", `{"app":"other","hunt_id":"wide"}`, time.Minute, 1, 1<<40)
	insert("QueryFinish", `hunt-runner hunt_id=wide`, time.Minute, 1, 1<<40)
	insert("QueryFinish", `{"app":"hunt-runner","hunt_id":"wide"}`, 3*time.Hour, 1, 1<<40)

	got := f.cost(t, "--query-log", ql, "--since", "1h")
	var keys []string
	by := map[string]attrib.Cost{}
	for _, e := range got.Entries {
		keys = append(keys, e.Key)
		by[e.Key] = e
	}
	if strings.Join(keys, ",") != "wide,narrow,"+attrib.KeyCoordination {
		t.Fatalf("ranking %v, want wide, narrow, coordination (by read bytes): %+v", keys, got.Entries)
	}
	w, n := by["wide"], by["narrow"]
	if w.Runs != uint64(runs["wide"]) || w.ReadBytes != uint64(runs["wide"])*7200*12 || w.Failed != 0 || w.Trend() != "+100%" || w.PrevRuns != 1 {
		t.Errorf("wide %+v (trend %s), want %d runs, %d bytes, +100%%", w, w.Trend(), runs["wide"], runs["wide"]*7200*12)
	}
	if n.Runs != uint64(runs["narrow"]+1) || n.Statements != uint64(runs["narrow"]+1) || n.Failed != 1 || n.Trend() != "new" || n.PeakMemory != 1048576 {
		t.Errorf("narrow %+v (trend %s), want %d runs, 1 failed, new", n, n.Trend(), runs["narrow"]+1)
	}

	sets := f.cost(t, "--query-log", ql, "--since", "1h", "--by", "set")
	var setKeys []string
	for _, e := range sets.Entries {
		setKeys = append(setKeys, e.Key)
	}
	if strings.Join(setKeys, ",") != attrib.KeyNoSet+","+attrib.KeyCoordination+",team-a" {
		t.Errorf("by set %v, want previews under %s, then coordination, then team-a", setKeys, attrib.KeyNoSet)
	}

	text, err := runApp(t, append([]string{"cost", "--query-log", ql, "--since", "1h"}, f.common...)...)
	if err != nil || !strings.Contains(text, "HUNT") || strings.Index(text, "wide") > strings.Index(text, "narrow") || !strings.Contains(text, "+100%") {
		t.Errorf("cost: %v\n%s", err, text)
	}
}

// A server without a query log, a table that does not exist and bad flags are told apart.
func TestCostQueryLogOffAndUsage(t *testing.T) {
	f := newCostFixture(t)
	var exists uint8
	if err := f.db.Conn.QueryRow(context.Background(), "EXISTS system.query_log").Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists == 0 {
		out, err := runApp(t, append([]string{"cost"}, f.common...)...)
		if exitCode(err) != exitError || !strings.Contains(err.Error(), "<query_log>") || !strings.Contains(err.Error(), "system") {
			t.Errorf("cost without a query log: exit %d, %v\n%s", exitCode(err), err, out)
		}
	}
	_, err := runApp(t, append([]string{"cost", "--query-log", f.db.Name + ".nosuch"}, f.common...)...)
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("cost of a missing table: exit %d, %v", exitCode(err), err)
	}
	for _, args := range [][]string{
		{"--by", "team"}, {"--since", "0s"}, {"extra"}, {"--query-log", "nodot"}, {"--hunt-file", "x.yaml"},
		{"--estimate", "wide", "--by", "set"},
	} {
		_, err := runApp(t, append(append([]string{"cost"}, args...), f.common...)...)
		if exitCode(err) != exitUsage {
			t.Errorf("cost %v: exit %d (%v), want %d", args, exitCode(err), err, exitUsage)
		}
	}
}

// On a server whose query log is on, the previews' own rows rank wide above narrow.
func TestCostOnTheServersQueryLog(t *testing.T) {
	f := newCostFixture(t)
	ctx := context.Background()
	var exists uint8
	if err := f.db.Conn.QueryRow(ctx, "EXISTS system.query_log").Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists == 0 {
		t.Skip("this engine keeps no system.query_log (chDB 26.5 never starts the system logs, even with a <query_log> " +
			"configuration section); TestCostRanksHuntsByReadBytes covers the query on a table of its shape. " +
			"Set " + chtest.EnvURL + " to a clickhouse-server to run this")
	}
	f.preview(t, "narrow")
	f.preview(t, "wide")
	if err := f.db.Conn.Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
		t.Fatal(err)
	}
	got := f.cost(t, "--since", "1h")
	rank := map[string]int{}
	by := map[string]attrib.Cost{}
	for i, e := range got.Entries {
		rank[e.Key], by[e.Key] = i, e
	}
	w, okw := by["wide"]
	n, okn := by["narrow"]
	if !okw || !okn || rank["wide"] > rank["narrow"] || w.ReadBytes <= n.ReadBytes || w.Runs == 0 {
		t.Fatalf("wide %+v, narrow %+v: want wide ranked above narrow by read bytes", w, n)
	}
}

// --estimate checks the hunt first, then flags the hunt whose window reads every granule of its
// table and not the one its table's sorting key prunes.
func TestCostEstimateFlagsAFullScan(t *testing.T) {
	f := newCostFixture(t)
	est := map[string]hunttest.Estimate{}
	for _, id := range []string{"narrow", "wide"} {
		out, err := runApp(t, append([]string{"cost", "--estimate", id, "--json", "--hunts-dir", f.dir}, f.common...)...)
		if err != nil {
			t.Fatalf("cost --estimate %s: %v\n%s", id, err, out)
		}
		var e hunttest.Estimate
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if len(e.Tables) != 1 || e.Tables[0].Database != f.src || e.Tables[0].Table != "events" || e.Tables[0].TotalGranules == 0 {
			t.Fatalf("estimate of %s: %+v", id, e)
		}
		est[id] = e
	}
	n, w := est["narrow"].Tables[0], est["wide"].Tables[0]
	if n.FullScan || n.Selected >= n.TotalGranules || n.Rows >= 7200 {
		t.Errorf("narrow %+v: want pruned by the sorting key", n)
	}
	if !w.FullScan || w.Selected != w.TotalGranules || w.Rows != 7200 || w.Granules <= n.Granules {
		t.Errorf("wide %+v: want every granule flagged", w)
	}
	text, err := runApp(t, append([]string{"cost", "--estimate", "wide", "--hunts-dir", f.dir}, f.common...)...)
	if err != nil || !strings.Contains(text, "reads every granule") || !strings.Contains(text, "EXPLAIN indexes = 1") {
		t.Errorf("cost --estimate wide: %v\n%s", err, text)
	}

	// A hunt that fails containment (it reads the coordination database, which only the server
	// check knows) never reaches the server as an EXPLAIN.
	bad := "id: nosy\ninterval: 10m\nquery: |\n  SELECT 1 FROM " + f.db.Name + ".hunt_lease WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
	if err := os.WriteFile(filepath.Join(f.dir, "nosy.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	mark := f.mark(t)
	_, err = runApp(t, append([]string{"cost", "--estimate", "nosy", "--hunts-dir", f.dir}, f.common...)...)
	if exitCode(err) != exitError {
		t.Errorf("estimate of a hunt reading the coordination database: exit %d (%v), want %d", exitCode(err), err, exitError)
	}
	for _, st := range (&chtest.Server{URL: strings.TrimSuffix(f.db.URL, "/")}).StatementsSince(t, mark) {
		if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(st.SQL)), "EXPLAIN") && strings.Contains(st.SQL, "hunt_lease") &&
			!strings.HasPrefix(strings.ToUpper(strings.TrimSpace(st.SQL)), "EXPLAIN AST") {
			t.Errorf("an unchecked hunt reached the server: %s", st.SQL)
		}
	}
}
