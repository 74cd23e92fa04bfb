package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func mustRow(t *testing.T, id string, interval time.Duration, hash string) schedule.Row {
	t.Helper()
	r, err := schedule.NewRow(id, schedule.Spec{Interval: interval}, schedule.DefaultSpreadFraction, hash)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tableCounts returns the number of rows in hunt_schedule and hunt_publish.
func tableCounts(t *testing.T, conn driver.Conn, database string) (sched, publish uint64) {
	t.Helper()
	ctx := context.Background()
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+schema.QuoteIdent(database)+".hunt_schedule").Scan(&sched); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+schema.QuoteIdent(database)+".hunt_publish").Scan(&publish); err != nil {
		t.Fatal(err)
	}
	return sched, publish
}

func TestMaterialiseOnEngine(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	sc := store.New(db.Conn, db.Name).Schedule()
	opts := schedule.MaterialiseOptions{Source: "dir:/hunts"}

	a := mustRow(t, "hunt-a", 5*time.Minute, "ha1")
	b := mustRow(t, "hunt-b", time.Hour, "hb1")
	c := mustRow(t, "hunt-c", 15*time.Minute, "hc1")
	cron, err := schedule.NewRow("hunt-cron", schedule.Spec{Interval: 15 * time.Minute, Offset: 5 * time.Minute, Pinned: true}, schedule.DefaultSpreadFraction, "hx1")
	if err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name                       string
		rows                       []schedule.Row
		hash                       string
		added, changed, tombstoned []string
		wantSchedule, wantPublish  uint64
	}{
		{name: "add", rows: []schedule.Row{a, b, c, cron}, hash: "set1", added: []string{"hunt-a", "hunt-b", "hunt-c", "hunt-cron"}, wantSchedule: 4, wantPublish: 1},
		{name: "re-run writes nothing", rows: []schedule.Row{a, b, c, cron}, hash: "set1", wantSchedule: 4, wantPublish: 1},
		{name: "change", rows: []schedule.Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), b, c, cron}, hash: "set2", changed: []string{"hunt-a"}, wantSchedule: 5, wantPublish: 2},
		{name: "remove", rows: []schedule.Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), b, cron}, hash: "set3", tombstoned: []string{"hunt-c"}, wantSchedule: 6, wantPublish: 3},
		{name: "disable", rows: []schedule.Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), {HuntID: "hunt-b", ConfigHash: "hb2"}, cron}, hash: "set4", tombstoned: []string{"hunt-b"}, wantSchedule: 7, wantPublish: 4},
		{name: "re-run after disable writes nothing", rows: []schedule.Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), {HuntID: "hunt-b", ConfigHash: "hb2"}, cron}, hash: "set4", wantSchedule: 7, wantPublish: 4},
		{name: "re-enable and re-add", rows: []schedule.Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), b, c, cron}, hash: "set5", added: []string{"hunt-b", "hunt-c"}, wantSchedule: 9, wantPublish: 5},
		{name: "hash only", rows: []schedule.Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), b, c, cron}, hash: "set6", wantSchedule: 9, wantPublish: 6},
	}
	for _, st := range steps {
		d, err := schedule.Materialise(ctx, sc, st.rows, st.hash, opts)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		check := func(kind string, got []schedule.Change, want []string) {
			var ids []string
			for _, c := range got {
				ids = append(ids, c.New.HuntID)
			}
			if strings.Join(ids, ",") != strings.Join(want, ",") {
				t.Errorf("%s: %s = %v, want %v", st.name, kind, ids, want)
			}
		}
		check("added", d.Added, st.added)
		check("changed", d.Changed, st.changed)
		check("tombstoned", d.Tombstoned, st.tombstoned)
		if want := len(st.added) + len(st.changed) + len(st.tombstoned); d.RowsWritten != want {
			t.Errorf("%s: RowsWritten = %d, want %d", st.name, d.RowsWritten, want)
		}
		sched, pub := tableCounts(t, db.Conn, db.Name)
		if sched != st.wantSchedule || pub != st.wantPublish {
			t.Errorf("%s: tables hold %d schedule and %d publish rows, want %d and %d", st.name, sched, pub, st.wantSchedule, st.wantPublish)
		}
		if h, err := store.New(db.Conn, db.Name).Schedule().PublishedSetHash(ctx, hunt.HuntSetDefault); err != nil || h != st.hash {
			t.Errorf("%s: PublishedSetHash = %q, %v; want %q", st.name, h, err, st.hash)
		}
	}

	// The table's newest rows are exactly the last set: tombstones carry interval 0, offset 0.
	pub, err := sc.Published(ctx, hunt.HuntSetDefault)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]schedule.Row{"hunt-a": mustRow(t, "hunt-a", 10*time.Minute, "ha2"), "hunt-b": b, "hunt-c": c, "hunt-cron": cron}
	if len(pub.Rows) != len(want) {
		t.Fatalf("published %v", pub.Rows)
	}
	for id, w := range want {
		w.Set = hunt.HuntSetDefault
		if pub.Rows[id] != w {
			t.Errorf("published %s = %+v, want %+v", id, pub.Rows[id], w)
		}
	}
	if cron.PhaseOffset != 300 || pub.Rows["hunt-cron"].PhaseOffset != 300 {
		t.Errorf("pinned offset not kept: %+v", pub.Rows["hunt-cron"])
	}

	// The due count sees the published hunts: all four live, no watermarks → all due.
	n, err := store.New(db.Conn, db.Name).CountDue(ctx, "")
	if err != nil || n != 4 {
		t.Errorf("CountDue = %d, %v; want 4", n, err)
	}
}

