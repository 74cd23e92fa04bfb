package runner

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store"
)

// slowFindings makes every run slow on the client, while it holds its lease: the findings
// insert waits, counting how many runs are inside it at once. (A slow query would hold the
// engine, which serves one statement at a time, and stall every claim with it.)
type slowFindings struct {
	StateStore
	wait time.Duration

	mu        sync.Mutex
	now, peak int
	runs      int
}

func (s *slowFindings) InsertFindings(ctx context.Context, f store.Findings) error {
	s.mu.Lock()
	s.now++
	s.runs++
	s.peak = max(s.peak, s.now)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}()
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return s.StateStore.InsertFindings(ctx, f)
}

// keptLeasesSQL counts, on the server, the keys whose newest lease row is live, not spent, and
// kept: extended or renewed to the whole lease (6 s here), not a provisional claim row (4 s)
// still being decided, which a claim over the cap releases unrun. Written here independently
// of store.Leases.Running, which the cap itself uses.
const keptLeasesSQL = `SELECT count() FROM (SELECT hunt_id, argMax((lease_until, fire, claimed), (claimed, claim_id)) AS t FROM hunt_lease GROUP BY hunt_id) AS l
LEFT JOIN (SELECT hunt_id, max(watermark) AS wm FROM hunt_watermark GROUP BY hunt_id) AS w ON w.hunt_id = l.hunt_id
WHERE t.1 > now64(3) AND t.2 > w.wm AND t.1 > t.3 + INTERVAL 5 SECOND`

// Two runners, cap 2, eight slow due hunts: every fire runs, and at no instant do more than
// two runs (or two kept leases of the set, polled on the table while they run) exist across
// both, though each runner alone has room for four.
func TestCapHoldsAcrossRunners(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	e := newEnv(t)
	var hunts []hunt.Hunt
	for i := range 8 {
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("slow%d", i), Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery})
	}
	set := testSet("x", hunts...)
	slow := &slowFindings{StateStore: e.store(), wait: 1500 * time.Millisecond}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, owner := range []string{"pod-a", "pod-b"} {
		opts := Options{Owner: owner, Database: e.db.Name, Tick: 200 * time.Millisecond, Lease: 6 * time.Second, Concurrency: 4,
			Logger: testLogger(t), Settle: 400 * time.Millisecond, Cap: 2, ScheduleClock: func(time.Time) time.Time { return time.Unix(e.now, 0) }}
		coord, err := lease.New(e.store().Leases(), lease.Options{Owner: owner, Lease: opts.Lease, Settle: opts.Settle})
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(e.db.Conn, coord, slow, func() *hunt.Set { return set }, opts)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := r.Start(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	qctx := clickhouse.Context(e.ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	maxLive := uint64(0)
	done := chtest.Poll(2*time.Minute, func() bool {
		var live uint64
		if err := e.db.Conn.QueryRow(qctx, keptLeasesSQL).Scan(&live); err != nil {
			t.Errorf("poll live leases: %v", err)
			return true
		}
		maxLive = max(maxLive, live)
		return e.count("SELECT uniqExact(hunt_id) FROM hunt_watermark") == 8
	})
	cancel()
	wg.Wait()
	if !done {
		t.Fatalf("%d of 8 hunts committed", e.count("SELECT uniqExact(hunt_id) FROM hunt_watermark"))
	}
	slow.mu.Lock()
	defer slow.mu.Unlock()
	t.Logf("runs %d, at most %d at once, at most %d kept leases seen on the table", slow.runs, slow.peak, maxLive)
	if slow.peak > 2 || maxLive > 2 {
		t.Fatalf("%d runs at once, %d kept leases: over the cap of 2", slow.peak, maxLive)
	}
	if slow.peak < 2 {
		t.Fatalf("at most %d run at once: the cap was never reached, so it was not tested", slow.peak)
	}
}

// The plan's share of the cap: the set's live leases, its hunts' and their backfills', take
// room; a spent lease, an expired one and another set's hunt do not.
func TestCapPlanCountsTheSetsLiveLeases(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	live := now.Add(time.Minute)
	set := testSet("x", hunt.Hunt{ID: "a", Interval: time.Hour}, hunt.Hunt{ID: "b", Interval: time.Hour},
		hunt.Hunt{ID: "c", Interval: time.Hour}, hunt.Hunt{ID: "d", Interval: time.Hour})
	snap := store.Snapshot{Now: now, Hunts: map[string]store.HuntState{
		"a":     {HasLease: true, LeaseFire: 100, LeaseUntil: live},                                     // held
		"b":     {HasLease: true, LeaseFire: 100, LeaseUntil: live, HasWatermark: true, Watermark: 100}, // spent
		"c":     {HasLease: true, LeaseFire: 100, LeaseUntil: now.Add(-time.Second)},                    // expired
		"other": {HasLease: true, LeaseFire: 100, LeaseUntil: live},                                     // not this set's
	}, Backfills: []store.Backfill{{ID: "1", HuntID: "d", Progress: store.HuntState{HasLease: true, LeaseFire: 100, LeaseUntil: live}}}}
	due := []dueFire{{Fire: 1}, {Fire: 2}, {Fire: 3}}
	for _, tc := range []struct{ cap, want int }{{0, 3}, {1, 0}, {2, 0}, {3, 1}, {4, 2}, {9, 3}} {
		r := &Runner{opts: Options{Cap: tc.cap}, log: testLogger(t)}
		if got := r.capDue(context.Background(), snap, set, due); len(got) != tc.want {
			t.Errorf("cap %d: %d of 3 due fires kept, want %d (a and d's backfill hold two)", tc.cap, len(got), tc.want)
		}
	}
}
