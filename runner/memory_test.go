package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// A peer commits a fire this runner remembers as owed: the memory is stale, so the hunt is
// read, the read shows the commit, and nothing is claimed (no claim row at all, not a lost
// claim) while the memory is corrected.
func TestStaleMemoryReadsAndSkips(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "h", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	hs := testSet("x", h)
	s := store.New(e.db.Conn, e.db.Name)
	// pod-b learns the hunt while it is paused: owed, free, never committed.
	if err := s.Pause(e.ctx, store.Pause{HuntID: h.ID, By: "test"}); err != nil {
		t.Fatal(err)
	}
	b := e.runner("pod-b", hs, nil)
	e.tickAndWait(b)
	if k, ok := b.memory.hunts[h.ID]; !ok || k.hasWatermark || k.hasLease {
		t.Fatalf("pod-b remembers %+v (%v), want the hunt known and never committed", k, ok)
	}
	if err := s.Resume(e.ctx, h.ID, "test"); err != nil {
		t.Fatal(err)
	}
	// pod-a runs the fire pod-b still remembers as owed.
	a := e.runner("pod-a", hs, nil)
	e.tickAndWait(a)
	if wm, _ := e.watermarkOf(h.ID); wm != e.latest(h) {
		t.Fatalf("pod-a committed %d, want %d", wm, e.latest(h))
	}
	claims := &countingClaimer{Claimer: b.claimer}
	b.useClaimer(claims)
	e.tickAndWait(b)
	if n := claims.fires.Load(); n != 0 {
		t.Fatalf("pod-b tried to claim %d fires, one a peer had committed: its memory was trusted", n)
	}
	if n := e.count("SELECT count() FROM hunt_lease WHERE owner = 'pod-b'"); n != 0 {
		t.Fatalf("pod-b wrote %d claim rows for a fire a peer had committed", n)
	}
	if n := len(e.runs(h.ID)); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	if k := b.memory.hunts[h.ID]; !k.hasWatermark || k.watermark != e.latest(h) {
		t.Fatalf("pod-b remembers %+v after reading, want the commit", k)
	}
}

// countingClaimer counts the fires a runner tries to claim.
type countingClaimer struct {
	Claimer
	fires atomic.Int64
}

func (c *countingClaimer) Claim(ctx context.Context, fires []lease.Fire) (lease.Result, error) {
	c.fires.Add(int64(len(fires)))
	return c.Claimer.Claim(ctx, fires)
}

