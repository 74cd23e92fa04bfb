package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// An upgrade of the first layout cut short by a failed statement (its copy of the old
// watermarks landed, then answered an error): run, materialise, shim and import-legacy refuse the database
// naming `hunt-runner schema`, run writes nothing, and the next schema finishes the upgrade
// with every watermark, run record and finding there once.
func TestInterruptedUpgradeIsRefusedThenResumed(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	const name = "hr_upgrade"
	opts, err := chtest.Options(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	exec := func(sql string) {
		t.Helper()
		if err := admin.Exec(ctx, strings.ReplaceAll(sql, "hunt_runner", name)); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	layout, err := os.ReadFile(filepath.Join("..", "..", "store", "schema", "testdata", "layouts", "v1", "single.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range strings.Split(string(layout), ";\n") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if !strings.HasPrefix(l, "--") {
				lines = append(lines, l)
			}
		}
		if sql := strings.TrimSpace(strings.Join(lines, "\n")); sql != "" {
			exec(sql)
		}
	}
	// Progress of the first layout: two hunts committed (through its view into hunt_run), one
	// with findings.
	exec(`INSERT INTO hunt_runner.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started)
	      VALUES ('a', 1000, generateUUIDv4(), now64(6), '11111111-1111-1111-1111-111111111111', 'v1', 900, 2, now64(6)),
	             ('b', 2000, generateUUIDv4(), now64(6), '22222222-2222-2222-2222-222222222222', 'v1', 1900, 0, now64(6))`)
	exec(`INSERT INTO hunt_runner.hunt_findings (hunt_id, fire, finding_id, finding, severity, labels, run_id, found)
	      VALUES ('a', 1000, 1, '{"x":1}', 'high', map(), '11111111-1111-1111-1111-111111111111', now64(6)),
	             ('a', 1000, 2, '{"x":2}', 'high', map(), '11111111-1111-1111-1111-111111111111', now64(6))`)

	common := []string{"--clickhouse-url", srv.URL, "--database", name}
	srv.SetFaults(t, ctl.FaultRule{Name: "copy", Kind: ctl.KindInsert, Match: `hunt_watermark_v1`, Effect: ctl.FailAfter, Times: 1})
	if out, err := runApp(t, append([]string{"schema", "--topology", "single"}, common...)...); err == nil {
		t.Fatalf("schema with its copy failing succeeded:\n%s", out)
	}
	if st := srv.FaultStats(t); st[0].Fired != 1 {
		t.Fatalf("the fault did not fire: %+v", st)
	}
	srv.ClearFaults(t)

	dir := t.TempDir()
	hunt := "interval: 1m\nquery: |\n  SELECT 1 AS n WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(hunt), 0o644); err != nil {
		t.Fatal(err)
	}
	// A run that started would keep running: give it a bound, and fail if it is reached.
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"run", "--hunts-dir", dir, "--tick", "200ms", "--settle", "100ms", "--listen", "127.0.0.1:0", "--owner", "refused"},
		{"materialise", "--hunts-dir", dir},
		{"shim", "--listen", "127.0.0.1:0"},
		{"import-legacy", "--from-database", "dfe", "--hunts-dir", dir},
	} {
		out, err := runAppContext(runCtx, append(args, common...)...)
		if err == nil || !strings.Contains(err.Error(), "run `hunt-runner schema`") || runCtx.Err() != nil {
			t.Fatalf("%s on a half-upgraded database: %v\n%s", args[0], err, out)
		}
	}
	count := func(sql string) uint64 {
		t.Helper()
		var n uint64
		if err := admin.QueryRow(ctx, strings.ReplaceAll(sql, "DB", name)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, table := range []string{"hunt_lease", "hunt_schedule", "hunt_runner_heartbeat"} {
		if n := count("SELECT count() FROM DB." + table); n != 0 {
			t.Fatalf("%d rows in %s: a refused command wrote", n, table)
		}
	}

	out, err := runApp(t, append([]string{"schema", "--topology", "single"}, common...)...)
	if err != nil || !strings.Contains(out, "copied hunt_watermark_v1") {
		t.Fatalf("schema did not resume the upgrade: %v\n%s", err, out)
	}
	for _, c := range []struct {
		sql  string
		want uint64
	}{
		{"SELECT count() FROM DB.hunt_watermark", 2},
		{"SELECT toUInt64(max(watermark)) FROM DB.hunt_watermark WHERE hunt_id = 'a'", 1000},
		{"SELECT toUInt64(max(watermark)) FROM DB.hunt_watermark WHERE hunt_id = 'b'", 2000},
		{"SELECT count() FROM DB.hunt_runs WHERE status = 'succeeded'", 2},
		{"SELECT count() FROM DB.hunt_runs WHERE hunt_id = 'a' AND rows_written = 2 AND toUInt64(window_start) = 900", 1},
		{"SELECT count() FROM DB.hunt_findings_committed WHERE hunt_id = 'a'", 2},
		{"SELECT toUInt64(max(version)) FROM DB.hunt_schema", schema.Version},
	} {
		if got := count(c.sql); got != c.want {
			t.Errorf("after the resumed upgrade: %s = %d, want %d", c.sql, got, c.want)
		}
	}
	if err := schema.CheckLayout(ctx, admin, name); err != nil {
		t.Fatalf("layout after the resumed upgrade: %v", err)
	}
}
