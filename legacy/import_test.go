package legacy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// earlierDDL is the earlier runner's coordination tables, as its schema code created them.
var earlierDDL = []string{
	`CREATE TABLE hunt_watermark (hunt_id String, watermark Int64, updated DateTime64(3) DEFAULT now64(3))
ENGINE = ReplacingMergeTree(updated) ORDER BY hunt_id`,
	`CREATE TABLE hunt_state (hunt_id String, overrun_count Int64, too_aggressive UInt8, updated DateTime64(3) DEFAULT now64(3))
ENGINE = ReplacingMergeTree(updated) ORDER BY hunt_id`,
}

type fixture struct {
	t        testing.TB
	ctx      context.Context
	old, cur *chtest.DB
	now      int64
}

func newFixture(t testing.TB, withState bool) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, old: chtest.New(t), cur: chtest.NewWithSchema(t)}
	for i, q := range earlierDDL {
		if i == 1 && !withState {
			continue
		}
		f.exec(f.old, q)
	}
	var now uint32
	if err := f.cur.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	f.now = int64(now)
	return f
}

func (f *fixture) exec(db *chtest.DB, q string, args ...any) {
	f.t.Helper()
	if err := db.Conn.Exec(f.ctx, q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

func (f *fixture) count(q string, args ...any) uint64 {
	f.t.Helper()
	var n uint64
	if err := f.cur.Conn.QueryRow(f.ctx, q, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (f *fixture) importNow(hunts []hunt.Hunt, dry bool, broken ...string) Result {
	f.t.Helper()
	res, err := Import(f.ctx, f.cur.Conn, hunts, Options{From: f.old.Name, Database: f.cur.Name, DryRun: dry, Broken: broken})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func item(t *testing.T, r Result, id string) Item {
	t.Helper()
	i := slices.IndexFunc(r.Items, func(it Item) bool { return it.HuntID == id })
	if i < 0 {
		t.Fatalf("no item for %s in %+v", id, r.Items)
	}
	return r.Items[i]
}

// TestImportOnEngine: the earlier runner's tables in their own database, imported into
// hunt-runner's; every outcome of the plan, the rows written, the dry run and the second import.
func TestImportOnEngine(t *testing.T) {
	f := newFixture(t, true)
	const hour = 3600
	off := func(id string) int64 { return schedule.PhaseOffset(id, hour, 0.8) }
	latest := func(id string) int64 { return schedule.LatestFire(f.now, hour, off(id)) }
	hunts := []hunt.Hunt{
		{ID: "ongrid", File: "ongrid.yaml", Interval: sec(hour), Offset: sec(off("ongrid")), Enabled: true},
		{ID: "offgrid", File: "offgrid.yaml", Interval: sec(hour), Offset: sec(off("offgrid")), Enabled: true},
		{ID: "ahead", File: "ahead.yaml", Interval: sec(hour), Offset: sec(off("ahead")), Enabled: true},
		{ID: "delayed", File: "delayed.yaml", Interval: sec(hour), Offset: sec(off("delayed")), Delay: 120 * time.Second, Enabled: true},
		{ID: "new-name", File: "old-name.yaml", Interval: sec(hour), Offset: sec(off("new-name")), Enabled: true},
		{ID: "stale", File: "stale.yaml", Interval: sec(hour), Offset: sec(off("stale")), Enabled: true},
		{ID: "fresh", File: "fresh.yaml", Interval: sec(hour), Offset: sec(off("fresh")), Enabled: true},
	}
	wm := map[string]int64{
		"ongrid":   latest("ongrid") - hour,
		"offgrid":  latest("offgrid") - hour + 1234,
		"ahead":    latest("ahead") - 2*hour,
		"delayed":  latest("delayed") - hour,
		"old-name": latest("new-name") - hour,
		"stale":    latest("stale") - 30*hour, // older than max_catchup (24 intervals)
		"gone":     latest("ongrid") - hour,
		"broken":   latest("ongrid") - hour,
	}
	for id, w := range wm {
		f.exec(f.old, "INSERT INTO hunt_watermark (hunt_id, watermark, updated) VALUES (?, ?, now64(3))", id, w)
	}
	// The earlier runner reads the newest row by updated, not the greatest watermark.
	f.exec(f.old, "INSERT INTO hunt_watermark (hunt_id, watermark, updated) VALUES ('ongrid', ?, now64(3) - INTERVAL 1 DAY)", wm["ongrid"]+hour)
	f.exec(f.old, "INSERT INTO hunt_state (hunt_id, overrun_count, too_aggressive) VALUES ('ongrid', 3, 1), ('offgrid', 0, 0)")
	// hunt-runner already ran "ahead" past the earlier runner's watermark.
	f.exec(f.cur, "INSERT INTO hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, kind) SELECT 'ahead', toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), generateUUIDv4(), 'scheduled'", latest("ahead"))

	dry := f.importNow(hunts, true, "broken.yaml")
	if n := f.count("SELECT count() FROM hunt_watermark WHERE kind = 'imported'") + f.count("SELECT count() FROM hunt_state"); n != 0 {
		t.Fatalf("the dry run wrote %d rows", n)
	}
	res := f.importNow(hunts, false, "broken.yaml")
	for _, r := range []Result{dry, res} {
		want := map[string]Action{"ongrid": ActionImport, "offgrid": ActionImport, "ahead": ActionAhead, "delayed": ActionImport,
			"new-name": ActionImport, "stale": ActionImport, "fresh": ActionFresh, "gone": ActionNotLoaded, "broken": ActionNotLoaded}
		for id, a := range want {
			if got := item(t, r, id).Action; got != a {
				t.Errorf("dry %t: %s: %s, want %s", r.DryRun, id, got, a)
			}
		}
	}
	if it := item(t, res, "broken"); !strings.Contains(it.Reason, "broken.yaml did not load") {
		t.Errorf("broken: %q", it.Reason)
	}
	if it := item(t, res, "offgrid"); !it.OffGrid || it.FirstStart != wm["offgrid"] || it.FirstEnd != latest("offgrid") {
		t.Errorf("offgrid plan: %+v", it)
	}
	if it := item(t, res, "ongrid"); it.OffGrid || it.FirstStart != wm["ongrid"] || it.FirstEnd != latest("ongrid") || !it.StateCarried {
		t.Errorf("ongrid plan: %+v", it)
	}
	if it := item(t, res, "stale"); it.GapEnd != latest("stale")-24*hour || it.GapStart != wm["stale"] {
		t.Errorf("stale plan: the first run's gap is [%d, %d), want [%d, %d)", it.GapStart, it.GapEnd, wm["stale"], latest("stale")-24*hour)
	}
	if it := item(t, res, "new-name"); it.LegacyID != "old-name" || it.Legacy != wm["old-name"] {
		t.Errorf("new-name: %+v", it)
	}

	// What was written: one imported commit row per imported hunt, the delay added.
	want := map[string]int64{"ongrid": wm["ongrid"], "offgrid": wm["offgrid"], "delayed": wm["delayed"] + 120,
		"new-name": wm["old-name"], "stale": wm["stale"]}
	rows, err := f.cur.Conn.Query(f.ctx, "SELECT hunt_id, toInt64(watermark), run_owner FROM hunt_watermark WHERE kind = 'imported' ORDER BY hunt_id")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for rows.Next() {
		var id, owner string
		var w int64
		if err := rows.Scan(&id, &w, &owner); err != nil {
			t.Fatal(err)
		}
		got[id] = w
		if !strings.Contains(owner, f.old.Name) {
			t.Errorf("%s: run_owner %q does not name the earlier database", id, owner)
		}
	}
	rows.Close()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("imported watermarks %v, want %v", got, want)
	}
	if n := f.count("SELECT count() FROM hunt_runs WHERE status = 'imported'"); n != uint64(len(want)) {
		t.Errorf("hunt_runs lists %d imported rows, want %d", n, len(want))
	}
	if n := f.count("SELECT count() FROM hunt_runs WHERE status = 'succeeded' AND hunt_id != 'ahead'"); n != 0 {
		t.Errorf("hunt_runs lists %d imported rows as succeeded runs", n)
	}
	var oc uint64
	var aggr uint8
	if err := f.cur.Conn.QueryRow(f.ctx, "SELECT overrun_count, too_aggressive FROM hunt_state FINAL WHERE hunt_id = 'ongrid'").Scan(&oc, &aggr); err != nil || oc != 3 || aggr != 1 {
		t.Errorf("ongrid state: overrun_count %d, too_aggressive %d (%v); want 3, 1", oc, aggr, err)
	}
	if n := f.count("SELECT count() FROM hunt_state"); n != 1 {
		t.Errorf("%d hunt_state rows; only ongrid had state worth carrying", n)
	}

	// A second import changes nothing.
	before := f.count("SELECT count() FROM hunt_watermark") + f.count("SELECT count() FROM hunt_state")
	again := f.importNow(hunts, false, "broken.yaml")
	if again.Changed() {
		t.Errorf("the second import changed something: %+v", again.Items)
	}
	for _, id := range []string{"ongrid", "offgrid", "delayed", "new-name", "stale"} {
		if a := item(t, again, id).Action; a != ActionDone {
			t.Errorf("second import: %s is %s, want %s", id, a, ActionDone)
		}
	}
	if after := f.count("SELECT count() FROM hunt_watermark") + f.count("SELECT count() FROM hunt_state"); after != before {
		t.Errorf("the second import wrote %d rows", after-before)
	}
	// The state write re-checks on the server too: carrying what is already there writes nothing.
	if err := store.New(f.cur.Conn, f.cur.Name).RaiseOverruns(f.ctx, []store.Overruns{{HuntID: "ongrid", Count: 3, TooAggressive: true}}); err != nil {
		t.Fatal(err)
	}
	if n := f.count("SELECT count() FROM hunt_state"); n != 1 {
		t.Errorf("carrying the same state again wrote a row (%d rows)", n)
	}
	var b strings.Builder
	again.Print(&b)
	for _, s := range []string{"already imported", "left alone", "not among the loaded hunts", "0 imported, 5 already imported, 1 left alone"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("second import's output lacks %q:\n%s", s, b.String())
		}
	}
}

// TestImportNeverOvertakesACommit: a runner commit that lands between the plan and the write
// wins; the import writes nothing for that hunt and says so, while the other hunt of the same
// statement is imported (the guard is per row, not per batch).
func TestImportNeverOvertakesACommit(t *testing.T) {
	f := newFixture(t, false)
	h := hunt.Hunt{ID: "race", File: "race.yaml", Interval: 600 * time.Second, Offset: 60 * time.Second, Enabled: true}
	calm := hunt.Hunt{ID: "calm", File: "calm.yaml", Interval: 600 * time.Second, Offset: 60 * time.Second, Enabled: true}
	w := schedule.LatestFire(f.now, 600, 60) - 600
	f.exec(f.old, "INSERT INTO hunt_watermark (hunt_id, watermark) VALUES ('race', ?), ('calm', ?)", w, w)
	opts := Options{From: f.old.Name, Database: f.cur.Name, Owner: DefaultOwner}
	old, err := readLegacy(f.ctx, store.New(f.cur.Conn, f.cur.Name), f.old.Name, false)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := readCurrent(f.ctx, store.New(f.cur.Conn, f.cur.Name), []string{"race", "calm"})
	if err != nil {
		t.Fatal(err)
	}
	items := plan([]hunt.Hunt{h, calm}, old, cur, f.now, nil)
	if items[0].Action != ActionImport || items[1].Action != ActionImport {
		t.Fatalf("plan: %+v", items)
	}
	// The runner commits race's first window, ending past the earlier watermark, meanwhile.
	f.exec(f.cur, "INSERT INTO hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, kind) SELECT 'race', toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), generateUUIDv4(), 'scheduled'", w+600)
	if err := apply(f.ctx, store.New(f.cur.Conn, f.cur.Name), opts, items); err != nil {
		t.Fatal(err)
	}
	byID := map[string]Action{items[0].HuntID: items[0].Action, items[1].HuntID: items[1].Action}
	if byID["race"] != ActionOvertaken || byID["calm"] != ActionImport {
		t.Errorf("actions %v, want race %s and calm %s", byID, ActionOvertaken, ActionImport)
	}
	if n := f.count("SELECT count() FROM hunt_watermark WHERE kind = 'imported' AND hunt_id = 'race'"); n != 0 {
		t.Errorf("the import wrote its row under a newer commit")
	}
	if n := f.count("SELECT count() FROM hunt_watermark WHERE kind = 'imported' AND hunt_id = 'calm'"); n != 1 {
		t.Errorf("calm has %d imported rows, want 1", n)
	}
}

// TestImportRefusals: what cannot be imported is said plainly, and without hunt_state the
// import still works.
func TestImportRefusals(t *testing.T) {
	f := newFixture(t, false)
	f.exec(f.old, "INSERT INTO hunt_watermark (hunt_id, watermark) VALUES ('zero', 0), ('far', 5000000000)")
	res := f.importNow([]hunt.Hunt{{ID: "zero", File: "zero.yaml", Interval: 60 * time.Second, Enabled: true}, {ID: "far", File: "far.yaml", Interval: 60 * time.Second, Enabled: true}}, false)
	if item(t, res, "zero").Action != ActionRefused || item(t, res, "far").Action != ActionRefused || res.HasState {
		t.Errorf("refusals: %+v", res)
	}
	if n := f.count("SELECT count() FROM hunt_watermark"); n != 0 {
		t.Errorf("%d rows written for refused hunts", n)
	}
	if _, err := Import(f.ctx, f.cur.Conn, nil, Options{From: f.cur.Name, Database: f.cur.Name}); err == nil {
		t.Error("importing a database into itself was accepted")
	}
	_, err := Import(f.ctx, f.cur.Conn, nil, Options{From: "no_such_db_" + f.cur.Name, Database: f.cur.Name})
	if err == nil || !strings.Contains(err.Error(), "has no hunt_watermark") {
		t.Errorf("missing earlier database: %v", err)
	}
	// An older hunt_runs view would list imports as succeeded runs: refuse until it is recreated.
	f.exec(f.cur, "DROP VIEW hunt_runs")
	f.exec(f.cur, "CREATE VIEW hunt_runs AS SELECT hunt_id FROM hunt_watermark")
	_, err = Import(f.ctx, f.cur.Conn, nil, Options{From: f.old.Name, Database: f.cur.Name})
	if err == nil || !strings.Contains(err.Error(), "predates imports") {
		t.Errorf("old hunt_runs view: %v", err)
	}
	f.exec(f.cur, "DROP VIEW hunt_runs")
	if _, err := schema.Apply(f.ctx, f.cur.Conn, f.cur.Name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := Import(f.ctx, f.cur.Conn, nil, Options{From: f.old.Name, Database: f.cur.Name}); err != nil {
		t.Errorf("after recreating the view: %v", err)
	}
}

// A runner whose heartbeat is recent makes the import refuse and write nothing, naming the
// runner and --force; the dry run lists it; Force imports; a heartbeat older than
// status.LiveWithin (a runner stopped) does not count. Even forced, a hunt whose lease is live
// (a runner without heartbeats runs it) is refused; an expired lease is not.
func TestImportRefusesWhileRunnersAreLive(t *testing.T) {
	f := newFixture(t, false)
	const hour = 3600
	off := schedule.PhaseOffset("h", hour, 0.8)
	var hunts []hunt.Hunt
	for _, id := range []string{"h", "leased", "expired"} {
		hunts = append(hunts, hunt.Hunt{ID: id, File: id + ".yaml", Interval: sec(hour), Offset: sec(off), Enabled: true})
		f.exec(f.old, "INSERT INTO hunt_watermark (hunt_id, watermark, updated) VALUES (?, ?, now64(3))", id, schedule.LatestFire(f.now, hour, off)-hour)
	}
	f.exec(f.cur, "INSERT INTO hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until) "+
		"SELECT 'leased', toDateTime(?, 'UTC'), 'old-pod', generateUUIDv4(), now64(6), now64(3) + INTERVAL 1 MINUTE UNION ALL "+
		"SELECT 'expired', toDateTime(?, 'UTC'), 'old-pod', generateUUIDv4(), now64(6) - INTERVAL 1 MINUTE, now64(3) - INTERVAL 1 SECOND",
		schedule.LatestFire(f.now, hour, off), schedule.LatestFire(f.now, hour, off))
	beat := func(owner, age string) {
		f.exec(f.cur, "INSERT INTO hunt_runner_heartbeat (owner, version, hunt_set, set_hash, hunts, last_tick, started) "+
			"SELECT ?, 'v', 'default', 's', 1, now64(3) - INTERVAL "+age+", now64(3) - INTERVAL 1 HOUR", owner)
	}
	beat("gone-pod", "3 MINUTE")
	beat("live-pod", "5 SECOND")
	opts := Options{From: f.old.Name, Database: f.cur.Name}
	res, err := Import(f.ctx, f.cur.Conn, hunts, opts)
	if !errors.Is(err, ErrLive) || !strings.Contains(err.Error(), "live-pod") || strings.Contains(err.Error(), "gone-pod") ||
		!strings.Contains(err.Error(), "--force") {
		t.Fatalf("import with a live runner: %v, want an ErrLive naming live-pod (only) and --force", err)
	}
	if n := f.count("SELECT count() FROM hunt_watermark"); n != 0 || res.Changed() {
		t.Fatalf("the refused import wrote %d watermark rows", n)
	}
	opts.DryRun = true
	dry, err := Import(f.ctx, f.cur.Conn, hunts, opts)
	var out strings.Builder
	dry.Print(&out)
	if err != nil || len(dry.Live) != 1 || !strings.Contains(out.String(), "runner live-pod is live") {
		t.Fatalf("dry run with a live runner: %v, live %+v\n%s", err, dry.Live, out.String())
	}
	opts.DryRun, opts.Force = false, true
	if res, err = Import(f.ctx, f.cur.Conn, hunts, opts); err != nil || item(t, res, "h").Action != ActionImport ||
		item(t, res, "expired").Action != ActionImport || item(t, res, "leased").Action != ActionRefused ||
		!strings.Contains(item(t, res, "leased").Reason, "old-pod holds its live lease") {
		t.Fatalf("forced import: %v %+v", err, res.Items)
	}
	if n := f.count("SELECT count() FROM hunt_watermark WHERE kind = 'imported' AND hunt_id != 'leased'"); n != 2 || f.count("SELECT count() FROM hunt_watermark") != 2 {
		t.Fatalf("forced import wrote %d rows for the free hunts, want 2, and none for the leased one", n)
	}
}

// sec is n seconds: the import counts the schedule grid in seconds.
func sec(n int64) time.Duration { return time.Duration(n) * time.Second }