func TestMaterialiseTombstoneRowShape(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	sc := store.New(db.Conn, db.Name).Schedule()
	if _, err := schedule.Materialise(ctx, sc, []schedule.Row{mustRow(t, "gone", time.Minute, "h")}, "s1", schedule.MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.Materialise(ctx, sc, []schedule.Row{mustRow(t, "other", time.Minute, "h")}, "s2", schedule.MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	var interval, offset uint32
	var enabled uint8
	if err := db.Conn.QueryRow(ctx, "SELECT interval_seconds, phase_offset, enabled FROM "+schema.QuoteIdent(db.Name)+".hunt_schedule FINAL WHERE hunt_id = 'gone'").Scan(&interval, &offset, &enabled); err != nil {
		t.Fatal(err)
	}
	if interval != 0 || offset != 0 || enabled != 0 {
		t.Errorf("tombstone = interval %d offset %d enabled %d, want 0 0 0", interval, offset, enabled)
	}
}

func TestMaterialiseDryRun(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	sc := store.New(db.Conn, db.Name).Schedule()
	a := mustRow(t, "hunt-a", 5*time.Minute, "ha1")
	if _, err := schedule.Materialise(ctx, sc, []schedule.Row{a, mustRow(t, "hunt-b", time.Hour, "hb1")}, "set1", schedule.MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	before, beforePub := tableCounts(t, db.Conn, db.Name)
	d, err := schedule.Materialise(ctx, sc, []schedule.Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), mustRow(t, "hunt-new", 30*time.Second, "hn1")}, "set2", schedule.MaterialiseOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	after, afterPub := tableCounts(t, db.Conn, db.Name)
	if after != before || afterPub != beforePub || d.RowsWritten != 0 || d.Recorded {
		t.Errorf("dry run wrote: schedule %d → %d, publish %d → %d, diff %+v", before, after, beforePub, afterPub, d)
	}
	if !d.HasChanges() {
		t.Error("dry run diff reports no changes")
	}
	out := d.String()
	for _, want := range []string{
		"+ hunt-new  every 30s at +", "~ hunt-a  interval 5m → 10m", "config ha1 → ha2",
		"- hunt-b  tombstone (removed; was every 1h at +", "1 added, 1 changed, 1 tombstoned, 0 unchanged; would write 3 row(s); set set1 → set2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run diff lacks %q:\n%s", want, out)
		}
	}
}

