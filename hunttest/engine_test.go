package hunttest

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// engine is an Engine on the test server, which is shared: not Private.
func engine(t *testing.T) (*Engine, *chtest.DB) {
	t.Helper()
	db := chtest.New(t)
	return &Engine{
		Conn: db.Conn,
		Open: func(ctx context.Context, database string) (driver.Conn, error) {
			o, err := chtest.Options(db.URL, database)
			if err != nil {
				return nil, err
			}
			return clickhouse.Open(o)
		},
		Policy: configsrc.Policy{CoordinationDatabase: "hunt_runner"},
	}, db
}

const bruteForce = `id: brute-force
interval: 5m
query: |
  SELECT ip, count() AS failures, min(ts) AS first_seen
  FROM logs.auth_events
  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} AND ok = 0
  GROUP BY ip HAVING failures >= 5
`

const fixture5 = `    tables:
      logs.auth_events:
        columns: {ts: "DateTime64(3, 'UTC')", ip: String, ok: UInt8}
        rows:
          - {ts: 2026-01-01T00:01:00Z, ip: 10.0.0.1, ok: 0}
          - {ts: 2026-01-01T00:01:01Z, ip: 10.0.0.1, ok: 0}
          - {ts: 2026-01-01T00:01:02Z, ip: 10.0.0.1, ok: 0}
          - {ts: 2026-01-01T00:01:03Z, ip: 10.0.0.1, ok: 0}
          - {ts: 2026-01-01T00:01:04Z, ip: 10.0.0.1, ok: 0}
          - {ts: 2026-01-01T00:01:05Z, ip: 10.0.0.2, ok: 1}
`

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runTree(t *testing.T, e *Engine, dir string) *Report {
	t.Helper()
	trees, err := TreesOf([]string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.Run(context.Background(), trees, configsrc.Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func text(rep *Report) string {
	var b bytes.Buffer
	rep.WriteText(&b, true)
	return b.String()
}

func TestPassAndFail(t *testing.T) {
	e, db := engine(t)
	dir := writeTree(t, map[string]string{
		"auth/brute-force.yaml": bruteForce,
		"auth/brute-force.test.yaml": `hunt: brute-force
tests:
  - name: five failures fire once
    window: {start: 2026-01-01T00:00:00Z, end: 2026-01-01T00:05:00Z}
` + fixture5 + `    expect:
      - {ip: 10.0.0.1, failures: "5", first_seen: "2026-01-01 00:01:00"}
  - name: outside the window is quiet
    window: {start: 2026-01-01T00:01:03Z, end: 2026-01-01T00:05:00Z}
` + fixture5 + `    expect: []
  - name: wrong expectation fails
    window: {start: 2026-01-01T00:00:00Z, end: 2026-01-01T00:05:00Z}
` + fixture5 + `    expect:
      - {ip: 10.0.0.1, failures: 4}
      - {ip: 10.0.0.9, failures: 5}
`,
		"auth/other.yaml": strings.Replace(bruteForce, "brute-force", "other", 1),
	})
	rep := runTree(t, e, dir)
	out := text(rep)
	t.Log(out)
	passed, failed, errored := rep.Counts()
	if passed != 2 || failed != 1 || errored != 0 || len(rep.Problems) != 0 {
		t.Fatalf("passed %d failed %d errors %d problems %v, want 2 1 0\n%s", passed, failed, errored, rep.Problems, out)
	}
	for _, want := range []string{
		"--- PASS: brute-force/five failures fire once",
		"--- FAIL: brute-force/wrong expectation fails",
		"brute-force.test.yaml:30: findings differ from expect (1 found)",
		"missing (expected, not found):\n          {\"ip\":\"10.0.0.1\",\"failures\":4}\n          {\"ip\":\"10.0.0.9\",\"failures\":5}",
		"unexpected (found, not expected):\n          {\"ip\":\"10.0.0.1\",\"failures\":5}",
		"hunts with no test: other",
		"2 passed, 1 failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	var junit bytes.Buffer
	if err := rep.WriteJUnit(&junit); err != nil {
		t.Fatal(err)
	}
	var parsed junitSuites
	if err := xml.Unmarshal(junit.Bytes(), &parsed); err != nil {
		t.Fatalf("JUnit does not parse: %v\n%s", err, junit.String())
	}
	if parsed.Tests != 3 || parsed.Failures != 1 || len(parsed.Suites) != 1 || parsed.Suites[0].Cases[2].Failure == nil ||
		!strings.Contains(parsed.Suites[0].Cases[2].Failure.Text, "10.0.0.9") {
		t.Fatalf("JUnit %s", junit.String())
	}
	// Nothing is left behind: the fixture and scratch databases are dropped.
	var left uint64
	if err := db.Conn.QueryRow(context.Background(), "SELECT count() FROM system.databases WHERE name = 'logs' OR name LIKE 'hr_test_%'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d scratch databases left behind", left)
	}
}

// Bad input gets an error placed in the file, never a panic or a silent pass.
func TestBadInputIsPlaced(t *testing.T) {
	e, db := engine(t)
	window := "    window: {start: 2026-01-01T00:00:00Z, end: 2026-01-01T00:05:00Z}\n"
	head := "hunt: brute-force\ntests:\n  - name: t\n" + window
	table := "    tables:\n      logs.auth_events:\n        columns: {ts: \"DateTime64(3, 'UTC')\", ip: String, ok: UInt8}\n        rows:\n"
	for _, tc := range []struct{ name, body, want string }{
		{"unknown hunt", "hunt: brute-forse\ntests:\n  - name: t\n" + window + "    expect: []\n",
			`x.test.yaml:1:1: hunt "brute-forse" is not defined in`},
		{"not YAML", "hunt: brute-force\ntests:\n  - name: t\n   window: {\n", "x.test.yaml:2:1: not valid YAML"},
		{"unknown key", head + "    expect: []\n    expected: []\n", `x.test.yaml:6:5: test: unknown key "expected"`},
		{"no expect", head, "x.test.yaml:3:5: test has no expect: (expect: [] for a test that expects no findings)"},
		{"bad window time", "hunt: brute-force\ntests:\n  - name: t\n    window: {start: yesterday, end: 2026-01-01T00:05:00Z}\n    expect: []\n",
			"x.test.yaml:4:21: window start must be an RFC 3339 time"},
		{"window backwards", "hunt: brute-force\ntests:\n  - name: t\n    window: {start: 2026-01-01T00:05:00Z, end: 2026-01-01T00:00:00Z}\n    expect: []\n",
			"x.test.yaml:4:13: window end must be after its start"},
		{"row names an unknown column", head + table + "          - {ts: 2026-01-01T00:01:00Z, addr: 10.0.0.1}\n    expect: []\n",
			`x.test.yaml:9:40: row of logs.auth_events: no column "addr"`},
		{"row value does not parse", head + table + "          - {ts: 2026-01-01T00:01:00Z, ip: 10.0.0.1, ok: maybe}\n    expect: []\n",
			`x.test.yaml:9:58: row of logs.auth_events: "maybe" does not parse as UInt8, the type of column ok`},
		{"row integer out of range", head + table + "          - {ts: 2026-01-01T00:01:00Z, ip: 10.0.0.1, ok: 300}\n    expect: []\n",
			`x.test.yaml:9:58: row of logs.auth_events: 300 is out of range for UInt8, the type of column ok`},
		{"expect integer out of range", head + table + "          - {ts: 2026-01-01T00:01:00Z, ip: 10.0.0.1, ok: 0}\n    expect:\n      - {ip: 10.0.0.1, failures: 18446744073709551621}\n",
			`x.test.yaml:11:34: expect: 18446744073709551621 is out of range for UInt64, the type of the hunt's column failures`},
		{"row time does not parse", head + table + "          - {ts: the first of january, ip: 10.0.0.1, ok: 0}\n    expect: []\n",
			`x.test.yaml:9:18: row of logs.auth_events: "the first of january" does not parse as DateTime64(3, 'UTC')`},
		{"row is not a mapping", head + table + "          - [2026-01-01T00:01:00Z, 10.0.0.1, 0]\n    expect: []\n",
			"x.test.yaml:9:13: row of logs.auth_events must be a mapping, not a list"},
		{"type does not parse", head + "    tables:\n      logs.auth_events:\n        columns: {ts: \"DateTim64(3)\", ip: String, ok: UInt8}\n    expect: []\n",
			`x.test.yaml:7:23: column ts: the type DateTim64(3) does not parse`},
		{"expect value does not parse", head + table + "          - {ts: 2026-01-01T00:01:00Z, ip: 10.0.0.1, ok: 0}\n    expect:\n      - {ip: 10.0.0.1, failures: five}\n",
			`x.test.yaml:11:34: expect: "five" does not parse as UInt64, the type of the hunt's column failures`},
		{"expect names a column the hunt lacks", head + table + "          - {ts: 2026-01-01T00:01:00Z, ip: 10.0.0.1, ok: 0}\n    expect:\n      - {src_ip: 10.0.0.1}\n",
			`x.test.yaml:11:10: expect names column "src_ip", which hunt brute-force does not return (its columns: ip, failures, first_seen)`},
		{"expect rows name different columns", head + table + "          - {ts: 2026-01-01T00:01:00Z, ip: 10.0.0.1, ok: 0}\n    expect:\n      - {ip: 10.0.0.1}\n      - {failures: 5}\n",
			`x.test.yaml:12:9: this expect row names the columns {failures}, the first names {ip}`},
		{"window outside the fixture", "hunt: brute-force\ntests:\n  - name: t\n    window: {start: 2025-01-01T00:00:00Z, end: 2025-01-01T00:05:00Z}\n" +
			table + "          - {ts: 2026-01-01T00:01:00Z, ip: 10.0.0.1, ok: 0}\n    expect: []\n",
			"x.test.yaml:4:13: window [2025-01-01T00:00:00Z, 2025-01-01T00:05:00Z) lies outside the fixture rows' times (2026-01-01T00:01:00Z to 2026-01-01T00:01:00Z)"},
		{"system database", head + "    tables:\n      system.tables:\n        columns: {name: String}\n    expect: []\n",
			"x.test.yaml:6:7: fixture table \"system.tables\": the system database belongs to the server"},
		{"duplicate test name", head + "    expect: []\n  - name: t\n" + window + "    expect: []\n",
			`x.test.yaml:6:5: test "t" is also defined on line 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"brute-force.yaml": bruteForce, "x.test.yaml": tc.body})
			rep := runTree(t, e, dir)
			out := text(rep)
			if len(rep.Problems) == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("want a problem %q, got:\n%s", tc.want, out)
			}
			if passed, failed, _ := rep.Counts(); passed+failed != 0 {
				t.Fatalf("a bad test was counted as run:\n%s", out)
			}
		})
	}
	var left uint64
	if err := db.Conn.QueryRow(context.Background(), "SELECT count() FROM system.databases WHERE name = 'logs' OR name LIKE 'hr_test_%'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d scratch databases left behind", left)
	}
}

// On a shared server a test never writes into a database it did not create: one that exists is
// refused, and left as it was.
func TestExistingDatabaseIsRefused(t *testing.T) {
	e, db := engine(t)
	ctx := context.Background()
	real := "real_" + randomSuffix()
	if err := db.Conn.Exec(ctx, "CREATE DATABASE "+real); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+real) })
	if err := db.Conn.Exec(ctx, "CREATE TABLE "+real+".kept (x UInt8) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	hunt := strings.Replace(bruteForce, "logs.auth_events", real+".events", 1)
	body := "hunt: brute-force\ntests:\n  - name: t\n    window: {start: 2026-01-01T00:00:00Z, end: 2026-01-01T00:05:00Z}\n" +
		"    tables:\n      " + real + ".events:\n        columns: {ts: DateTime64(3), ip: String, ok: UInt8}\n    expect: []\n"
	rep := runTree(t, e, writeTree(t, map[string]string{"brute-force.yaml": hunt, "x.test.yaml": body}))
	out := text(rep)
	if !strings.Contains(out, "x.test.yaml:6:7: fixture database "+real+" exists on this server and is not a test's scratch database") {
		t.Fatalf("an existing database was used:\n%s", out)
	}
	var tables uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = {d:String}", clickhouse.Named("d", real)).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 1 {
		t.Fatalf("the real database holds %d tables after the test, want its 1", tables)
	}

	// A scratch database of another run is refused too, with how to clear it.
	scratch := "scratch_" + randomSuffix()
	if err := db.Conn.Exec(ctx, "CREATE DATABASE "+scratch+" COMMENT "+quoteString(ScratchComment)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+scratch) })
	rep = runTree(t, e, writeTree(t, map[string]string{"brute-force.yaml": strings.ReplaceAll(hunt, real, scratch),
		"x.test.yaml": strings.ReplaceAll(body, real, scratch)}))
	if out := text(rep); !strings.Contains(out, "is a scratch database of another `hunt-runner test`") {
		t.Fatalf("another run's scratch database was used:\n%s", out)
	}
}

// --require-tests asks each hunt for a test that expects findings and one that expects none.
func TestCoverage(t *testing.T) {
	e, _ := engine(t)
	positive := "hunt: brute-force\ntests:\n  - name: p\n    window: {start: 2026-01-01T00:00:00Z, end: 2026-01-01T00:05:00Z}\n" +
		fixture5 + "    expect:\n      - {ip: 10.0.0.1}\n"
	rep := runTree(t, e, writeTree(t, map[string]string{"brute-force.yaml": bruteForce, "b.test.yaml": positive,
		"other.yaml": strings.Replace(bruteForce, "brute-force", "other", 1)}))
	if passed, _, _ := rep.Counts(); passed != 1 {
		t.Fatalf("want the positive test to pass:\n%s", text(rep))
	}
	inc := rep.Incomplete()
	if len(inc) != 2 || inc[0].Hunt != "brute-force" || inc[0].Positive != 1 || inc[0].Negative != 0 || inc[1].Hunt != "other" {
		t.Fatalf("incomplete %+v", inc)
	}
	if out := text(rep); !strings.Contains(out, "hunts without a positive and a negative test: brute-force (no test that expects none (expect: []))") ||
		!strings.Contains(out, "hunts with no test: other") {
		t.Fatalf("coverage lines:\n%s", out)
	}
}

// A hunt the runner would refuse (here the server's parser refuses it; the offline check does
// not parse SQL) is neither tested nor previewed: the error says why, in the test file.
func TestRefusedHuntIsNotRun(t *testing.T) {
	e, db := engine(t)
	bad := strings.Replace(bruteForce, "AND ok = 0", "AND AND ok = 0", 1)
	body := "hunt: brute-force\ntests:\n  - name: t\n    window: {start: 2026-01-01T00:00:00Z, end: 2026-01-01T00:05:00Z}\n" + fixture5 + "    expect: []\n"
	rep := runTree(t, e, writeTree(t, map[string]string{"brute-force.yaml": bad, "x.test.yaml": body}))
	if out := text(rep); !strings.Contains(out, "x.test.yaml:1:1: hunt brute-force (brute-force.yaml) is not run by the runner: hunt query refused: the server's parser says") {
		t.Fatalf("a refused hunt was tested:\n%s", out)
	}
	src, err := configsrc.NewDir(writeTree(t, map[string]string{"brute-force.yaml": bad}), configsrc.Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	set, err := src.Load(context.Background())
	if err != nil || len(set.Hunts) != 1 {
		t.Fatalf("load: %v %v", err, set)
	}
	p := &Previewer{Check: db.Conn, Hunts: db.Conn, Policy: e.Policy}
	ran := false
	err = p.Preview(context.Background(), set.Hunts[0], time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC),
		func(Window) error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), "is not run by the runner") {
		t.Fatalf("a refused hunt was previewed: %v (ran %v)", err, ran)
	}
}