// Nothing the memory leaves unread hides a change for more than one tick: a run-now request or
// a backfill on a hunt remembered as caught up, a hunt added on reload, a pause and a resume,
// and a lease another pod took on a fire the runner remembers as free.
func TestMemoryHidesNoChange(t *testing.T) {
	e := newEnv(t)
	mk := func(id string) hunt.Hunt {
		return hunt.Hunt{ID: id, Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	}
	a, b, c, d := mk("a"), mk("b"), mk("c"), mk("d")
	first := e.latest(a)
	for _, h := range []hunt.Hunt{a, b, c} {
		e.setWatermark(h.ID, first)
	}
	var sched atomic.Int64
	sched.Store(e.now)
	var loaded atomic.Pointer[hunt.Set]
	loaded.Store(testSet("1", a, b, c))
	r := e.runner("pod-a", loaded.Load(), func(o *Options) {
		o.ScheduleClock = func(time.Time) time.Time { return time.Unix(sched.Load(), 0) }
	})
	r.source = func() *hunt.Set { return loaded.Load() }
	s := store.New(e.db.Conn, e.db.Name)
	runsOf := func(id string, fire int64) int {
		n := 0
		for _, run := range e.runs(id) {
			if run.Fire == fire && run.Status == hunt.RunSucceeded {
				n++
			}
		}
		return n
	}

	e.tickAndWait(r) // everything caught up: learnt, nothing run
	if len(r.memory.hunts) != 3 || e.count("SELECT count() FROM hunt_lease") != 0 {
		t.Fatalf("memory %v, %d claims: want three hunts known and nothing claimed", r.memory.hunts, e.count("SELECT count() FROM hunt_lease"))
	}

	// A request on a hunt remembered as caught up.
	if err := s.Request(e.ctx, a.ID, e.now-60, "test"); err != nil {
		t.Fatal(err)
	}
	e.tickAndWait(r)
	if runsOf(a.ID, e.now-60) != 1 {
		t.Fatalf("the run-now request was not run on the next tick: runs %+v", e.runs(a.ID))
	}

	// A backfill of two chunks on a hunt remembered as caught up: one chunk a tick, each
	// starting where the key's progress stands.
	id, err := s.RequestBackfill(e.ctx, store.BackfillRequest{HuntID: b.ID, From: first - 7200, To: first, Chunk: 3600, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	key := schema.BackfillKey(b.ID, id)
	for _, want := range []int64{first - 3600, first} {
		e.tickAndWait(r)
		if wm, _ := e.watermarkOf(key); wm != want {
			t.Fatalf("backfill progress %d after a tick, want %d", wm, want)
		}
	}

	// A hunt added on reload.
	loaded.Store(testSet("2", a, b, c, d))
	e.tickAndWait(r)
	if runsOf(d.ID, first) != 1 {
		t.Fatalf("the hunt added on reload did not run on the next tick: %+v", e.runs(d.ID))
	}

	// The next fire comes while c is paused: the others run, c waits, and runs on the tick
	// after its resume.
	next := first + 3600
	sched.Add(3600)
	if err := s.Pause(e.ctx, store.Pause{HuntID: c.ID, By: "test"}); err != nil {
		t.Fatal(err)
	}
	e.tickAndWait(r)
	if runsOf(c.ID, next) != 0 || runsOf(a.ID, next) != 1 || runsOf(d.ID, next) != 1 {
		t.Fatalf("after a pause: c %+v, a %+v, d %+v", e.runs(c.ID), e.runs(a.ID), e.runs(d.ID))
	}
	if err := s.Resume(e.ctx, c.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.tickAndWait(r)
	if runsOf(c.ID, next) != 1 {
		t.Fatalf("the resumed hunt did not run on the next tick: %+v", e.runs(c.ID))
	}

	// Another pod takes the next fire of d before this runner's tick: d is read, not claimed.
	sched.Add(3600)
	peer := e.runner("pod-b", loaded.Load(), nil)
	res, err := peer.coord.Claim(e.ctx, []lease.Fire{{HuntID: d.ID, Fire: next + 3600}})
	if err != nil || len(res.Won) != 1 {
		t.Fatalf("the peer's claim: %v %+v", err, res)
	}
	e.tickAndWait(r)
	if n := e.count("SELECT count() FROM hunt_lease WHERE hunt_id = 'd' AND owner = 'pod-a' AND fire = toDateTime(?, 'UTC')", next+3600); n != 0 {
		t.Fatalf("pod-a wrote %d claim rows on a fire the peer holds", n)
	}
	for _, h := range []hunt.Hunt{a, b, c} {
		if runsOf(h.ID, next+3600) != 1 {
			t.Fatalf("%s did not run fire %d: %+v", h.ID, next+3600, e.runs(h.ID))
		}
	}
	if n := len(r.memory.hunts); n != 4 {
		t.Fatalf("memory holds %d hunts, want 4", n)
	}
	loaded.Store(testSet("3", a, b))
	e.tickAndWait(r)
	if n := len(r.memory.hunts); n != 2 {
		t.Fatalf("memory holds %d hunts after two were removed, want 2", n)
	}
}

// The memory changes which rows a tick reads, never what it decides: over rounds of what peers
// and operators do (commits, claims, failures with backoff, pauses, resumes, run-now requests)
// while the schedule moves on, the plan on the memory and SnapshotOf is the plan on a full
// Snapshot, fire for fire, with the same behind and the same counts, so the runner still runs
// exactly what the due SQL (the KEDA backlog) counts.
func TestMemoryPlanEqualsFullSnapshotPlan(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(29, 1))
	var hunts []hunt.Hunt
	for i := range 90 {
		iv := []int64{60, 300, 3600}[i%3]
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("p%02d", i), Interval: sec(iv), Offset: sec(rng.Int64N(iv)), Query: eventsQuery})
	}
	hs := testSet("x", hunts...)
	for i, h := range hunts {
		if i%5 != 0 { // most hunts caught up, as in a running deployment
			e.setWatermark(h.ID, e.latest(h))
		}
	}
	s := store.New(e.db.Conn, e.db.Name)
	mem, pMem, pFull := newMemory(), newPlanner(time.Second), newPlanner(time.Second)
	at := e.now
	lease := func(id string, fire int64, until string) {
		e.exec(fmt.Sprintf(`INSERT INTO hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT '%s', toDateTime(%d, 'UTC'), 'peer', generateUUIDv4(), now64(6), now64(3) + %s`, id, fire, until))
	}
	for round := range 6 {
		full, err := s.Snapshot(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		part, err := s.SnapshotOf(e.ctx, func(now time.Time) []string { return mem.candidates(hs, time.Unix(at, 0), now) })
		if err != nil {
			t.Fatal(err)
		}
		mem.learn(part, hs, time.Unix(at, 0))
		// Both plans at the full snapshot's server time: the two reads are a few ms apart.
		got := pMem.planOn(full.Now, mem.view(part), hs, mem.attention(part, hs), time.Unix(at, 0), nil)
		want := pFull.plan(full, hs, time.Unix(at, 0), nil)
		if !reflect.DeepEqual(dueKeys(got.Due), dueKeys(want.Due)) || !reflect.DeepEqual(behind(got.Behind), behind(want.Behind)) ||
			got.Leased != want.Leased || got.BackOff != want.BackOff || got.Paused != want.Paused {
			t.Fatalf("round %d: on memory due %v leased %d backoff %d paused %d\non the full snapshot due %v leased %d backoff %d paused %d",
				round, dueKeys(got.Due), got.Leased, got.BackOff, got.Paused,
				dueKeys(want.Due), want.Leased, want.BackOff, want.Paused)
		}
		if round > 0 && len(part.Hunts) >= len(hunts) {
			t.Errorf("round %d read %d of %d hunts: the memory saved nothing", round, len(part.Hunts), len(hunts))
		}
		t.Logf("round %d: %d due, read %d of %d hunts", round, len(want.Due), len(part.Hunts), len(hunts))
		// What peers and operators do next, each only where the system would allow it.
		for _, d := range want.Due {
			switch rng.IntN(5) {
			case 0, 4: // a peer runs it and commits
				lease(d.Hunt.ID, d.Fire, "INTERVAL 5 MINUTE")
				e.setWatermark(d.Hunt.ID, d.Fire)
			case 1: // a peer claims it and is still running
				lease(d.Hunt.ID, d.Fire, "INTERVAL 5 MINUTE")
			case 2: // a peer's run fails: a short backoff, its lease released
				lease(d.Hunt.ID, d.Fire, "INTERVAL 0 SECOND")
				e.exec(fmt.Sprintf(`INSERT INTO hunt_state (hunt_id, status, consecutive_failures, last_error, last_fire, retry_after, updated)
SELECT '%s', 'failed', 1, 'boom', toDateTime(%d, 'UTC'), now64(3) + INTERVAL %d MILLISECOND, now64(6)`, d.Hunt.ID, d.Fire, 500+rng.IntN(2000)))
			}
		}
		for range 4 {
			h := hunts[rng.IntN(len(hunts))]
			switch rng.IntN(3) {
			case 0:
				if err := s.Pause(e.ctx, store.Pause{HuntID: h.ID, By: "test"}); err != nil {
					t.Fatal(err)
				}
			case 1:
				if err := s.Resume(e.ctx, h.ID, "test"); err != nil {
					t.Fatal(err)
				}
			case 2:
				if err := s.Request(e.ctx, h.ID, at-rng.Int64N(120), "test"); err != nil {
					t.Fatal(err)
				}
			}
		}
		at += rng.Int64N(200)
		time.Sleep(time.Second) // some backoffs end between rounds
	}
}

type dueKey struct {
	ID        string
	Fire      int64
	Requested bool
}

func dueKeys(due []dueFire) []dueKey {
	out := make([]dueKey, len(due))
	for i, d := range due {
		out[i] = dueKey{d.Hunt.ID, d.Fire, d.Requested}
	}
	return out
}

// behind is a plan's Behind without its caught-up hunts, which a plan may leave out.
func behind(b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for id, s := range b {
		if s != 0 {
			out[id] = s
		}
	}
	return out
}

// A hunt remembered as caught up is not read again until its next fire comes; then it is
// read every tick until a read shows it caught up again. A reload that changes its interval
// re-orders it under the new schedule, and a hunt added on reload is read at once.
func TestMemoryReadsAHuntWhenItsFireComes(t *testing.T) {
	h := testHunt("a", 60, 10)
	set1 := set(h)
	m := newMemory()
	at := func(s int64) time.Time { return time.Unix(s, 0) }
	read := func(s int64, wm int64) {
		m.learn(store.Snapshot{Now: at(s), Hunts: map[string]store.HuntState{"a": {Watermark: wm, HasWatermark: true}}}, set1, at(s))
	}
	if c := m.candidates(set1, at(base), at(base)); len(c) != 1 {
		t.Fatalf("never read: candidates %v, want a", c)
	}
	latest := schedule.LatestFire(base, 60, 10)
	read(base, latest)
	for _, s := range []int64{base, latest + 59} {
		if c := m.candidates(set1, at(s), at(s)); len(c) != 0 {
			t.Fatalf("at latest%+d (caught up): candidates %v", s-latest, c)
		}
	}
	for range 2 { // owed from the next fire on, until a read says otherwise
		if c := m.candidates(set1, at(latest+60), at(latest+60)); len(c) != 1 {
			t.Fatalf("at the next fire: candidates %v, want a", c)
		}
	}
	read(latest+61, latest+60)
	if c := m.candidates(set1, at(latest+61), at(latest+61)); len(c) != 0 {
		t.Fatalf("after a read of the commit: candidates %v", c)
	}
	// Reload: a every 30 s now, and b new.
	set2 := set(testHunt("a", 30, 10), testHunt("b", 60, 0))
	next := schedule.NextFire(latest+60, 30, 10)
	if c := m.candidates(set2, at(next-1), at(next-1)); !slices.Equal(c, []string{"b"}) {
		t.Fatalf("after the reload: candidates %v, want only the new b", c)
	}
	if c := m.candidates(set2, at(next), at(next)); !slices.Contains(c, "a") {
		t.Fatalf("at a's next fire under its new interval: candidates %v", c)
	}
	if len(m.hunts) != 1 {
		t.Fatalf("memory %v", m.hunts)
	}
}
