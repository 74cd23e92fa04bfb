package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func mustRow(t *testing.T, id string, interval time.Duration, hash string) Row {
	t.Helper()
	r, err := NewRow(id, Spec{Interval: interval}, DefaultSpreadFraction, hash)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tableCounts returns the number of rows in hunt_schedule and hunt_publish.
func tableCounts(t *testing.T, q Querier, database string) (schedule, publish uint64) {
	t.Helper()
	ctx := context.Background()
	if err := queryOne(ctx, q, "SELECT count() FROM "+schema.QuoteIdent(database)+".hunt_schedule", &schedule); err != nil {
		t.Fatal(err)
	}
	if err := queryOne(ctx, q, "SELECT count() FROM "+schema.QuoteIdent(database)+".hunt_publish", &publish); err != nil {
		t.Fatal(err)
	}
	return schedule, publish
}

func TestMaterialiseOnEngine(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	wm := NewClickHouseStore(db.Conn, db.Name)
	opts := MaterialiseOptions{Source: "dir:/hunts"}

	a := mustRow(t, "hunt-a", 5*time.Minute, "ha1")
	b := mustRow(t, "hunt-b", time.Hour, "hb1")
	c := mustRow(t, "hunt-c", 15*time.Minute, "hc1")
	cron, err := NewRow("hunt-cron", Spec{Interval: 15 * time.Minute, Offset: 5 * time.Minute, Pinned: true}, DefaultSpreadFraction, "hx1")
	if err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name                       string
		rows                       []Row
		hash                       string
		added, changed, tombstoned []string
		wantSchedule, wantPublish  uint64
	}{
		{name: "add", rows: []Row{a, b, c, cron}, hash: "set1", added: []string{"hunt-a", "hunt-b", "hunt-c", "hunt-cron"}, wantSchedule: 4, wantPublish: 1},
		{name: "re-run writes nothing", rows: []Row{a, b, c, cron}, hash: "set1", wantSchedule: 4, wantPublish: 1},
		{name: "change", rows: []Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), b, c, cron}, hash: "set2", changed: []string{"hunt-a"}, wantSchedule: 5, wantPublish: 2},
		{name: "remove", rows: []Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), b, cron}, hash: "set3", tombstoned: []string{"hunt-c"}, wantSchedule: 6, wantPublish: 3},
		{name: "disable", rows: []Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), {HuntID: "hunt-b", ConfigHash: "hb2"}, cron}, hash: "set4", tombstoned: []string{"hunt-b"}, wantSchedule: 7, wantPublish: 4},
		{name: "re-run after disable writes nothing", rows: []Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), {HuntID: "hunt-b", ConfigHash: "hb2"}, cron}, hash: "set4", wantSchedule: 7, wantPublish: 4},
		{name: "re-enable and re-add", rows: []Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), b, c, cron}, hash: "set5", added: []string{"hunt-b", "hunt-c"}, wantSchedule: 9, wantPublish: 5},
		{name: "hash only", rows: []Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), b, c, cron}, hash: "set6", wantSchedule: 9, wantPublish: 6},
	}
	for _, st := range steps {
		d, err := Materialise(ctx, wm, st.rows, st.hash, opts)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		check := func(kind string, got []Change, want []string) {
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
		if h, err := PublishedSetHash(ctx, db.Conn, db.Name, hunt.HuntSetDefault); err != nil || h != st.hash {
			t.Errorf("%s: PublishedSetHash = %q, %v; want %q", st.name, h, err, st.hash)
		}
	}

	// The table's newest rows are exactly the last set: tombstones carry interval 0, offset 0.
	pub, err := wm.Published(ctx, hunt.HuntSetDefault)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Row{"hunt-a": mustRow(t, "hunt-a", 10*time.Minute, "ha2"), "hunt-b": b, "hunt-c": c, "hunt-cron": cron}
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
	n, err := CountDue(ctx, db.Conn, db.Name)
	if err != nil || n != 4 {
		t.Errorf("CountDue = %d, %v; want 4", n, err)
	}
}

