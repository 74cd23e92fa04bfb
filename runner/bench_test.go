package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// BenchmarkTick measures one tick (snapshot, plan, batched claim with the default 750 ms
// settle) with 1, 100 and 1,000 due hunts on a private chlocal, reporting the ClickHouse
// round trips it took (counted at chlocal's /chlocal/stats) and the time from tick start until
// every due fire was won and queued. Runs are held back so only the tick is measured.
func BenchmarkTick(b *testing.B) {
	e := newPrivateEnv(b)
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("due=%d", n), func(b *testing.B) {
			var trips int64
			for b.Loop() {
				b.StopTimer()
				e.exec("TRUNCATE TABLE hunt_lease")
				r := benchRunner(b, e, n)
				before := chtest.Queries(b, e.db.URL)
				b.StartTimer()
				if err := r.tick(e.ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				trips += chtest.Queries(b, e.db.URL) - before
				if len(r.exec.queue) != n {
					b.Fatalf("queued %d of %d", len(r.exec.queue), n)
				}
				for _, j := range r.exec.queue {
					j.stopRenewal()
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/tick")
		})
	}
}

// BenchmarkClaimOneByOne claims fires one at a time, a settle each, as the earlier runner did;
// compare ns/fire with BenchmarkTick/due=1000's ns/op ÷ 1000.
func BenchmarkClaimOneByOne(b *testing.B) {
	e := newPrivateEnv(b)
	coord, err := lease.New(store.New(e.db.Conn, e.db.Name).Leases(), lease.Options{Owner: "one-by-one"})
	if err != nil {
		b.Fatal(err)
	}
	const perOp = 5
	var i int
	for b.Loop() {
		for range perOp {
			i++
			res, err := coord.Claim(e.ctx, []lease.Fire{{HuntID: fmt.Sprintf("h%06d", i), Fire: e.now - 60}})
			if err != nil || len(res.Won) != 1 {
				b.Fatalf("claim: %v %+v", err, res)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perOp), "ns/fire")
}

func benchRunner(b *testing.B, e *env, n int) *Runner {
	var hunts []hunt.Hunt
	for i := range n {
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("h%04d", i), Interval: 3600 * time.Second, Offset: sec(int64(i % 3600)), Query: eventsQuery})
	}
	coord, err := lease.New(store.New(e.db.Conn, e.db.Name).Leases(), lease.Options{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	set := testSet("x", hunts...)
	r, err := New(e.db.Conn, coord, store.New(e.db.Conn, e.db.Name), func() *hunt.Set { return set },
		Options{Owner: "bench", Database: e.db.Name, MaxQueued: n})
	if err != nil {
		b.Fatal(err)
	}
	r.runCtx = e.ctx
	holdRuns(b, r)
	return r
}

// BenchmarkMemory loads 1,000, 10,000 and 100,000 hunt files through configsrc as `run`
// does, converts them for the runner, and ticks twice on its memory: a first tick that reads
// every hunt (a snapshot holding state for all of them, learnt and planned), then a steady
// tick that read nothing new. It reports the live heap (after GC) this adds with the first
// tick's snapshot still held (its peak) and after the steady tick, when the runner holds the
// set, its memory and the last plan: what a pod keeps.
func BenchmarkMemory(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("hunts=%d", n), func(b *testing.B) { benchMemory(b, n) })
	}
}

