package runner

import (
	"reflect"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// base is an instant on a 60 s boundary; hunts below use interval 60 and explicit offsets.
const base int64 = 1_800_000_000 - 1_800_000_000%3600

func at(sec int64) time.Time { return time.Unix(sec, 0).UTC() }

func snap(now int64, hunts map[string]store.HuntState) store.Snapshot {
	if hunts == nil {
		hunts = map[string]store.HuntState{}
	}
	return store.Snapshot{Now: at(now), Hunts: hunts}
}

func set(hunts ...hunt.Hunt) *hunt.Set { return testSet("h", hunts...) }

func testHunt(id string, interval, offset int64) hunt.Hunt {
	return hunt.Hunt{ID: id, Interval: sec(interval), Offset: sec(offset), Query: "SELECT 1"}
}

func dueIDs(p plan) []string {
	var out []string
	for _, d := range p.Due {
		out = append(out, d.Hunt.ID)
	}
	return out
}

func TestPlanDue(t *testing.T) {
	h := testHunt("a", 60, 46)
	cases := []struct {
		name      string
		now       int64
		st        *store.HuntState
		wantFire  int64 // 0 = not due
		requested bool
	}{
		{name: "first run owes the latest fire", now: base + 50, wantFire: base + 46},
		{name: "before this interval's offset the previous fire is owed", now: base + 30, wantFire: base - 14},
		{name: "watermark below latest fire", now: base + 50, st: &store.HuntState{Watermark: base - 14, HasWatermark: true}, wantFire: base + 46},
		{name: "watermark at latest fire", now: base + 50, st: &store.HuntState{Watermark: base + 46, HasWatermark: true}},
		{name: "watermark at latest fire, tick before next offset", now: base + 100, st: &store.HuntState{Watermark: base + 46, HasWatermark: true}},
		{name: "live lease on the same fire is a healthy peer", now: base + 50,
			st: &store.HuntState{Watermark: base - 14, HasWatermark: true, HasLease: true, LeaseFire: base + 46, LeaseUntil: at(base + 60)}},
		{name: "live lease on the previous fire holds the owed one", now: base + 50,
			st: &store.HuntState{Watermark: base - 74, HasWatermark: true, HasLease: true, LeaseFire: base - 14, LeaseUntil: at(base + 60)}},
		{name: "lease ending exactly now is free", now: base + 50, wantFire: base + 46,
			st: &store.HuntState{Watermark: base - 14, HasWatermark: true, HasLease: true, LeaseFire: base - 14, LeaseUntil: at(base + 50)}},
		{name: "lease ending a millisecond after now is live", now: base + 50,
			st: &store.HuntState{Watermark: base - 14, HasWatermark: true, HasLease: true, LeaseFire: base + 46, LeaseUntil: at(base + 50).Add(time.Millisecond)}},
		{name: "pending request runs when nothing scheduled is owed", now: base + 50, wantFire: base + 49, requested: true,
			st: &store.HuntState{Watermark: base + 46, HasWatermark: true, HasRequest: true, RequestedFire: base + 49}},
		{name: "scheduled fire goes before a request", now: base + 50, wantFire: base + 46,
			st: &store.HuntState{Watermark: base - 14, HasWatermark: true, HasRequest: true, RequestedFire: base + 49}},
		{name: "request at or below the watermark is done", now: base + 50,
			st: &store.HuntState{Watermark: base + 46, HasWatermark: true, HasRequest: true, RequestedFire: base + 46}},
		{name: "request in the future waits", now: base + 50,
			st: &store.HuntState{Watermark: base + 46, HasWatermark: true, HasRequest: true, RequestedFire: base + 55}},
		{name: "request with no watermark: the schedule's first run goes first", now: base + 50, wantFire: base + 46,
			st: &store.HuntState{HasRequest: true, RequestedFire: base + 10}},
		{name: "leased request is not claimed again", now: base + 50,
			st: &store.HuntState{Watermark: base + 46, HasWatermark: true, HasRequest: true, RequestedFire: base + 49,
				HasLease: true, LeaseFire: base + 49, LeaseUntil: at(base + 100)}}, // a peer runs the request
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			states := map[string]store.HuntState{}
			if tc.st != nil {
				states["a"] = *tc.st
			}
			p := newPlanner(5*time.Second).plan(snap(tc.now, states), set(h), time.Time{}, nil)
			if tc.wantFire == 0 {
				if len(p.Due) != 0 {
					t.Fatalf("due %+v, want nothing", p.Due[0])
				}
			} else {
				if len(p.Due) != 1 || p.Due[0].Fire != tc.wantFire || p.Due[0].Requested != tc.requested {
					t.Fatalf("due %+v, want fire %d requested=%v", p.Due, tc.wantFire, tc.requested)
				}
			}
		})
	}
}

