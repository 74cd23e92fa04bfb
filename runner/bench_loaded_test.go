package runner

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// benchLoaded are the loaded hunts BenchmarkTickLoaded measures, and benchDue how many of
// them are due at its tick, the same at every size.
var benchLoaded = []int{1_000, 10_000, 100_000}

const benchDue = 50

// BenchmarkTickLoaded measures, side by side in one run on one private engine, a tick of a
// runner that has 1,000, 10,000 and 100,000 hourly hunts loaded, of which the same 50 are due:
// every other hunt caught up, with a spent lease and a hunt_state row each, as in a deployment
// that has been running. The runner's memory is warm (it has ticked before: learnt from a full
// snapshot, outside the clock). Per size it reports the tick (SnapshotOf, plan, the batched
// claim with its 750 ms settle, until the 50 are queued; the median of three) and its round
// trips, the tick's read alone (SnapshotOf with the memory's candidates; the median of five), and the full
// Snapshot every tick read before; then the ratios the sizing rests on: tick at 100,000
// against 1,000 (target at most 3), and the full snapshot against the due-only read at 100,000.
func BenchmarkTickLoaded(b *testing.B) {
	srv := chtest.Start(b)
	type figures struct {
		tick, read, full time.Duration
		trips            int64
	}
	got := map[int]figures{}
	for b.Loop() {
		for _, n := range benchLoaded {
			got[n] = tickLoaded(b, setupEnv(b, srv.NewDB(b)), n)
		}
	}
	for _, n := range benchLoaded {
		f := got[n]
		k := fmt.Sprintf("%dk", n/1000)
		b.ReportMetric(ms(f.tick), "tick-ms@"+k)
		b.ReportMetric(float64(f.trips), "roundtrips@"+k)
		b.ReportMetric(ms(f.read), "read-ms@"+k)
		b.ReportMetric(ms(f.full), "full-snapshot-ms@"+k)
	}
	lo, hi := got[benchLoaded[0]], got[benchLoaded[len(benchLoaded)-1]]
	b.ReportMetric(float64(hi.tick)/float64(lo.tick), "tick100k/tick1k")
	b.ReportMetric(float64(hi.read)/float64(lo.read), "read100k/read1k")
	b.ReportMetric(float64(hi.full)/float64(hi.read), "full/read@100k")
	if hi.tick > 3*lo.tick {
		b.Errorf("tick %v at %d loaded hunts, %v at %d: more than 3 times", hi.tick, benchLoaded[len(benchLoaded)-1], lo.tick, benchLoaded[0])
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// tickLoaded loads n hunts on e's database (benchDue of them due at e.now) and returns the
// median tick, read and full snapshot, and the round trips of a tick.
func tickLoaded(b *testing.B, e *env, n int) (f struct {
	tick, read, full time.Duration
	trips            int64
}) {
	step := n / benchDue
	// One statement per table, whatever n: each hunt's latest fire at e.now (offset number %
	// 3600), one interval earlier for every step-th hunt, which is then due.
	rows := fmt.Sprintf(`SELECT concat('h', leftPad(toString(number), 6, '0')) AS id,
       toDateTime(intDiv(%[1]d - number %% 3600, 3600) * 3600 + number %% 3600 - if(number %% %[2]d = 0, 3600, 0), 'UTC') AS wm
FROM numbers(%[3]d)`, e.now, step, n)
	e.exec(`INSERT INTO hunt_watermark (hunt_id, watermark, claim_id, updated) SELECT id, wm, generateUUIDv4(), now64(6) FROM (` + rows + `)`)
	e.exec(`INSERT INTO hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT id, wm, 'peer', generateUUIDv4(), now64(6) - INTERVAL 10 MINUTE, now64(3) - INTERVAL 5 MINUTE FROM (` + rows + `)`)
	e.exec(`INSERT INTO hunt_state (hunt_id, status, consecutive_failures, last_error, last_fire, updated)
SELECT id, 'succeeded', 0, '', wm, now64(6) FROM (` + rows + `)`)
	hunts := make([]hunt.Hunt, n)
	for i := range hunts {
		hunts[i] = hunt.Hunt{ID: fmt.Sprintf("h%06d", i), Interval: 3600 * time.Second, Offset: sec(int64(i % 3600)), Query: eventsQuery}
	}
	set := testSet("x", hunts...)
	coord, err := lease.New(store.New(e.db.Conn, e.db.Name).Leases(), lease.Options{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	s := store.New(e.db.Conn, e.db.Name)
	pinned := func(time.Time) time.Time { return time.Unix(e.now, 0) }
	r, err := New(e.db.Conn, coord, s, func() *hunt.Set { return set },
		Options{Owner: "bench", Database: e.db.Name, MaxQueued: benchDue, ScheduleClock: pinned})
	if err != nil {
		b.Fatal(err)
	}
	r.runCtx = e.ctx
	holdRuns(b, r)
	var ticks, reads, fulls []time.Duration
	for range 3 {
		start := time.Now()
		full, err := s.Snapshot(e.ctx)
		fulls = append(fulls, time.Since(start))
		if err != nil || len(full.Hunts) != n {
			b.Fatalf("full snapshot of %d hunts: %v", len(full.Hunts), err)
		}
		r.memory.learn(full, set, pinned(full.Now)) // the ticks before this one
	}
	for range 5 {
		start := time.Now()
		part, err := s.SnapshotOf(e.ctx, func(now time.Time) []string { return r.memory.candidates(set, pinned(now), now) })
		reads = append(reads, time.Since(start))
		if err != nil || len(part.Hunts) != benchDue {
			b.Fatalf("SnapshotOf read %d hunts, want the %d due: %v", len(part.Hunts), benchDue, err)
		}
	}
	for i := range 3 {
		r.hb.skip() // the heartbeat is beside the tick, once per 30 s: not part of it
		before := chtest.Queries(b, e.db.URL)
		start := time.Now()
		if err := r.tick(e.ctx); err != nil {
			b.Fatal(err)
		}
		ticks = append(ticks, time.Since(start))
		if trips := chtest.Queries(b, e.db.URL) - before; i == 0 || trips < f.trips {
			f.trips = trips // the fewest: a connection the pool opens is counted too
		}
		if len(r.exec.queue) != benchDue {
			b.Fatalf("queued %d of %d", len(r.exec.queue), benchDue)
		}
		// Hand the fires back, so the next tick finds the same hunts due.
		var ls []lease.Lease
		for _, j := range r.exec.queue {
			j.endRenewal()
			ls = append(ls, j.currentLease())
			if latest := schedule.LatestFire(e.now, 3600, j.hunt.OffsetSeconds()); j.fire != latest {
				b.Fatalf("%s claimed fire %d, want %d", j.hunt.ID, j.fire, latest)
			}
		}
		r.releaseAll(ls)
		r.exec.mu.Lock()
		r.exec.queue, r.exec.held = nil, map[string]*job{}
		r.exec.mu.Unlock()
	}
	f.tick, f.read, f.full = median(ticks), median(reads), median(fulls)
	return f
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
