package runner

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func (e *env) store() *store.Store { return store.New(e.db.Conn, e.db.Name) }

// publish writes hunt_schedule rows for hs, as materialise would, so the due count sees them.
func (e *env) publish(hs ...hunt.Hunt) {
	e.t.Helper()
	for _, h := range hs {
		e.exec("INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) SELECT ?, ?, ?, 1, 'h', now64(6)",
			h.ID, h.IntervalSeconds(), h.OffsetSeconds())
	}
}

func (e *env) dueCount() uint64 {
	e.t.Helper()
	n, err := store.New(e.db.Conn, e.db.Name).CountDue(e.ctx, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (r envRunner) tickCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ticks
}

// waitFor polls cond until it holds or a minute passes.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	chtest.Eventually(e.t, time.Minute, what, cond)
}

// tickUntil ticks r (waiting for the runs it starts) until cond holds: on a loaded machine a
// claim acknowledged later than the settle is lost, and its fire is claimed again once the
// provisional lease expires.
func (e *env) tickUntil(r envRunner, what string, cond func() bool) {
	e.t.Helper()
	e.waitFor(what, func() bool {
		if err := r.tick(e.ctx); err != nil {
			e.t.Fatalf("tick: %v", err)
		}
		r.exec.wg.Wait()
		r.exec.mu.Lock()
		defer r.exec.mu.Unlock()
		return cond()
	})
}