func benchMemory(b *testing.B, n int) {
	dir := b.TempDir()
	for i := range n {
		body := fmt.Sprintf("id: hunt-%06d\ninterval: %dm\nseverity: medium\nlabels: {team: secops, tier: t%d}\n"+
			"description: generated hunt number %d for the memory benchmark\nquery: |\n"+
			"  SELECT src_ip, count() AS failures, uniqExact(user) AS users\n  FROM sample.auth_events\n"+
			"  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"+
			"    AND outcome = 'failure' AND user != 'svc-%d'\n  GROUP BY src_ip HAVING failures > 20\n", i, 1+i%60, i%5, i, i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("hunt-%06d.yaml", i)), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var first, steady uint64
	for b.Loop() {
		before := liveHeap()
		src, err := configsrc.NewDir(dir, configsrc.Options{Settle: -1})
		if err != nil {
			b.Fatal(err)
		}
		loader := configsrc.NewLoader(src, time.Minute, nil)
		set, _, err := loader.Load(context.Background())
		if err != nil || len(set.Hunts) != n {
			b.Fatalf("loaded %d hunts: %v", len(set.Hunts), err)
		}
		adapter := hs(set)
		now := time.Unix(1_800_000_000, 0)
		snap := store.Snapshot{Now: now, Hunts: make(map[string]store.HuntState, n)}
		for i, h := range adapter.Hunts {
			snap.Hunts[h.ID] = store.HuntState{Watermark: 1_800_000_000 - int64(i%7)*60, HasWatermark: true,
				Status: "succeeded", LeaseOwner: "pod-a", HasLease: true, LeaseUntil: time.Unix(1_799_999_000, 0)}
		}
		m, p := newMemory(), newPlanner(5*time.Second)
		tick := func(snap store.Snapshot) plan {
			if c := m.candidates(adapter, now, now); len(snap.Hunts) == n && len(c) != n {
				b.Fatalf("first tick: %d candidates of %d", len(c), n)
			}
			m.learn(snap, adapter, now)
			return p.planOn(now, m.view(snap), adapter, m.attention(snap, adapter), now, nil)
		}
		firstPlan := tick(snap)
		first = liveHeap() - before
		runtime.KeepAlive(snap)
		runtime.KeepAlive(firstPlan)
		pl := tick(store.Snapshot{Now: now})
		steady = liveHeap() - before
		runtime.KeepAlive(loader)
		runtime.KeepAlive(adapter)
		runtime.KeepAlive(m)
		runtime.KeepAlive(pl)
	}
	b.ReportMetric(float64(first)/(1<<20), "MiB-first-tick")
	b.ReportMetric(float64(steady)/(1<<20), "MiB-live")
}

// hs is the runner's view of a loaded set, as cmd/hunt-runner hands it over.
func hs(s *configsrc.Set) *hunt.Set { return &s.Set }

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// trivialQuery finds one row per run: the cost of a run is then the runner's, not the hunt's.
const trivialQuery = "SELECT 1 AS x WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"

// BenchmarkThroughput compares, side by side on one private engine, the fires per second one
// runner with default flags commits (every hunt due every second, so demand exceeds supply)
// with the engine's own limit for the same statements: a fire's hunt query, findings insert,
// and commit (the compare-and-set and its read-back; a commit spends the lease, there is no
// release) issued back to back from --concurrency goroutines with no coordination at all. The ratio is the share of the engine the runner
// turns into committed fires. It then runs 150 hunts of 5–9 s intervals, the load, and
// reports how many fell more than two intervals behind.
func BenchmarkThroughput(b *testing.B) {
	const window = 20 * time.Second
	e := newPrivateEnv(b)
	var runnerRate, engineRate, batchedRate float64
	var cpuPerFire time.Duration
	var behind int
	for b.Loop() {
		engineRate = engineLimit(b, e, "limit", DefaultConcurrency, 1, window)
		batchedRate = engineLimit(b, e, "batched", DefaultConcurrency, limitBatch, window)
		runnerRate, cpuPerFire = runnerThroughput(b, e, 150, func(i int) int64 { return 1 }, window)
		behind = huntsBehind(b, e, 150, func(i int) int64 { return int64(5 + i%5) }, 2*window)
	}
	b.ReportMetric(engineRate, "engine-fires/s")
	b.ReportMetric(batchedRate, "engine-batch8-fires/s")
	b.ReportMetric(batchedRate/engineRate, "x-engine-batch8")
	b.ReportMetric(runnerRate, "runner-fires/s")
	b.ReportMetric(runnerRate/engineRate, "runner/engine")
	b.ReportMetric(runnerRate/batchedRate, "runner/engine-batch8")
	b.ReportMetric(float64(cpuPerFire.Microseconds())/1000, "runner-cpu-ms/fire")
	b.ReportMetric(float64(behind), "hunts-behind-2-intervals")
}

// limitBatch is how many fires one goroutine of the batched engine limit commits together.
const limitBatch = 8

// engineLimit issues a fire's statements back to back from n goroutines for d and returns
// the fires per second: the hunt query, the findings insert and the real commit
// (store.Store.AdvanceAll: the compare-and-set and its read-back) of every batch fires, under
// leases written before the clock starts (hunts named after name).
func engineLimit(b *testing.B, e *env, name string, n, batch int, d time.Duration) float64 {
	r := benchRunner(b, e, 0)
	h := &hunt.Hunt{ID: name, Interval: 1 * time.Second, Query: trivialQuery}
	wm := store.New(e.db.Conn, e.db.Name)
	const perGoroutine = 2_000 // more fires than a goroutine commits in d (about 500 at 100 fires/s)
	claim := uuid.New()
	e.exec(fmt.Sprintf(`INSERT INTO hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT concat('%[5]s-', toString(intDiv(number, %[1]d)), '-', toString(number %% %[1]d)), toDateTime(%[2]d, 'UTC'),
       'limit', toUUID('%[3]s'), now64(6), now64(3) + INTERVAL 1 HOUR
FROM numbers(%[4]d)`, perGoroutine, e.now, claim, n*perGoroutine, name))
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			var commits []store.Commit
			for i := 0; ctx.Err() == nil && i < perGoroutine; i++ {
				l := lease.Lease{HuntID: fmt.Sprintf("%s-%d-%d", name, g, i), Fire: e.now, ClaimID: claim}
				run := store.Run{HuntID: l.HuntID, Fire: e.now, RunID: uuid.New(), Owner: "limit",
					WindowStart: e.now - 1, WindowEnd: e.now, Started: time.Now()}
				w := window{Span: schedule.Span{Start: e.now - 1, End: e.now}, DataStart: time.Unix(e.now-1, 0), DataEnd: time.Unix(e.now, 0)}
				f, err := r.query(ctx, h, e.now, run.RunID, w, attrib.Live)
				if err == nil {
					err = r.storeFindings(ctx, h, e.now, run.RunID, f.docs, attrib.Live)
				}
				if err != nil {
					continue
				}
				if commits = append(commits, store.Commit{Lease: l, Run: run}); len(commits) < batch {
					continue
				}
				for _, err := range wm.AdvanceAll(ctx, commits) {
					if err == nil {
						done.Add(1)
					}
				}
				commits = commits[:0]
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds()
}

// startRunner runs a runner with default options over n hunts of the given intervals and
// trivial queries until the returned stop function is called.
func startRunner(b *testing.B, e *env, n int, interval func(int) int64) (ids map[string]int, stop func()) {
	e.exec("TRUNCATE TABLE hunt_lease")
	var hunts []hunt.Hunt
	ids = map[string]int{}
	run := time.Now().UnixNano()
	for i := range n {
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("tp%04d-%d", i, run), Interval: sec(interval(i)), Offset: sec(int64(i) % interval(i)), Query: trivialQuery})
		ids[hunts[i].ID] = i
	}
	coord, err := lease.New(store.New(e.db.Conn, e.db.Name).Leases(), lease.Options{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	set := testSet("x", hunts...)
	opts := Options{Owner: "bench", Database: e.db.Name}
	if os.Getenv("BENCH_LOG") != "" { // the runner's debug log, to see why a figure moved
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r, err := New(e.db.Conn, coord, store.New(e.db.Conn, e.db.Name), func() *hunt.Set { return set }, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Start(ctx) }()
	return ids, func() { cancel(); <-done }
}

// runnerThroughput returns the commits per second of one default runner over d, and the CPU
// time this process (the runner; the engine is chlocal's process) spent per commit.
func runnerThroughput(b *testing.B, e *env, n int, interval func(int) int64, d time.Duration) (float64, time.Duration) {
	before := e.count("SELECT count() FROM hunt_watermark")
	cpu := processCPU()
	_, stop := startRunner(b, e, n, interval)
	time.Sleep(d)
	stop()
	cpu = processCPU() - cpu
	fires := e.count("SELECT count() FROM hunt_watermark") - before
	return float64(fires) / d.Seconds(), cpu / time.Duration(max(fires, 1))
}

// huntsBehind runs one default runner over n hunts for d and returns how many hunts were then
// more than two intervals behind their latest fire.
func huntsBehind(b *testing.B, e *env, n int, interval func(int) int64, d time.Duration) int {
	ids, stop := startRunner(b, e, n, interval)
	time.Sleep(d)
	snap, err := store.New(e.db.Conn, e.db.Name).Snapshot(e.ctx)
	stop()
	if err != nil {
		b.Fatal(err)
	}
	behind := 0
	for id, i := range ids {
		st := snap.Hunts[id]
		iv := interval(i)
		if latest := schedule.LatestFire(snap.Now.Unix(), iv, int64(i)%iv); !st.HasWatermark || latest-st.Watermark > 2*iv {
			behind++
		}
	}
	return behind
}

// BenchmarkLateAcknowledgements runs two default runners over 16 hunts of 5–8 s for a minute on
// an engine that answers 40% of INSERTs 450 ms late (rows landed, answers slow; settle 300 ms),
// and again with no fault, side by side, and reports the longest any hunt went without a commit
// in each. A late claim costs its hunt the provisional lease (3 s here), not the 20 s lease.
func BenchmarkLateAcknowledgements(b *testing.B) {
	const window = time.Minute
	var clean, late float64
	for b.Loop() {
		clean = longestWithoutCommit(b, nil, window)
		late = longestWithoutCommit(b, []ctl.FaultRule{{Name: "late-insert", Kind: ctl.KindInsert, Probability: 0.4,
			Effect: ctl.DelayAnswer, Delay: 450 * time.Millisecond}}, window)
	}
	b.ReportMetric(clean, "clean-max-s-without-commit")
	b.ReportMetric(late, "late-acks-max-s-without-commit")
	b.ReportMetric(late/clean, "late/clean")
}

// longestWithoutCommit runs two runners for d on a fresh private engine with the given faults
// and returns the longest gap, in seconds, between consecutive commits of any hunt (counting
// from the start and up to the end).
func longestWithoutCommit(b *testing.B, faults []ctl.FaultRule, d time.Duration) float64 {
	e := newPrivateEnv(b)
	if len(faults) > 0 {
		e.srv.SetFaults(b, faults...)
	}
	var hunts []hunt.Hunt
	for i := range 16 {
		iv := int64(5 + i%4)
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("late%02d", i), Interval: sec(iv), Offset: sec(int64(i) % iv), Query: trivialQuery})
	}
	set := testSet("x", hunts...)
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for _, owner := range []string{"pod-a", "pod-b"} {
		coord, err := lease.New(store.New(e.db.Conn, e.db.Name).Leases(), lease.Options{Owner: owner, Lease: 20 * time.Second, Settle: 300 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		r, err := New(e.db.Conn, coord, store.New(e.db.Conn, e.db.Name), func() *hunt.Set { return set },
			Options{Owner: owner, Database: e.db.Name, Lease: 20 * time.Second, Settle: 300 * time.Millisecond, Tick: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = r.Start(ctx) })
	}
	time.Sleep(d)
	cancel()
	wg.Wait()
	if len(faults) > 0 {
		e.srv.ClearFaults(b)
	}
	longest := 0.0
	for _, h := range hunts {
		rows, err := e.db.Conn.Query(e.ctx, "SELECT updated FROM hunt_watermark WHERE hunt_id = ? ORDER BY updated", h.ID)
		if err != nil {
			b.Fatal(err)
		}
		prev := start
		for rows.Next() {
			var t time.Time
			if err := rows.Scan(&t); err != nil {
				b.Fatal(err)
			}
			longest = max(longest, t.Sub(prev).Seconds())
			prev = t
		}
		rows.Close()
		longest = max(longest, start.Add(d).Sub(prev).Seconds())
	}
	return longest
}