func TestMaterialiseTombstoneRowShape(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	wm := NewClickHouseStore(db.Conn, db.Name)
	if _, err := Materialise(ctx, wm, []Row{mustRow(t, "gone", time.Minute, "h")}, "s1", MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Materialise(ctx, wm, []Row{mustRow(t, "other", time.Minute, "h")}, "s2", MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	var interval, offset uint32
	var enabled uint8
	if err := queryOne(ctx, db.Conn, "SELECT interval_seconds, phase_offset, enabled FROM "+schema.QuoteIdent(db.Name)+".hunt_schedule FINAL WHERE hunt_id = 'gone'", &interval, &offset, &enabled); err != nil {
		t.Fatal(err)
	}
	if interval != 0 || offset != 0 || enabled != 0 {
		t.Errorf("tombstone = interval %d offset %d enabled %d, want 0 0 0", interval, offset, enabled)
	}
}

func TestMaterialiseDryRun(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	wm := NewClickHouseStore(db.Conn, db.Name)
	a := mustRow(t, "hunt-a", 5*time.Minute, "ha1")
	if _, err := Materialise(ctx, wm, []Row{a, mustRow(t, "hunt-b", time.Hour, "hb1")}, "set1", MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	before, beforePub := tableCounts(t, db.Conn, db.Name)
	d, err := Materialise(ctx, wm, []Row{mustRow(t, "hunt-a", 10*time.Minute, "ha2"), mustRow(t, "hunt-new", 30*time.Second, "hn1")}, "set2", MaterialiseOptions{DryRun: true})
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
	wm := NewClickHouseStore(db.Conn, db.Name)
	if _, err := Materialise(ctx, wm, []Row{mustRow(t, "hunt-a", time.Minute, "h")}, "s1", MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Materialise(ctx, wm, nil, "empty", MaterialiseOptions{}); !errors.Is(err, ErrEmptySet) {
		t.Fatalf("empty set: err = %v, want ErrEmptySet", err)
	}
	if sched, pub := tableCounts(t, db.Conn, db.Name); sched != 1 || pub != 1 {
		t.Errorf("refused empty set still wrote: %d schedule, %d publish rows", sched, pub)
	}
	d, err := Materialise(ctx, wm, nil, "empty", MaterialiseOptions{AllowEmpty: true})
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
	wm := NewClickHouseStore(db.Conn, db.Name)
	a, b := mustRow(t, "hunt-a", time.Minute, "ha"), mustRow(t, "hunt-b", time.Minute, "hb")
	if _, err := Materialise(ctx, wm, []Row{a, b, mustRow(t, "hunt-c", time.Minute, "hc")}, "s1", MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	// hunt-b's file is now unparseable (absent), hunt-c is disabled.
	d, err := Materialise(ctx, wm, []Row{a, {HuntID: "hunt-c"}}, "s2", MaterialiseOptions{KeepAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Kept) != 1 || d.Kept[0] != "hunt-b" || len(d.Tombstoned) != 1 || d.Tombstoned[0].New.HuntID != "hunt-c" {
		t.Fatalf("diff = %+v", d)
	}
	if !strings.Contains(d.String(), "= hunt-b  kept as published") {
		t.Errorf("diff text lacks the kept hunt:\n%s", d)
	}
	pub, err := wm.Published(ctx, hunt.HuntSetDefault)
	if err != nil {
		t.Fatal(err)
	}
	b.Set = hunt.HuntSetDefault
	if pub.Rows["hunt-b"] != b || pub.Rows["hunt-c"].Live() {
		t.Errorf("published rows %+v", pub.Rows)
	}
}

func TestMaterialiseRejectsBadRows(t *testing.T) {
	wm := failingStore{}
	for _, rows := range [][]Row{
		{{HuntID: "", IntervalSeconds: 60, Enabled: true}},
		{{HuntID: "a", IntervalSeconds: 60, Enabled: true}, {HuntID: "a", IntervalSeconds: 60, Enabled: true}},
		{{HuntID: "a", IntervalSeconds: 0, Enabled: true}},
		{{HuntID: "a", IntervalSeconds: 60, PhaseOffset: 60, Enabled: true}},
	} {
		if _, err := Materialise(context.Background(), wm, rows, "h", MaterialiseOptions{}); !errors.Is(err, ErrInvalidRow) {
			t.Errorf("rows %+v: err = %v, want ErrInvalidRow", rows, err)
		}
	}
}

// failingStore fails every call: a test that reaches it has skipped validation.
type failingStore struct{}

func (failingStore) Published(context.Context, string) (Published, error) {
	return Published{}, fmt.Errorf("unexpected read")
}
func (failingStore) Publish(context.Context, []Row, Publication) error {
	return fmt.Errorf("unexpected write")
}

func TestMaterialiseReadErrorWritesNothing(t *testing.T) {
	db := chtest.NewWithSchema(t)
	// A database without the tables: the read fails, and the error says so (never a silent 0).
	wm := NewClickHouseStore(db.Conn, db.Name+"_missing")
	_, err := Materialise(context.Background(), wm, []Row{{HuntID: "a", IntervalSeconds: 60, Enabled: true}}, "h", MaterialiseOptions{})
	if err == nil || !strings.Contains(err.Error(), "read published schedule") {
		t.Fatalf("err = %v", err)
	}
	if _, err := CountDue(context.Background(), db.Conn, db.Name+"_missing"); err == nil {
		t.Fatal("CountDue on a missing database returned no error")
	}
}