func TestMaterialiseRefusesEmpty(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	sc := store.New(db.Conn, db.Name).Schedule()
	if _, err := schedule.Materialise(ctx, sc, []schedule.Row{mustRow(t, "hunt-a", time.Minute, "h")}, "s1", schedule.MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.Materialise(ctx, sc, nil, "empty", schedule.MaterialiseOptions{}); !errors.Is(err, schedule.ErrEmptySet) {
		t.Fatalf("empty set: err = %v, want ErrEmptySet", err)
	}
	if sched, pub := tableCounts(t, db.Conn, db.Name); sched != 1 || pub != 1 {
		t.Errorf("refused empty set still wrote: %d schedule, %d publish rows", sched, pub)
	}
	d, err := schedule.Materialise(ctx, sc, nil, "empty", schedule.MaterialiseOptions{AllowEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tombstoned) != 1 || d.Tombstoned[0].Old.HuntID != "hunt-a" {
		t.Errorf("allowed empty set: diff %+v", d)
	}
}

func TestMaterialiseKeepAbsent(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	sc := store.New(db.Conn, db.Name).Schedule()
	a, b := mustRow(t, "hunt-a", time.Minute, "ha"), mustRow(t, "hunt-b", time.Minute, "hb")
	if _, err := schedule.Materialise(ctx, sc, []schedule.Row{a, b, mustRow(t, "hunt-c", time.Minute, "hc")}, "s1", schedule.MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	// hunt-b's file is now unparseable (absent), hunt-c is disabled.
	d, err := schedule.Materialise(ctx, sc, []schedule.Row{a, {HuntID: "hunt-c"}}, "s2", schedule.MaterialiseOptions{KeepAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Kept) != 1 || d.Kept[0] != "hunt-b" || len(d.Tombstoned) != 1 || d.Tombstoned[0].New.HuntID != "hunt-c" {
		t.Fatalf("diff = %+v", d)
	}
	if !strings.Contains(d.String(), "= hunt-b  kept as published") {
		t.Errorf("diff text lacks the kept hunt:\n%s", d)
	}
	pub, err := sc.Published(ctx, hunt.HuntSetDefault)
	if err != nil {
		t.Fatal(err)
	}
	b.Set = hunt.HuntSetDefault
	if pub.Rows["hunt-b"] != b || pub.Rows["hunt-c"].Live() {
		t.Errorf("published rows %+v", pub.Rows)
	}
}

func TestMaterialiseReadErrorWritesNothing(t *testing.T) {
	db := chtest.NewWithSchema(t)
	// A database without the tables: the read fails, and the error says so (never a silent 0).
	sc := store.New(db.Conn, db.Name+"_missing").Schedule()
	_, err := schedule.Materialise(context.Background(), sc, []schedule.Row{{HuntID: "a", IntervalSeconds: 60, Enabled: true}}, "h", schedule.MaterialiseOptions{})
	if err == nil || !strings.Contains(err.Error(), "read published schedule") {
		t.Fatalf("err = %v", err)
	}
	if _, err := store.New(db.Conn, db.Name+"_missing").CountDue(context.Background(), ""); err == nil {
		t.Fatal("CountDue on a missing database returned no error")
	}
}

// Two hunt sets published into one database: neither retires the other's hunts, a hunt id
// live in the other set is refused naming both sets, one the other set retired can be taken
// over, each set's hash is its own, and due counts every set unless narrowed to one.
func TestHuntSetsShareADatabase(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	sc := store.New(db.Conn, db.Name).Schedule()
	teamA := schedule.MaterialiseOptions{Set: "team-a", Source: "dir:/a"}
	teamB := schedule.MaterialiseOptions{Set: "team-b", Source: "dir:/b"}

	a1, a2 := mustRow(t, "a-1", time.Minute, "ha1"), mustRow(t, "a-2", time.Minute, "ha2")
	b1 := mustRow(t, "b-1", time.Minute, "hb1")
	if _, err := schedule.Materialise(ctx, sc, []schedule.Row{a1, a2}, "setA", teamA); err != nil {
		t.Fatal(err)
	}
	d, err := schedule.Materialise(ctx, sc, []schedule.Row{b1}, "setB", teamB)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Added) != 1 || len(d.Tombstoned) != 0 || d.PublishedHash != "" {
		t.Fatalf("team-b's first publication tombstoned team-a or saw its hash:\n%s", d)
	}
	// Re-publishing team-a unchanged writes nothing: team-b's publication changed neither its
	// rows nor its recorded hash.
	d, err = schedule.Materialise(ctx, sc, []schedule.Row{a1, a2}, "setA", teamA)
	if err != nil || d.HasChanges() || len(d.Tombstoned) != 0 {
		t.Fatalf("team-a again: %v\n%s", err, d)
	}
	for set, want := range map[string]string{"team-a": "setA", "team-b": "setB", hunt.HuntSetDefault: ""} {
		if h, err := store.New(db.Conn, db.Name).Schedule().PublishedSetHash(ctx, set); err != nil || h != want {
			t.Errorf("PublishedSetHash(%s) = %q, %v; want %q", set, h, err, want)
		}
	}

	// Due: every set by default, one set when narrowed.
	for set, want := range map[string]uint64{"": 3, "team-a": 2, "team-b": 1, hunt.HuntSetDefault: 0} {
		if n, err := store.New(db.Conn, db.Name).CountDue(ctx, set); err != nil || n != want {
			t.Errorf("CountDue(%q) = %d, %v; want %d", set, n, err, want)
		}
	}
	if n, err := store.New(db.Conn, db.Name).CountDue(ctx, ""); err != nil || n != 3 {
		t.Errorf("CountDue = %d, %v; want 3 (every set)", n, err)
	}
	if hunts, err := store.New(db.Conn, db.Name).DueHunts(ctx, "team-b", 0); err != nil || len(hunts) != 1 || hunts[0].HuntID != "b-1" {
		t.Errorf("DueHunts(team-b) = %+v, %v", hunts, err)
	}

	// team-b also defines a-2: refused, naming both sets, nothing written (dry run too).
	before, _ := tableCounts(t, db.Conn, db.Name)
	for _, dry := range []bool{true, false} {
		o := teamB
		o.DryRun = dry
		_, err = schedule.Materialise(ctx, sc, []schedule.Row{b1, mustRow(t, "a-2", time.Hour, "other")}, "setB2", o)
		if !errors.Is(err, schedule.ErrSetConflict) || !strings.Contains(err.Error(), `"team-a"`) || !strings.Contains(err.Error(), `"team-b"`) || !strings.Contains(err.Error(), `"a-2"`) {
			t.Fatalf("dry run %v: duplicate id across sets: %v", dry, err)
		}
	}
	// A disabled hunt of the same id would tombstone team-a's: refused as well.
	if _, err = schedule.Materialise(ctx, sc, []schedule.Row{b1, {HuntID: "a-2"}}, "setB2", teamB); !errors.Is(err, schedule.ErrSetConflict) {
		t.Fatalf("disabled duplicate id across sets: %v", err)
	}
	if after, _ := tableCounts(t, db.Conn, db.Name); after != before {
		t.Fatalf("a refused materialise wrote %d schedule row(s)", after-before)
	}

	// team-a retires a-2; team-b may then take it over, and team-a's next publication leaves it.
	if d, err = schedule.Materialise(ctx, sc, []schedule.Row{a1}, "setA2", teamA); err != nil || len(d.Tombstoned) != 1 {
		t.Fatalf("team-a retires a-2: %v\n%s", err, d)
	}
	if d, err = schedule.Materialise(ctx, sc, []schedule.Row{b1, a2}, "setB3", teamB); err != nil || len(d.Added) != 1 || d.Added[0].New.HuntID != "a-2" {
		t.Fatalf("team-b takes over a retired id: %v\n%s", err, d)
	}
	if d, err = schedule.Materialise(ctx, sc, []schedule.Row{a1}, "setA2", teamA); err != nil || d.HasChanges() {
		t.Fatalf("team-a after team-b took a-2 over: %v\n%s", err, d)
	}
	pub, err := sc.Published(ctx, "team-b")
	if err != nil {
		t.Fatal(err)
	}
	if r := pub.Rows["a-2"]; r.Set != "team-b" || !r.Live() {
		t.Errorf("a-2 after the take-over: %+v", r)
	}
	if n, err := store.New(db.Conn, db.Name).CountDue(ctx, "team-b"); err != nil || n != 2 {
		t.Errorf("team-b due after the take-over = %d, %v; want 2", n, err)
	}
}