// startRunners runs rs until the returned stop is called.
func (e *env) startRunners(rs ...envRunner) (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() {
			if err := r.Start(ctx); err != nil {
				e.t.Error(err)
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// Two runners, each with a paused hunt only it has loaded and a live hunt both have: neither
// claims its paused hunt over several ticks while the live one runs, the due count leaves the
// paused hunts out, and after resume each runner runs its own.
func TestPauseResumeAcrossTwoRunners(t *testing.T) {
	e := newEnv(t)
	off := e.mid(3600)
	pa := hunt.Hunt{ID: "paused-a", Interval: 3600 * time.Second, Offset: sec(off), Query: eventsQuery}
	pb := hunt.Hunt{ID: "paused-b", Interval: 3600 * time.Second, Offset: sec(off), Query: eventsQuery}
	live := hunt.Hunt{ID: "live", Interval: 3600 * time.Second, Offset: sec(off), Query: eventsQuery}
	e.publish(pa, pb, live)
	wm := e.store()
	for _, id := range []string{pa.ID, pb.ID} {
		if err := wm.Pause(e.ctx, store.Pause{HuntID: id, Reason: "tuning", By: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.dueCount(); n != 1 {
		t.Fatalf("due count %d with two of three hunts paused, want 1", n)
	}
	a := e.runner("pod-a", testSet("a", live, pa), func(o *Options) { o.Tick = 200 * time.Millisecond })
	b := e.runner("pod-b", testSet("b", live, pb), func(o *Options) { o.Tick = 200 * time.Millisecond })
	stop := e.startRunners(a, b)
	defer stop()
	e.waitFor("the live hunt to commit", func() bool { _, ok := e.watermarkOf(live.ID); return ok })
	ta, tb := a.tickCount(), b.tickCount()
	e.waitFor("three more ticks of each runner", func() bool { return a.tickCount() >= ta+3 && b.tickCount() >= tb+3 })
	if n := e.count("SELECT count() FROM hunt_lease WHERE hunt_id IN ('paused-a', 'paused-b')"); n != 0 {
		t.Fatalf("%d claims of paused hunts", n)
	}
	for _, id := range []string{pa.ID, pb.ID} {
		if err := wm.Resume(e.ctx, id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("both resumed hunts to commit", func() bool {
		return e.count("SELECT uniqExact(hunt_id) FROM hunt_watermark WHERE hunt_id IN ('paused-a', 'paused-b')") == 2
	})
	stop()
	for id, owner := range map[string]string{pa.ID: "pod-a", pb.ID: "pod-b"} {
		runs := e.runs(id)
		if len(runs) != 1 || runs[0].Status != hunt.RunSucceeded {
			t.Errorf("%s runs %+v, want one success", id, runs)
		}
		if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = ? AND owner = ?", id, owner); n != 1 {
			t.Errorf("%s: %d runs by %s, the only runner that loads it", id, n, owner)
		}
	}
}

// A fire won before the pause landed runs and commits; the paused hunt is then not claimed; on
// resume a hunt paused for longer than max_catchup runs its newest max_catchup and records the
// rest as a gap. A pause that ran out needs no resume.
func TestPauseInFlightFinishesAndResumeRecordsGap(t *testing.T) {
	e := newEnv(t)
	wm := e.store()
	busy := hunt.Hunt{ID: "busy", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	r := e.runner("pod-a", testSet("x", busy), nil)
	release := holdRuns(t, r.Runner)
	e.tickUntil(r, "the fire to be won", func() bool { return len(r.exec.queue) == 1 })
	if err := wm.Pause(e.ctx, store.Pause{HuntID: busy.ID, By: "test"}); err != nil {
		t.Fatal(err)
	}
	release()
	r.exec.wg.Wait()
	if runs := e.runs(busy.ID); len(runs) != 1 || runs[0].Status != hunt.RunSucceeded {
		t.Fatalf("runs %+v: the fire won before the pause must finish", runs)
	}

	gappy := hunt.Hunt{ID: "gappy", Interval: 60 * time.Second, Offset: 7 * time.Second, Query: eventsQuery, MaxCatchup: 5 * time.Minute, MaxFindings: hunt.MaxFindingsCeiling}
	e.publish(gappy)
	fire := e.latest(gappy)
	e.setWatermark(gappy.ID, fire-3600)
	if err := wm.Pause(e.ctx, store.Pause{HuntID: gappy.ID, For: time.Hour, By: "test"}); err != nil {
		t.Fatal(err)
	}
	if n := e.dueCount(); n != 0 {
		t.Fatalf("due count %d, want 0 while paused", n)
	}
	g := e.runner("pod-b", testSet("y", gappy), nil)
	e.tickAndWait(g)
	if runs := e.runs(gappy.ID); len(runs) != 0 {
		t.Fatalf("a paused hunt ran: %+v", runs)
	}
	snap, err := wm.Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := g.planner.plan(snap, testSet("", gappy), time.Time{}, nil); p.Paused != 1 || len(p.Due) != 0 {
		t.Fatalf("plan %+v, want the hunt counted as paused", p)
	}
	if err := wm.Resume(e.ctx, gappy.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if n := e.dueCount(); n != 1 {
		t.Fatalf("due count %d after resume, want 1", n)
	}
	e.tickUntil(g, "the resumed hunt to run", func() bool { return len(e.runs(gappy.ID)) > 0 })
	var gap, ok runRow
	for _, rr := range e.runs(gappy.ID) {
		switch rr.Status {
		case hunt.RunGap:
			gap = rr
		case hunt.RunSucceeded:
			ok = rr
		}
	}
	if f := ok.Fire; gap.Start != fire-3600 || gap.End != f-300 || ok.Start != f-300 || ok.End != f {
		t.Fatalf("gap [%d, %d) run [%d, %d): want the newest max_catchup run and the rest a gap from %d", gap.Start, gap.End, ok.Start, ok.End, fire-3600)
	}

	// A pause whose end has passed holds no more.
	ended := hunt.Hunt{ID: "ended", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	var now uint32
	e.scan(&now, "SELECT toUnixTimestamp(now())")
	e.exec("INSERT INTO hunt_pause (hunt_id, paused, paused_until, paused_by, updated) SELECT 'ended', 1, toDateTime64(?, 3, 'UTC'), 'test', now64(6)", int64(now)-1)
	e.tickUntil(e.runner("pod-c", testSet("z", ended), nil), "the hunt whose pause ended to run",
		func() bool { return len(e.runs(ended.ID)) > 0 })
	if runs := e.runs(ended.ID); len(runs) != 1 || runs[0].Status != hunt.RunSucceeded {
		t.Fatalf("runs %+v: a pause that ran out must not hold the hunt", runs)
	}
}

type chunkRow struct {
	Start, End int64
	Owner      string
}

func (e *env) chunks(hunt string) []chunkRow {
	e.t.Helper()
	rows, err := e.db.Conn.Query(e.ctx, "SELECT toInt64(window_start), toInt64(window_end), owner FROM hunt_runs "+
		"WHERE hunt_id = ? AND kind = 'backfill' AND status = 'succeeded' ORDER BY window_start", hunt)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []chunkRow
	for rows.Next() {
		var c chunkRow
		if err := rows.Scan(&c.Start, &c.End, &c.Owner); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// tiles checks that chunks cover [from, to) exactly, in steps of chunk (the last may be shorter).
func tiles(t *testing.T, cs []chunkRow, from, to, chunk int64) {
	t.Helper()
	at := from
	for _, c := range cs {
		if c.Start != at || c.End != min(at+chunk, to) {
			t.Fatalf("chunks %+v do not tile [%d, %d) by %d: at %d", cs, from, to, chunk, at)
		}
		at = c.End
	}
	if at != to {
		t.Fatalf("chunks %+v stop at %d, want %d", cs, at, to)
	}
}

// A backfill across two runners tiles its range exactly, with one committed finding per source
// event, under the hunt's id and kind backfill, while a live hunt keeps running, and never
// touches the hunt's own lease or watermark.
func TestBackfillAcrossTwoRunners(t *testing.T) {
	e := newEnv(t)
	bf := hunt.Hunt{ID: "bf", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	live := hunt.Hunt{ID: "live", Interval: 2 * time.Second, Offset: 1 * time.Second, Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	liveWM := e.latest(bf)
	e.setWatermark(bf.ID, liveWM)
	from, to := e.now-6600, e.now-650 // 10 chunks, the last 550s
	id, err := e.store().RequestBackfill(e.ctx, store.BackfillRequest{HuntID: bf.ID, From: from, To: to, Chunk: 600, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	key := schema.BackfillKey(bf.ID, id)
	hs := testSet("x", bf, live)
	// On the server's clock, not the pinned one: the live hunt must owe a fire every 2 s
	// for as long as the backfill runs, however slowly a loaded machine runs it.
	mod := func(o *Options) {
		o.Tick = 200 * time.Millisecond
		o.ScheduleClock = func(server time.Time) time.Time { return server }
	}
	stop := e.startRunners(e.runner("pod-a", hs, mod), e.runner("pod-b", hs, mod))
	defer stop()
	e.waitFor("the backfill to finish", func() bool { wm, _ := e.watermarkOf(key); return wm == to })
	stop()

	cs := e.chunks(bf.ID)
	tiles(t, cs, from, to, 600)
	owners := map[string]int{}
	for _, c := range cs {
		owners[c.Owner]++
	}
	t.Logf("chunks by owner: %v", owners)
	want := e.eventsIn(from, to, 0)
	var n, distinct uint64
	if err := e.db.Conn.QueryRow(e.ctx, "SELECT count(), uniqExact(finding) FROM hunt_findings_committed WHERE hunt_id = 'bf'").Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != want || distinct != want {
		t.Fatalf("committed findings %d (%d distinct), want one per event: %d", n, distinct, want)
	}
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = 'bf' AND kind = 'backfill' AND status != 'succeeded'"); n != 0 {
		t.Errorf("%d backfill chunks did not succeed", n)
	}
	if wm, _ := e.watermarkOf(bf.ID); wm != liveWM {
		t.Errorf("live watermark %d, want it untouched at %d", wm, liveWM)
	}
	if n := e.count("SELECT count() FROM hunt_lease WHERE hunt_id = 'bf'"); n != 0 {
		t.Errorf("%d live lease rows of the backfilled hunt", n)
	}
	// The live hunt committed while the backfill ran.
	var first, last time.Time
	if err := e.db.Conn.QueryRow(e.ctx, "SELECT min(finished), max(finished) FROM hunt_runs WHERE hunt_id = 'bf' AND kind = 'backfill'").Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = 'live' AND status = 'succeeded' AND finished > ? AND finished < ?", first, last); n == 0 {
		t.Errorf("no live run committed between the first and last backfill chunk")
	}
	snap, err := e.store().Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Backfills) != 0 {
		t.Errorf("finished backfill still pending: %+v", snap.Backfills)
	}
}

// Cancelling a backfill lets the chunk in flight finish and claims no further chunk.
func TestBackfillCancel(t *testing.T) {
	e := newEnv(t)
	bf := hunt.Hunt{ID: "bf", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	e.setWatermark(bf.ID, e.latest(bf))
	from := e.now - 6000
	wm := e.store()
	id, err := wm.RequestBackfill(e.ctx, store.BackfillRequest{HuntID: bf.ID, From: from, To: from + 5400, Chunk: 600, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	r := e.runner("pod-a", testSet("x", bf), nil)
	// One chunk per tick at most (a quarter of four slots).
	e.tickUntil(r, "two chunks", func() bool { return len(e.chunks(bf.ID)) >= 2 })
	if cs := e.chunks(bf.ID); len(cs) != 2 {
		t.Fatalf("chunks %+v, want 2", cs)
	}
	release := holdRuns(t, r.Runner)
	e.tickUntil(r, "the third chunk to be won", func() bool { return len(r.exec.queue) == 1 })
	if r.exec.queue[0].backfill == nil {
		t.Fatal("queued a live fire, want the third chunk")
	}
	if err := wm.CancelBackfill(e.ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	release()
	r.exec.wg.Wait()
	e.tickAndWait(r)
	e.tickAndWait(r)
	cs := e.chunks(bf.ID)
	tiles(t, cs, from, from+3*600, 600)
	var fire int64
	e.scan(&fire, "SELECT argMax(toInt64(fire), claimed) FROM hunt_lease WHERE hunt_id = ?", schema.BackfillKey(bf.ID, id))
	if fire != from+3*600 {
		t.Errorf("newest claim under the key is for %d, want the third chunk's end %d", fire, from+3*600)
	}
}

// Backfill chunks take only the claim capacity live fires leave, at most a quarter of the run
// slots, and queue behind live fires.
func TestBackfillBelowLiveFires(t *testing.T) {
	e := newEnv(t)
	off := e.mid(3600)
	var hunts []hunt.Hunt
	for i := range 3 {
		h := hunt.Hunt{ID: fmt.Sprintf("b%d", i), Interval: 3600 * time.Second, Offset: sec(off), Query: eventsQuery}
		e.setWatermark(h.ID, e.latest(h))
		if _, err := e.store().RequestBackfill(e.ctx, store.BackfillRequest{HuntID: h.ID, From: e.now - 3600, To: e.now - 600, Chunk: 600, By: "test"}); err != nil {
			t.Fatal(err)
		}
		hunts = append(hunts, h)
	}
	lives := []hunt.Hunt{{ID: "l0", Interval: 3600 * time.Second, Offset: sec(off), Query: eventsQuery}, {ID: "l1", Interval: 3600 * time.Second, Offset: sec(off), Query: eventsQuery}}
	// Four slots and four queued: room for all, but a quarter of the slots is one chunk.
	a := e.runner("pod-a", testSet("x", append(append([]hunt.Hunt{}, hunts...), lives...)...),
		func(o *Options) { o.Concurrency, o.MaxQueued = 4, 4 })
	holdRuns(t, a.Runner)
	e.tickUntil(a, "two live fires and a chunk", func() bool { return len(a.exec.queue) >= 3 })
	var kinds []string
	for _, j := range a.exec.queue {
		kinds = append(kinds, j.key())
		j.stopRenewal()
	}
	if len(kinds) != 3 || a.exec.queue[0].backfill != nil || a.exec.queue[1].backfill != nil || a.exec.queue[2].backfill == nil {
		t.Fatalf("queue %v, want the two live fires then one backfill chunk", kinds)
	}
	// One slot and one queued, both taken by live fires: no chunk is claimed.
	l2 := hunt.Hunt{ID: "l2", Interval: 3600 * time.Second, Offset: sec(off), Query: eventsQuery}
	l3 := hunt.Hunt{ID: "l3", Interval: 3600 * time.Second, Offset: sec(off), Query: eventsQuery}
	b := e.runner("pod-b", testSet("y", append(append([]hunt.Hunt{}, hunts...), l2, l3)...),
		func(o *Options) { o.Concurrency, o.MaxQueued = 1, 1 })
	holdRuns(t, b.Runner)
	e.tickUntil(b, "the two live fires", func() bool { return len(b.exec.queue) >= 2 })
	if err := b.tick(e.ctx); err != nil { // no capacity left: claims nothing
		t.Fatal(err)
	}
	for _, j := range b.exec.queue {
		j.stopRenewal()
		if j.backfill != nil {
			t.Errorf("claimed backfill chunk %s with no capacity left after live fires", j.key())
		}
	}
	if len(b.exec.queue) != 2 {
		t.Errorf("queued %d, want the two live fires", len(b.exec.queue))
	}
}

// A paused hunt's backfill waits for the resume; a chunk held here never makes the hunt's live
// fires look busy (held is keyed by the lease key), and a live fire won later still queues
// ahead of the chunk.
func TestBackfillPausedAndBesideLiveFires(t *testing.T) {
	e := newEnv(t)
	wm := e.store()
	bf := hunt.Hunt{ID: "bf", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	e.setWatermark(bf.ID, e.latest(bf))
	if _, err := wm.RequestBackfill(e.ctx, store.BackfillRequest{HuntID: bf.ID, From: e.now - 3600, To: e.now - 600, Chunk: 600, By: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := wm.Pause(e.ctx, store.Pause{HuntID: bf.ID, By: "test"}); err != nil {
		t.Fatal(err)
	}
	hs := testSet("x", bf)
	r := e.runner("pod-a", hs, nil)
	holdRuns(t, r.Runner)
	defer func() {
		for _, j := range r.exec.queue {
			j.stopRenewal()
		}
	}()
	if err := r.tick(e.ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.exec.queue) != 0 {
		t.Fatalf("queued %d: a paused hunt's backfill was claimed", len(r.exec.queue))
	}
	if err := wm.Resume(e.ctx, bf.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.tickUntil(r, "the first chunk after resume", func() bool { return len(r.exec.queue) == 1 })
	if r.exec.queue[0].backfill == nil {
		t.Fatal("queued a live fire, want the first chunk")
	}
	// A run-now request makes the hunt's live fire owed while its chunk is held here. Its fire
	// is on the runner's pinned schedule clock (e.now): one on the server's clock would lie in
	// the runner's future on a machine slow enough to take a second to get here.
	if err := wm.Request(e.ctx, bf.ID, e.now-1, "test"); err != nil {
		t.Fatal(err)
	}
	e.tickUntil(r, "the live request", func() bool { return len(r.exec.queue) == 2 })
	if len(r.exec.queue) != 2 || r.exec.queue[0].backfill != nil || r.exec.queue[0].hunt.ID != bf.ID || r.exec.queue[1].backfill == nil {
		t.Fatalf("queue of %d: want the live request first, then the chunk claimed before it", len(r.exec.queue))
	}
}

// A failing chunk backs off its backfill's key, records a failed run of kind backfill, and
// leaves the hunt's own health alone.
func TestBackfillFailureBacksOffTheKey(t *testing.T) {
	e := newEnv(t)
	// Fails on windows older than 50 minutes: the backfill's, not the live fire's.
	h := hunt.Hunt{ID: "picky", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)),
		Query: "SELECT throwIf(toDateTime({window_start:DateTime64(3)}) < now() - INTERVAL 50 MINUTE, 'too old') AS x, n FROM events " +
			"WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}"}
	e.setWatermark(h.ID, e.latest(h))
	wm := e.store()
	id, err := wm.RequestBackfill(e.ctx, store.BackfillRequest{HuntID: h.ID, From: e.now - 7000, To: e.now - 6400, Chunk: 600, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	r := e.runner("pod-a", testSet("x", h), func(o *Options) { o.Tick = time.Minute })
	e.tickUntil(r, "the chunk to fail", func() bool {
		return e.count("SELECT count() FROM hunt_runs WHERE hunt_id = 'picky' AND kind = 'backfill'") > 0
	})
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = 'picky' AND kind = 'backfill' AND status = 'failed'"); n != 1 {
		t.Fatalf("%d failed backfill runs, want 1", n)
	}
	snap, err := wm.Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := snap.Hunts[h.ID]; st.ConsecutiveFailures != 0 || st.HasRetryAfter || st.Status != "" {
		t.Errorf("the hunt's own state %+v: a backfill failure must not touch it", st)
	}
	if len(snap.Backfills) != 1 || snap.Backfills[0].ID != id || !snap.Backfills[0].Progress.HasRetryAfter ||
		snap.Backfills[0].Progress.ConsecutiveFailures != 1 {
		t.Fatalf("backfills %+v, want the key backing off after one failure", snap.Backfills)
	}
	e.tickAndWait(r)
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = 'picky' AND kind = 'backfill'"); n != 1 {
		t.Errorf("%d backfill runs: the key's backoff was not honoured", n)
	}
}
