package schema_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func engineOf(t *testing.T, db *chtest.DB, database, table string) string {
	t.Helper()
	var s string
	if err := db.Conn.QueryRow(context.Background(), "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?",
		database, table).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The TTLs change only when they differ, and then once: a second apply is a no-op. Commit rows
// follow a longer findings retention, and a shorter commits retention than the findings' is
// refused without changing anything.
func TestApplyRetention(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	apply := func(r schema.Retention) []string {
		t.Helper()
		did, err := schema.ApplyRetention(ctx, db.Conn, db.Name, schema.TopologySingle, "", r)
		if err != nil {
			t.Fatal(err)
		}
		return did
	}
	if did := apply(schema.Retention{}); len(did) != 0 {
		t.Fatalf("the default retention on a fresh schema: %q; want no change", did)
	}
	did := apply(schema.Retention{FindingsDays: 30})
	if len(did) != 1 || !strings.Contains(did[0], "hunt_findings TTL from toDateTime(found) + toIntervalDay(90) to toDateTime(found) + toIntervalDay(30)") {
		t.Fatalf("findings 30 days: %q", did)
	}
	if did = apply(schema.Retention{FindingsDays: 30}); len(did) != 0 {
		t.Fatalf("findings 30 days again: %q; want no change", did)
	}
	// Longer findings: the commit rows are lengthened first, so no moment hides a finding.
	did = apply(schema.Retention{FindingsDays: 365})
	if len(did) != 2 || !strings.Contains(did[0], "hunt_watermark TTL") || !strings.Contains(did[0], "toIntervalDay(366) GROUP BY hunt_id") ||
		!strings.Contains(did[1], "toIntervalDay(365)") {
		t.Fatalf("findings 365 days: %q, want the commit rows kept 365 days (and the margin) first", did)
	}
	// Shorter again: findings first.
	did = apply(schema.Retention{FindingsDays: 30})
	if len(did) != 2 || !strings.Contains(did[0], "hunt_findings TTL") || !strings.Contains(did[1], "toIntervalDay(91) GROUP BY hunt_id") {
		t.Fatalf("back to 30 days: %q, want findings shortened first", did)
	}
	before := engineOf(t, db, db.Name, schema.TableWatermark)
	for _, bad := range []schema.Retention{{FindingsDays: 90, CommitsDays: 30}, {FindingsDays: -1}} {
		if did, err := schema.ApplyRetention(ctx, db.Conn, db.Name, schema.TopologySingle, "", bad); !errors.Is(err, schema.ErrRetention) || len(did) != 0 {
			t.Errorf("retention %+v: %q, %v; want an ErrRetention and no change", bad, did, err)
		}
	}
	if after := engineOf(t, db, db.Name, schema.TableWatermark); after != before {
		t.Errorf("a refused retention changed hunt_watermark:\n%s\n%s", before, after)
	}
}

// A database of the previous layout, upgraded, with findings kept a year: commit rows aged past
// 90 days (the previous roll-up) and past the commits retention are merged with their TTLs
// applied (OPTIMIZE … FINAL). Every committed finding the findings TTL keeps is still visible,
// each visible run's record in hunt_runs is unchanged, uncommitted findings stay hidden, and the
// row a roll-up leaves is the newest rolled commit exactly, every column.
func TestRetentionKeepsCommittedFindingsVisible(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	name := freshDatabase(t, db)
	createLayout(t, db, "testdata/layouts/v2/single.sql", name)
	rep, err := schema.Apply(ctx, db.Conn, name, schema.TopologySingle, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Upgraded, func(s string) bool { return strings.Contains(s, "replaced the hunt_watermark roll-up") }) {
		t.Fatalf("the upgrade of layout 2 did not replace the roll-up: %q", rep.Upgraded)
	}
	if e := engineOf(t, db, name, schema.TableWatermark); !strings.Contains(e, "run_owner = argMax(run_owner, watermark)") {
		t.Fatalf("hunt_watermark after the upgrade: %s", e)
	}
	if _, err := schema.ApplyRetention(ctx, db.Conn, name, schema.TopologySingle, "", schema.Retention{FindingsDays: 365}); err != nil {
		t.Fatal(err)
	}
	q := func(sql string) string { return strings.ReplaceAll(sql, "DB", schema.QuoteIdent(name)) }
	exec := func(sql string) {
		t.Helper()
		if err := db.Conn.Exec(ctx, q(sql)); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	strs := func(sql string) []string {
		t.Helper()
		rows, err := db.Conn.Query(ctx, q(sql))
		if err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	// Hunt a: six commits aged 420 … 10 days, every column distinct, two findings each; an
	// uncommitted attempt's findings at 200 days. Hunt m: two commits just past 365 days whose
	// first run's findings were stamped by a runner clock two hours ahead: still kept.
	// No merge before the snapshot below: a background one would apply the TTLs early.
	exec("SYSTEM STOP MERGES DB.hunt_watermark")
	exec("SYSTEM STOP MERGES DB.hunt_findings")
	ages := []int{420, 400, 300, 200, 100, 10}
	run := func(hunt string, i int) string {
		return fmt.Sprintf("%08d-0000-4000-8000-%012d", i, map[string]int{"a": 1, "m": 2}[hunt])
	}
	for i, age := range ages {
		at := fmt.Sprintf("now64(6) - INTERVAL %d DAY", age)
		exec(fmt.Sprintf(`INSERT INTO DB.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows,
		    run_started, gap_start, gap_end, findings_dropped, kind, interval_seconds)
		    SELECT 'a', %d, generateUUIDv4(), %s, '%s', 'pod-%d', %d, %d, %s - INTERVAL 1 MINUTE, %d, %d, %d, '%s', %d`,
			10000*(i+1), at, run("a", i), i, 10000*(i+1)-3600, i+1, at, i, i*7, i, []string{"scheduled", "request", "imported"}[i%3], 60*(i+1)))
		exec(fmt.Sprintf(`INSERT INTO DB.hunt_findings (hunt_id, fire, finding_id, finding, severity, labels, run_id, found)
		    SELECT 'a', %d, number, toString(number), 'high', map(), '%s', %s FROM numbers(2)`, 10000*(i+1), run("a", i), at))
	}
	exec(`INSERT INTO DB.hunt_findings (hunt_id, fire, finding_id, finding, severity, labels, run_id, found)
	      SELECT 'a', 40000, 9, 'lost', 'high', map(), generateUUIDv4(), now64(6) - INTERVAL 200 DAY`)
	for i, at := range []string{"now64(6) - INTERVAL 365 DAY - INTERVAL 1 HOUR", "now64(6) - INTERVAL 365 DAY - INTERVAL 30 MINUTE"} {
		exec(fmt.Sprintf(`INSERT INTO DB.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows,
		    run_started, gap_start, gap_end, findings_dropped, kind, interval_seconds)
		    SELECT 'm', %d, generateUUIDv4(), %s, '%s', 'pod', 0, 0, %s, 0, 0, 0, 'scheduled', 60`,
			1000*(i+1), at, run("m", i), at))
	}
	exec(`INSERT INTO DB.hunt_findings (hunt_id, fire, finding_id, finding, severity, labels, run_id, found)
	      SELECT 'm', 1000, 1, 'skewed', 'high', map(), '` + run("m", 0) + `', now64(6) - INTERVAL 365 DAY + INTERVAL 1 HOUR`)

	wmRow := "SELECT formatRow('TSV', *) FROM DB.hunt_watermark WHERE hunt_id = 'a' ORDER BY watermark"
	var keptRuns []string // the runs whose findings the findings TTL keeps
	for i, age := range ages {
		if age < 365 {
			keptRuns = append(keptRuns, "'"+run("a", i)+"'")
		}
	}
	keptRuns = append(keptRuns, "'"+run("m", 0)+"'")
	runsOf := "SELECT formatRow('TSV', *) FROM DB.hunt_runs WHERE run_id IN (" + strings.Join(keptRuns, ", ") + ") ORDER BY hunt_id, fire, status"
	commitsBefore, runsBefore := strs(wmRow), strs(runsOf)
	if len(commitsBefore) != len(ages) {
		t.Fatalf("%d commit rows of hunt a before the merge, want %d", len(commitsBefore), len(ages))
	}
	exec("SYSTEM START MERGES DB.hunt_watermark")
	exec("SYSTEM START MERGES DB.hunt_findings")
	exec("OPTIMIZE TABLE DB.hunt_watermark FINAL")
	exec("OPTIMIZE TABLE DB.hunt_findings FINAL")

	if n := strs("SELECT toString(count()) FROM DB.hunt_findings WHERE hunt_id = 'a' AND toUInt32(fire) <= 20000"); n[0] != "0" {
		t.Fatalf("%s findings older than 365 days survived the merge: the TTLs were not applied", n[0])
	}
	commitsAfter := strs(wmRow)
	if !slices.Equal(commitsAfter, commitsBefore[1:]) {
		t.Errorf("hunt a's commit rows after the roll-up:\n%s\nwant the two oldest rolled into the second exactly:\n%s",
			strings.Join(commitsAfter, "\n"), strings.Join(commitsBefore[1:], "\n"))
	}
	visible := strs("SELECT concat(hunt_id, ' ', toString(toUInt32(fire)), ' ', finding) FROM DB.hunt_findings_committed ORDER BY hunt_id, fire, finding")
	var want []string
	for i, age := range ages {
		if age < 365 {
			want = append(want, fmt.Sprintf("a %d 0", 10000*(i+1)), fmt.Sprintf("a %d 1", 10000*(i+1)))
		}
	}
	want = append(want, "m 1000 skewed")
	if !slices.Equal(visible, want) {
		t.Errorf("committed findings visible after the merges:\n%q\nwant every one the findings TTL keeps:\n%q", visible, want)
	}
	kept := strs("SELECT toString(count()) FROM DB.hunt_findings WHERE finding != 'lost'")
	if kept[0] != fmt.Sprint(len(want)) {
		t.Errorf("%s committed findings stored, %d visible", kept[0], len(want))
	}
	if runsAfter := strs(runsOf); !slices.Equal(runsAfter, runsBefore) {
		t.Errorf("run records of the visible runs changed:\n%s\nwant:\n%s", strings.Join(runsAfter, "\n"), strings.Join(runsBefore, "\n"))
	}
}

// Rows written before hunt sets existed read as the default set once `schema` adds the column.
func TestHuntSetColumnsDefaultOnUpgrade(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	for _, q := range []string{
		"ALTER TABLE hunt_schedule DROP COLUMN hunt_set",
		"ALTER TABLE hunt_publish DROP COLUMN hunt_set",
		"INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) VALUES ('old', 60, 0, 1, 'h', now64(6))",
		"INSERT INTO hunt_publish (set_hash, hunt_count, source, published) VALUES ('s', 1, 'dir:/h', now64(6))",
	} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rep, err := schema.Apply(ctx, db.Conn, db.Name, schema.TopologySingle, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"added column hunt_schedule.hunt_set", "added column hunt_publish.hunt_set"} {
		if !slices.Contains(rep.Upgraded, want) {
			t.Errorf("upgrade report %v lacks %q", rep.Upgraded, want)
		}
	}
	for _, table := range []string{"hunt_schedule", "hunt_publish"} {
		var set string
		if err := db.Conn.QueryRow(ctx, "SELECT hunt_set FROM "+table).Scan(&set); err != nil || set != "default" {
			t.Errorf("%s.hunt_set of an old row = %q, %v; want default", table, set, err)
		}
	}
}