// The regression of the earlier runner's `now ≥ current` gate: ticks every 15 s for three
// minutes on a hunt with offset 46 must run exactly three fires.
func TestPlanBetweenTicksRunsEveryFire(t *testing.T) {
	h := testHunt("a", 60, 46)
	p := newPlanner(15 * time.Second)
	st := map[string]store.HuntState{"a": {Watermark: base - 74, HasWatermark: true}}
	var fires []int64
	for now := base; now < base+180; now += 15 {
		pl := p.plan(snap(now, st), set(h), time.Unix(now, 0), nil)
		for _, d := range pl.Due {
			fires = append(fires, d.Fire)
			st["a"] = store.HuntState{Watermark: d.Fire, HasWatermark: true}
		}
	}
	want := []int64{base - 14, base + 46, base + 106}
	if !reflect.DeepEqual(fires, want) {
		t.Fatalf("fires %v, want %v", fires, want)
	}
}

func TestPlanOrdersMostOverdueFirst(t *testing.T) {
	hs := set(
		testHunt("c-fresh", 60, 0),      // owes base+60 only (watermark base)
		testHunt("b-old", 60, 0),        // watermark far back: oldest owed fire base-240
		testHunt("a-first-run", 60, 30), // never ran: owes base+30, and goes first
		testHunt("d-tie", 60, 0),        // same overdue as c-fresh: tie by id
	)
	now := base + 65
	st := map[string]store.HuntState{
		"c-fresh": {Watermark: base, HasWatermark: true},
		"b-old":   {Watermark: base - 300, HasWatermark: true},
		"d-tie":   {Watermark: base, HasWatermark: true},
	}
	p := newPlanner(5*time.Second).plan(snap(now, st), hs, time.Time{}, nil)
	if got, want := dueIDs(p), []string{"a-first-run", "b-old", "c-fresh", "d-tie"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if p.Due[1].Fire != base+60 || p.Due[1].Overdue != 65+240 {
		t.Fatalf("b-old due %+v: want fire %d overdue %d", p.Due[1], base+60, 65+240)
	}
	if p.Behind["b-old"] != 305 || p.Behind["c-fresh"] != 5 {
		t.Fatalf("behind %v", p.Behind)
	}
}

func TestPlanSkipsBusyAndDisabledInterval(t *testing.T) {
	p := newPlanner(5*time.Second).plan(snap(base+65, nil), set(testHunt("a", 60, 0), testHunt("b", 60, 0), testHunt("zero", 0, 0)),
		time.Unix(0, 0), func(id string) bool { return id == "a" })
	if got := dueIDs(p); !reflect.DeepEqual(got, []string{"b"}) || p.Busy != 1 {
		t.Fatalf("due %v busy %d", got, p.Busy)
	}
}

func TestBackoffDelay(t *testing.T) {
	tick := 5 * time.Second
	cases := []struct {
		interval int64
		failures uint32
		want     time.Duration
	}{
		{60, 0, 0},
		{60, 1, 5 * time.Second},
		{60, 2, 10 * time.Second},
		{60, 3, 20 * time.Second},
		{60, 4, 40 * time.Second},
		{60, 5, 60 * time.Second},
		{60, 50, 60 * time.Second},
		{2, 3, 5 * time.Second}, // never below one tick
		{3600, 12, 3600 * time.Second},
	}
	for _, tc := range cases {
		if got := backoffDelay(tick, tc.interval, tc.failures); got != tc.want {
			t.Errorf("backoffDelay(%v, %d, %d) = %v, want %v", tick, tc.interval, tc.failures, got, tc.want)
		}
	}
}

// Backoff is persisted: a failed run's hunt_state.retry_after (server clock) reaches every pod
// through the snapshot, so a peer or a restarted pod (a fresh planner here) holds off exactly
// as the pod that failed would, to the millisecond, and a success's row (no retry_after)
// releases it everywhere.
func TestPlanBackoff(t *testing.T) {
	hs := set(testHunt("a", 60, 0))
	now := base + 65
	retry := at(now).Add(20 * time.Second)
	inBackoff := map[string]store.HuntState{"a": {Watermark: base, HasWatermark: true, Status: "failed",
		ConsecutiveFailures: 3, RetryAfter: retry, HasRetryAfter: true}}
	if d := backoffDelay(5*time.Second, hs.Hunts[0].IntervalSeconds(), 3); d != 20*time.Second {
		t.Fatalf("third failure backs off %v, want 20s", d)
	}
	for _, tc := range []struct {
		at  time.Time
		due bool
	}{
		{at(now), false},
		{retry.Add(-time.Millisecond), false},
		{retry, true}, // like a lease: free at retry_after exactly
		{retry.Add(time.Second), true},
	} {
		pl := newPlanner(5*time.Second).plan(store.Snapshot{Now: tc.at, Hunts: inBackoff}, hs, time.Time{}, nil)
		if (len(pl.Due) == 1) != tc.due || (pl.BackOff == 1) == tc.due {
			t.Fatalf("at retry_after%+v: due %v backoff %d, want due=%v", tc.at.Sub(retry), dueIDs(pl), pl.BackOff, tc.due)
		}
	}
	// A success clears retry_after in hunt_state; the snapshot then carries none.
	cleared := map[string]store.HuntState{"a": {Watermark: base, HasWatermark: true, Status: "succeeded"}}
	if pl := newPlanner(5*time.Second).plan(snap(now, cleared), hs, time.Time{}, nil); len(pl.Due) != 1 || pl.BackOff != 0 {
		t.Fatalf("without retry_after: due %v backoff %d", dueIDs(pl), pl.BackOff)
	}
	// A hunt both leased and in backoff counts once, as leased.
	both := inBackoff["a"]
	both.HasLease, both.LeaseFire, both.LeaseUntil = true, base+60, at(now+10)
	pl := newPlanner(5*time.Second).plan(snap(now, map[string]store.HuntState{"a": both}), hs, time.Time{}, nil)
	if len(pl.Due) != 0 || pl.Leased != 1 || pl.BackOff != 0 {
		t.Fatalf("leased and in backoff: due %v leased %d backoff %d", dueIDs(pl), pl.Leased, pl.BackOff)
	}
	// A hunt owed nothing is not "in backoff", whatever retry_after says.
	done := inBackoff["a"]
	done.Watermark = base + 60
	if pl := newPlanner(5*time.Second).plan(snap(now, map[string]store.HuntState{"a": done}), hs, time.Time{}, nil); pl.BackOff != 0 || len(pl.Due) != 0 {
		t.Fatalf("caught up: due %v backoff %d", dueIDs(pl), pl.BackOff)
	}
}

// A hunt that never committed but keeps failing is behind from the fire its failures began at
// (as far as the snapshot knows: the last failed fire), not from its latest fire.
func TestPlanBehindNeverCommitted(t *testing.T) {
	hs := set(testHunt("a", 60, 0), testHunt("new", 60, 0))
	now := base + 65
	st := map[string]store.HuntState{"a": {Status: "failed", ConsecutiveFailures: 8, LastFire: base - 240}}
	pl := newPlanner(5*time.Second).plan(snap(now, st), hs, time.Time{}, nil)
	if pl.Behind["a"] != 65+240 || pl.Behind["new"] != 5 {
		t.Fatalf("behind %v: want a %d (since its failed fire), new 5", pl.Behind, 65+240)
	}
}

func TestRunWindow(t *testing.T) {
	cases := []struct {
		name               string
		h                  hunt.Hunt
		wm                 int64
		hasWM              bool
		fire               int64
		start, end         int64
		gapStart, gapEnd   int64
		dataStart, dataEnd time.Time
	}{
		{name: "first run covers one interval", h: hunt.Hunt{Interval: 60 * time.Second}, fire: base + 60,
			start: base, end: base + 60, dataStart: at(base), dataEnd: at(base + 60)},
		{name: "from the watermark", h: hunt.Hunt{Interval: 60 * time.Second}, wm: base - 120, hasWM: true, fire: base + 60,
			start: base - 120, end: base + 60, dataStart: at(base - 120), dataEnd: at(base + 60)},
		{name: "delay shifts the data window only", h: hunt.Hunt{Interval: 60 * time.Second, Delay: 90 * time.Second}, wm: base, hasWM: true, fire: base + 60,
			start: base, end: base + 60, dataStart: at(base - 90), dataEnd: at(base - 30)},
		{name: "default catch-up is 24 intervals", h: hunt.Hunt{Interval: 60 * time.Second}, wm: base - 3600, hasWM: true, fire: base,
			start: base - 1440, end: base, gapStart: base - 3600, gapEnd: base - 1440, dataStart: at(base - 1440), dataEnd: at(base)},
		{name: "explicit catch-up", h: hunt.Hunt{Interval: 60 * time.Second, MaxCatchup: 5 * time.Minute}, wm: base - 600, hasWM: true, fire: base,
			start: base - 300, end: base, gapStart: base - 600, gapEnd: base - 300, dataStart: at(base - 300), dataEnd: at(base)},
		{name: "window exactly max_catchup has no gap", h: hunt.Hunt{Interval: 60 * time.Second, MaxCatchup: 5 * time.Minute}, wm: base - 300, hasWM: true, fire: base,
			start: base - 300, end: base, dataStart: at(base - 300), dataEnd: at(base)},
		{name: "catch-up below one interval is raised to it", h: hunt.Hunt{Interval: 60 * time.Second, MaxCatchup: 10 * time.Second}, wm: base - 60, hasWM: true, fire: base,
			start: base - 60, end: base, dataStart: at(base - 60), dataEnd: at(base)},
		{name: "off-grid watermark from a run-now request", h: hunt.Hunt{Interval: 60 * time.Second}, wm: base + 7, hasWM: true, fire: base + 60,
			start: base + 7, end: base + 60, dataStart: at(base + 7), dataEnd: at(base + 60)},
		{name: "watermark past the fire gives an empty window", h: hunt.Hunt{Interval: 60 * time.Second}, wm: base + 90, hasWM: true, fire: base + 60,
			start: base + 60, end: base + 60, dataStart: at(base + 60), dataEnd: at(base + 60)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := runWindowAfter(&tc.h, tc.wm, tc.hasWM, 0, tc.fire)
			want := window{Span: schedule.Span{Start: tc.start, End: tc.end, GapStart: tc.gapStart, GapEnd: tc.gapEnd}, DataStart: tc.dataStart, DataEnd: tc.dataEnd}
			if !reflect.DeepEqual(w, want) {
				t.Fatalf("window %+v\nwant   %+v", w, want)
			}
		})
	}
}

