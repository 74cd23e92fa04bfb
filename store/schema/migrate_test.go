package schema_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/runner"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// createLayout runs a past layout's DDL script (testdata/layouts/vN/topology.sql) for database.
func createLayout(t *testing.T, db *chtest.DB, path, database string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(string(b), "hunt_runner", database)
	for _, stmt := range strings.Split(script, ";\n") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if !strings.HasPrefix(l, "--") {
				lines = append(lines, l)
			}
		}
		if sql := strings.TrimSpace(strings.Join(lines, "\n")); sql != "" {
			if err := db.Conn.Exec(context.Background(), sql); err != nil {
				t.Fatalf("%s: %v\n%s", path, err, sql)
			}
		}
	}
}

// Every past layout upgrades in place: progress, the run log and findings carry over, the
// views read them, and a second Apply changes nothing.
func TestApplyUpgradesEveryPastLayout(t *testing.T) {
	layouts, err := filepath.Glob("testdata/layouts/v*/*.sql")
	if err != nil || len(layouts) == 0 {
		t.Fatalf("no past layouts under testdata/layouts: %v", err)
	}
	db := chtest.New(t)
	ctx := context.Background()
	for _, path := range layouts {
		topo := schema.Topology(strings.TrimSuffix(filepath.Base(path), ".sql"))
		t.Run(path, func(t *testing.T) {
			name := freshDatabase(t, db)
			createLayout(t, db, path, name)
			q := func(sql string) {
				t.Helper()
				if err := db.Conn.Exec(ctx, strings.ReplaceAll(sql, "DB", schema.QuoteIdent(name))); err != nil {
					t.Fatal(err)
				}
			}
			// Version 1: a commit with a skipped range (its view writes succeeded + gap rows), a
			// failed attempt, a seeded watermark with no run, and findings of the commit.
			q(`INSERT INTO DB.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started, gap_start, gap_end)
			   VALUES ('a', 1000, generateUUIDv4(), now64(6), '11111111-1111-1111-1111-111111111111', 'pod-1', 900, 2, now64(6), 100, 900),
			          ('b', 500, generateUUIDv4(), now64(6), '00000000-0000-0000-0000-000000000000', '', 0, 0, now64(6), 0, 0)`)
			q(`INSERT INTO DB.hunt_run (hunt_id, fire, run_id, owner, status, window_start, window_end, rows_written, started, finished, error)
			   VALUES ('a', 1100, generateUUIDv4(), 'pod-2', 'failed', 1000, 1100, 0, now64(6), now64(6), 'boom')`)
			q(`INSERT INTO DB.hunt_findings (hunt_id, fire, finding_id, finding, severity, labels, run_id, found)
			   VALUES ('a', 1000, 1, '{"x":1}', 'high', map(), '11111111-1111-1111-1111-111111111111', now64(6)),
			          ('a', 1000, 2, '{"x":2}', 'high', map(), '11111111-1111-1111-1111-111111111111', now64(6))`)

			rep, err := schema.Apply(ctx, db.Conn, name, topo, "default")
			if err != nil {
				t.Fatal(err)
			}
			// chlocal rewrites Replicated engines to single-node ones, so only the single layout
			// can be expected to match its topology here.
			if len(rep.Upgraded) == 0 || (topo == schema.TopologySingle && len(rep.Mismatched) != 0) {
				t.Fatalf("upgrade report: upgraded %v mismatched %v", rep.Upgraded, rep.Mismatched)
			}
			count := func(sql string) uint64 {
				t.Helper()
				var n uint64
				if err := db.Conn.QueryRow(ctx, strings.ReplaceAll(sql, "DB", schema.QuoteIdent(name))).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			checks := []struct {
				sql  string
				want uint64
			}{
				{"SELECT toUInt64(max(version)) FROM DB.hunt_schema", schema.Version},
				{"SELECT count() FROM DB.hunt_watermark", 2},
				{"SELECT toUInt64(max(watermark)) FROM DB.hunt_watermark WHERE hunt_id = 'b'", 500},
				{"SELECT count() FROM DB.hunt_runs WHERE hunt_id = 'a' AND status = 'succeeded' AND rows_written = 2", 1},
				{"SELECT count() FROM DB.hunt_runs WHERE hunt_id = 'a' AND status = 'gap' AND toUInt64(window_start) = 100", 1},
				{"SELECT count() FROM DB.hunt_runs WHERE hunt_id = 'a' AND status = 'failed'", 1},
				{"SELECT count() FROM DB.hunt_runs", 3},
				{"SELECT count() FROM DB.hunt_findings_committed WHERE hunt_id = 'a'", 2},
			}
			if strings.Contains(path, "/v1/") {
				checks = append(checks, struct {
					sql  string
					want uint64
				}{"SELECT count() FROM DB.hunt_findings_v1", 2})
			}
			for _, c := range checks {
				if got := count(c.sql); got != c.want {
					t.Errorf("%s = %d, want %d", c.sql, got, c.want)
				}
			}
			again, err := schema.Apply(ctx, db.Conn, name, topo, "default")
			if err != nil {
				t.Fatal(err)
			}
			if len(again.Created) != 0 || len(again.Upgraded) != 0 {
				t.Errorf("second Apply: created %v upgraded %v", again.Created, again.Upgraded)
			}
			if got := count("SELECT count() FROM DB.hunt_watermark"); got != 2 {
				t.Errorf("second Apply copied again: %d watermark rows, want 2", got)
			}
		})
	}
}

// After the upgrade of the first layout, a runner runs a hunt on it: it continues from the
// copied watermark, commits, and its findings are visible through the committed view.
func TestUpgradedLayoutRunsAHunt(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	name := freshDatabase(t, db)
	createLayout(t, db, "testdata/layouts/v1/single.sql", name)
	var now int64
	if err := db.Conn.QueryRow(ctx, "SELECT toInt64(toUnixTimestamp(now()))").Scan(&now); err != nil {
		t.Fatal(err)
	}
	const interval = 3600
	offset := ((now-interval/2)%interval + interval) % interval // the latest fire half an hour back
	fire := schedule.LatestFire(now, interval, offset)
	// Progress of the first layout: a commit one interval before the fire (through its view).
	if err := db.Conn.Exec(ctx, "INSERT INTO "+schema.QuoteIdent(name)+".hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started) "+
		"SELECT 'old', toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), generateUUIDv4(), 'v1-pod', toDateTime(?, 'UTC'), 0, now64(6)", fire-interval, fire-2*interval); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Apply(ctx, db.Conn, name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	opts, err := chtest.Options(db.URL, name)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	coord, err := lease.New(store.New(conn, name).Leases(), lease.Options{Owner: "v2-pod", Lease: 6 * time.Second, Settle: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	set := hunt.NewSet([]hunt.Hunt{{ID: "old", Interval: time.Duration(interval) * time.Second, Offset: time.Duration(offset) * time.Second,
		Enabled: true, Query: "SELECT arrayJoin([1, 2, 3]) AS n WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}}, "test", "")
	r, err := runner.New(conn, coord, store.New(conn, name), func() *hunt.Set { return set },
		runner.Options{Owner: "v2-pod", Database: name, Tick: 200 * time.Millisecond, Lease: 6 * time.Second, Settle: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Start(rctx) }()
	defer func() { cancel(); <-done }()
	count := func(sql string, args ...any) uint64 {
		var n uint64
		if err := db.Conn.QueryRow(ctx, strings.ReplaceAll(sql, "DB", schema.QuoteIdent(name)), args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	chtest.Eventually(t, time.Minute, "the runner to commit on the upgraded layout", func() bool {
		return count("SELECT count() FROM DB.hunt_runs WHERE hunt_id = 'old' AND status = 'succeeded' AND toInt64(fire) = ?", fire) > 0
	})
	if n := count("SELECT count() FROM DB.hunt_runs WHERE hunt_id = 'old' AND status = 'succeeded' AND toInt64(window_start) = ? AND toInt64(fire) = ?", fire-interval, fire); n != 1 {
		t.Fatalf("the first run after the upgrade does not continue from the copied watermark (%d rows)", n)
	}
	if n := count("SELECT count() FROM DB.hunt_findings_committed WHERE hunt_id = 'old'"); n != 3 {
		t.Fatalf("%d committed findings, want 3", n)
	}
}
