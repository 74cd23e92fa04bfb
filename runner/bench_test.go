package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/watermark"
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
				if len(r.queue) != n {
					b.Fatalf("queued %d of %d", len(r.queue), n)
				}
				for _, j := range r.queue {
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
	coord, err := lease.New(e.db.Conn, lease.Options{Owner: "one-by-one", Database: e.db.Name})
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
	var hunts []Hunt
	for i := range n {
		hunts = append(hunts, Hunt{ID: fmt.Sprintf("h%04d", i), Interval: 3600, Offset: int64(i % 3600), Query: eventsQuery})
	}
	coord, err := lease.New(e.db.Conn, lease.Options{Owner: "bench", Database: e.db.Name})
	if err != nil {
		b.Fatal(err)
	}
	set := &HuntSet{Hash: "x", Hunts: hunts}
	r, err := New(e.db.Conn, coord, watermark.New(e.db.Conn, e.db.Name), func() *HuntSet { return set },
		Options{Owner: "bench", Database: e.db.Name, MaxQueued: n})
	if err != nil {
		b.Fatal(err)
	}
	r.runCtx = e.ctx
	r.holdRuns = true
	return r
}

// BenchmarkMemory10kHunts loads 10,000 hunt files through configsrc as `run` does, converts
// them for the runner and plans a tick over a snapshot holding state for all of them, then
// reports the live heap that this adds (after GC).
func BenchmarkMemory10kHunts(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	for i := range n {
		body := fmt.Sprintf("id: hunt-%05d\ninterval: %dm\nseverity: medium\nlabels: {team: secops, tier: t%d}\n"+
			"description: generated hunt number %d for the memory benchmark\nquery: |\n"+
			"  SELECT src_ip, count() AS failures, uniqExact(user) AS users\n  FROM sample.auth_events\n"+
			"  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"+
			"    AND outcome = 'failure' AND user != 'svc-%d'\n  GROUP BY src_ip HAVING failures > 20\n", i, 1+i%60, i%5, i, i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("hunt-%05d.yaml", i)), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var heap uint64
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
		snap := watermark.Snapshot{Now: time.Unix(1_800_000_000, 0), Hunts: make(map[string]watermark.HuntState, n)}
		for i, h := range adapter.Hunts {
			snap.Hunts[h.ID] = watermark.HuntState{Watermark: 1_800_000_000 - int64(i%7)*60, HasWatermark: true,
				Status: "succeeded", LeaseOwner: "pod-a", HasLease: true, LeaseUntil: time.Unix(1_799_999_000, 0)}
		}
		p := newPlanner(5 * time.Second)
		pl := p.plan(snap, adapter, time.Now(), nil)
		after := liveHeap()
		heap = after - before
		runtime.KeepAlive(loader)
		runtime.KeepAlive(adapter)
		runtime.KeepAlive(snap)
		runtime.KeepAlive(pl)
	}
	b.ReportMetric(float64(heap)/(1<<20), "MiB-live")
}

// hs converts a configsrc set the way cmd/hunt-runner's adapter does.
func hs(s *configsrc.Set) *HuntSet {
	out := &HuntSet{Hash: s.Hash}
	for _, h := range s.Hunts {
		out.Hunts = append(out.Hunts, Hunt{ID: h.ID, Interval: int64(h.Interval / time.Second), Offset: int64(h.Offset / time.Second),
			Delay: h.Delay, MaxCatchup: h.MaxCatchup, Timeout: h.Timeout, Query: h.Query, Severity: h.Severity, Labels: h.Labels})
	}
	return out
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