func TestEpochParam(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{at(1764410400), "1764410400"},
		{at(1764410400).Add(250 * time.Millisecond), "1764410400.250"},
		{at(0), "0"},
		{at(-1).Add(-250 * time.Millisecond), "-1.250"},
	} {
		if got := EpochParam(tc.t); got != tc.want {
			t.Errorf("EpochParam(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

// The runner plans from whatever set the source returns at each tick: a removed hunt stops
// being claimed at once, a changed interval is used at once.
func TestPlanFollowsReload(t *testing.T) {
	p := newPlanner(5 * time.Second)
	st := map[string]store.HuntState{
		"a": {Watermark: base, HasWatermark: true},
		"b": {Watermark: base, HasWatermark: true},
	}
	now := base + 90
	if got := dueIDs(p.plan(snap(now, st), set(testHunt("a", 60, 0), testHunt("b", 60, 0)), time.Time{}, nil)); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("before reload: %v", got)
	}
	pl := p.plan(snap(now, st), set(testHunt("a", 3600, 0)), time.Time{}, nil)
	if len(pl.Due) != 0 {
		t.Fatalf("after reload (b removed, a now hourly and done): due %v", dueIDs(pl))
	}
	if _, ok := pl.Behind["b"]; ok {
		t.Fatal("a removed hunt still reports how far behind it is")
	}
}

// The schedule can be read at another instant than the server's clock (Options.ScheduleClock):
// which fire is owed, and how far behind, follow the schedule instant; a lease is compared with
// the server's clock that wrote it.
func TestPlanReadsTheScheduleAtItsOwnInstant(t *testing.T) {
	h := set(testHunt("a", 60, 0))
	server := base + 30 // the server's clock: the latest fire would be base
	pinned := at(base + 3600 + 30)
	pl := newPlanner(5*time.Second).plan(snap(server, nil), h, pinned, nil)
	if len(pl.Due) != 1 || pl.Due[0].Fire != base+3600 {
		t.Fatalf("due %+v, want fire base+3600 (the pinned schedule's latest)", pl.Due)
	}
	leased := map[string]store.HuntState{"a": {HasLease: true, LeaseFire: base, LeaseUntil: at(server + 60)}}
	pl = newPlanner(5*time.Second).plan(snap(server, leased), h, pinned, nil)
	if len(pl.Due) != 0 || pl.Leased != 1 {
		t.Fatalf("a lease live on the server's clock: due %+v leased %d, want it held", pl.Due, pl.Leased)
	}
	behind := map[string]store.HuntState{"a": {Watermark: base + 3600 - 120, HasWatermark: true}}
	if b := newPlanner(5*time.Second).plan(snap(server, behind), h, pinned, nil).Behind["a"]; b != 90 {
		t.Fatalf("behind %ds at the pinned instant, want 90", b)
	}
}
