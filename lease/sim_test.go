package lease

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
)

// The simulation drives the real claim protocol (protocol.claim) against an in-memory store
// that behaves like a replicated ReplacingMergeTree behind a load balancer:
//
//   - every query lands on a random replica and sees a row only once that replica has it:
//     commit time + lag(origin replica → reading replica), 0 on the origin itself;
//   - each replica has its own clock (skew), used for claimed, lease_until and "now";
//   - the conditional claim insert checks freeness on its replica, then takes a while to
//     commit (the insert duration), then the acknowledgement takes a random time to come
//     back, so acknowledgements arrive reordered and sometimes later than the settle;
//   - winners run the fire, write its findings into an idempotent set keyed by
//     (hunt, fire, finding_id), advance the watermark (fenced on the replica they reach) and
//     release (fenced).
//
// All waiting is virtual (testing/synctest), so thousands of scenarios take seconds.
//
// The visibility lag L of a scenario is measured from a claim's server-side freeness check to
// the moment every replica sees its row: insert duration + replication lag. DESIGN.md §4
// derives that two claims can both win only if L ≥ settle/2.

const (
	simSettle = 750 * time.Millisecond
	simLease  = 5 * time.Minute
	simFire   = int64(946684800) // synctest's clock starts at 2000-01-01T00:00:00Z
)

type simParams struct {
	replicas  int
	skew      []time.Duration   // per replica clock offset
	lag       [][]time.Duration // lag[origin][reader]
	insertMax time.Duration     // check → commit
	netMax    time.Duration     // each way, per query
	ackMax    time.Duration     // commit → acknowledgement
	claimers  int
	hunts     int
	rounds    int
	staleRow  bool // an expired lease row from a dead pod exists before the scenario
}

func (p simParams) String() string {
	var maxLag time.Duration
	for _, row := range p.lag {
		for _, l := range row {
			maxLag = max(maxLag, l)
		}
	}
	return fmt.Sprintf("replicas=%d claimers=%d hunts=%d rounds=%d insert≤%s replication≤%s ack≤%s skew=%v",
		p.replicas, p.claimers, p.hunts, p.rounds, p.insertMax, maxLag, p.ackMax, p.skew)
}

// visibility is the scenario's worst visibility lag L.
func (p simParams) visibility() time.Duration {
	var maxLag time.Duration
	for _, row := range p.lag {
		for _, l := range row {
			maxLag = max(maxLag, l)
		}
	}
	return p.insertMax + maxLag
}

// genParams draws a scenario whose visibility lag L is below lMax (and at least lMin).
func genParams(rng *rand.Rand, lMin, lMax time.Duration) simParams {
	p := simParams{
		replicas: 1 + rng.IntN(3),
		claimers: 2 + rng.IntN(4),
		hunts:    1 + rng.IntN(3),
		rounds:   1 + rng.IntN(3),
		netMax:   time.Duration(rng.Int64N(int64(100 * time.Millisecond))),
		ackMax:   time.Duration(rng.Int64N(int64(simSettle * 6 / 5))),
		staleRow: rng.IntN(2) == 0,
	}
	l := lMin + time.Duration(rng.Int64N(int64(lMax-lMin)))
	// Split L between the insert duration and replication lag.
	p.insertMax = time.Duration(rng.Float64() * float64(l))
	replication := l - p.insertMax
	if p.replicas == 1 {
		p.insertMax = l
		replication = 0
	}
	p.skew = make([]time.Duration, p.replicas)
	p.lag = make([][]time.Duration, p.replicas)
	for i := range p.replicas {
		p.skew[i] = time.Duration(rng.Int64N(int64(400*time.Millisecond))) - 200*time.Millisecond
		p.lag[i] = make([]time.Duration, p.replicas)
		for j := range p.replicas {
			if i != j {
				p.lag[i][j] = time.Duration(rng.Float64() * float64(replication))
			}
		}
	}
	return p
}

type simRow struct {
	Row
	origin int
	commit time.Time
}

type simWatermark struct {
	hunt    string
	wm      int64
	claimID uuid.UUID
	updated time.Time
	origin  int
	commit  time.Time
}

// simWorld is the replicated store shared by every claimer of a scenario.
type simWorld struct {
	p          simParams
	mu         sync.Mutex
	leases     []simRow
	watermarks []simWatermark
	inserted   int // claim rows that landed
}

func (w *simWorld) visible(origin int, commit time.Time, replica int, at time.Time) bool {
	return !at.Before(commit.Add(w.p.lag[origin][replica]))
}

// clock is replica r's reading of the (virtual) real time at.
func (w *simWorld) clock(r int, at time.Time) time.Time { return at.Add(w.p.skew[r]) }

// newestLease is the newest lease row of hunt visible on replica r at time at. Caller holds mu.
func (w *simWorld) newestLease(hunt string, r int, at time.Time) (Row, bool) {
	var best Row
	found := false
	for _, row := range w.leases {
		if row.HuntID != hunt || !w.visible(row.origin, row.commit, r, at) {
			continue
		}
		if !found || Newer(row.Row, best) {
			best, found = row.Row, true
		}
	}
	return best, found
}

// newestWatermark: newest by updated, visible on r at at. Caller holds mu.
func (w *simWorld) newestWatermark(hunt string, r int, at time.Time) (simWatermark, bool) {
	var best simWatermark
	found := false
	for _, m := range w.watermarks {
		if m.hunt != hunt || !w.visible(m.origin, m.commit, r, at) {
			continue
		}
		if !found || m.updated.After(best.updated) {
			best, found = m, true
		}
	}
	return best, found
}

// simClient is one claimer's connection: its own random source for latencies and replica
// choice, so a scenario replays from its seed.
type simClient struct {
	w   *simWorld
	rng *rand.Rand
}

func (c *simClient) net() { time.Sleep(time.Duration(c.rng.Int64N(int64(c.w.p.netMax) + 1))) }

func (c *simClient) replica() int { return c.rng.IntN(c.w.p.replicas) }

func (c *simClient) Read(ctx context.Context, hunts []string) (View, error) {
	c.net()
	r := c.replica()
	at := time.Now()
	v := View{Now: c.w.clock(r, at), Leases: map[string]Row{}, Watermarks: map[string]int64{}}
	c.w.mu.Lock()
	for _, h := range hunts {
		if l, ok := c.w.newestLease(h, r, at); ok {
			v.Leases[h] = l
		}
		if m, ok := c.w.newestWatermark(h, r, at); ok {
			v.Watermarks[h] = m.wm
		}
	}
	c.w.mu.Unlock()
	c.net()
	return v, nil
}

func (c *simClient) InsertClaims(ctx context.Context, claims []Row, lease time.Duration) error {
	c.net()
	r := c.replica()
	check := time.Now()
	now := c.w.clock(r, check)
	var rows []Row
	c.w.mu.Lock()
	for _, cl := range claims {
		if l, ok := c.w.newestLease(cl.HuntID, r, check); ok && l.Until.After(now) {
			continue
		}
		if m, ok := c.w.newestWatermark(cl.HuntID, r, check); ok && m.wm >= cl.Fire {
			continue
		}
		cl.Claimed, cl.Until = now, now.Add(lease)
		rows = append(rows, cl)
	}
	c.w.mu.Unlock()
	time.Sleep(time.Duration(c.rng.Int64N(int64(c.w.p.insertMax) + 1)))
	c.w.mu.Lock()
	commit := time.Now()
	for _, row := range rows {
		c.w.leases = append(c.w.leases, simRow{Row: row, origin: r, commit: commit})
	}
	c.w.inserted += len(rows)
	c.w.mu.Unlock()
	time.Sleep(time.Duration(c.rng.Int64N(int64(c.w.p.ackMax) + 1)))
	return nil
}

func (c *simClient) Release(ctx context.Context, leases []Lease) error {
	c.net()
	r := c.replica()
	c.w.mu.Lock()
	at := time.Now()
	now := c.w.clock(r, at)
	for _, l := range leases {
		if cur, ok := c.w.newestLease(l.HuntID, r, at); ok && cur.ClaimID == l.ClaimID {
			cur.Claimed, cur.Until = now, now
			c.w.leases = append(c.w.leases, simRow{Row: cur, origin: r, commit: at})
		}
	}
	c.w.mu.Unlock()
	c.net()
	return nil
}

// advance is watermark.Store.Advance's server-side rule: write only while the newest lease
// row on the replica reached is ours, for this fire, and live.
func (c *simClient) advance(l Lease) bool {
	c.net()
	r := c.replica()
	c.w.mu.Lock()
	at := time.Now()
	now := c.w.clock(r, at)
	cur, ok := c.w.newestLease(l.HuntID, r, at)
	wrote := ok && cur.ClaimID == l.ClaimID && cur.Fire == l.Fire && cur.Until.After(now)
	if wrote {
		c.w.watermarks = append(c.w.watermarks, simWatermark{hunt: l.HuntID, wm: l.Fire, claimID: l.ClaimID, updated: now, origin: r, commit: at})
	}
	c.w.mu.Unlock()
	c.net()
	return wrote
}

// findings is the idempotent output model: hunt_findings is a ReplacingMergeTree keyed by
// (hunt_id, fire, finding_id) with finding_id a hash of the row's content, so the set of keys
// is what a reader sees after merges (or with FINAL).
type findings struct {
	mu     sync.Mutex
	unique map[string]bool
	raw    int // rows inserted, as a plain MergeTree would keep them
}

func findingsOf(hunt string, fire int64) []string {
	out := make([]string, 3)
	for i := range out {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s|%d|event-%d", hunt, fire, i)
		out[i] = fmt.Sprintf("%s|%d|%x", hunt, fire, h.Sum64())
	}
	return out
}

func (f *findings) insert(hunt string, fire int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range findingsOf(hunt, fire) {
		f.unique[k] = true
		f.raw++
	}
}

type simOutcome struct {
	wins       map[string]int // per hunt (one fire per scenario)
	raced      bool           // at least two claim rows for one hunt landed
	advances   map[string]int
	watermarks map[string]int64
	findings   *findings
}

// runScenario plays one scenario to the end inside a synctest bubble.
func runScenario(t *testing.T, seed uint64, p simParams) simOutcome {
	out := simOutcome{wins: map[string]int{}, advances: map[string]int{}, watermarks: map[string]int64{},
		findings: &findings{unique: map[string]bool{}}}
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{p: p}
		start := time.Now()
		hunts := make([]Fire, p.hunts)
		for i := range hunts {
			hunts[i] = Fire{HuntID: fmt.Sprintf("hunt-%d", i), Fire: simFire}
			w.watermarks = append(w.watermarks, simWatermark{hunt: hunts[i].HuntID, wm: simFire - 60,
				updated: start.Add(-time.Hour), commit: start.Add(-time.Hour)})
			if p.staleRow {
				w.leases = append(w.leases, simRow{Row: Row{HuntID: hunts[i].HuntID, Fire: simFire - 60, Owner: "dead-pod",
					ClaimID: uuid.New(), Claimed: start.Add(-10 * time.Minute), Until: start.Add(-5 * time.Minute)},
					commit: start.Add(-10 * time.Minute)})
			}
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range p.claimers {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			client := &simClient{w: w, rng: rng}
			proto := &protocol{store: client, owner: fmt.Sprintf("pod-%d", i), lease: simLease, settle: simSettle,
				log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				newID: func() uuid.UUID {
					var id uuid.UUID
					for j := range id {
						id[j] = byte(rng.UintN(256))
					}
					return id
				}}
			wg.Go(func() {
				for range p.rounds {
					time.Sleep(time.Duration(rng.Int64N(int64(2 * simSettle))))
					res, err := proto.claim(context.Background(), hunts)
					if err != nil {
						t.Errorf("claim: %v", err)
						return
					}
					for _, l := range res.Won {
						mu.Lock()
						out.wins[l.HuntID]++
						mu.Unlock()
						time.Sleep(time.Duration(rng.Int64N(int64(2 * simSettle)))) // the run
						out.findings.insert(l.HuntID, l.Fire)
						if client.advance(l) {
							mu.Lock()
							out.advances[l.HuntID]++
							mu.Unlock()
						}
						if err := client.Release(context.Background(), []Lease{l}); err != nil {
							t.Errorf("release: %v", err)
						}
					}
				}
			})
		}
		wg.Wait()
		end := time.Now().Add(time.Hour) // everything replicated by then
		w.mu.Lock()
		defer w.mu.Unlock()
		claimRows := map[string]int{}
		for _, row := range w.leases {
			if row.Fire == simFire && row.Claimed.Equal(row.Until.Add(-simLease)) {
				claimRows[row.HuntID]++
			}
		}
		for _, h := range hunts {
			if m, ok := w.newestWatermark(h.HuntID, 0, end); ok {
				out.watermarks[h.HuntID] = m.wm
			}
			if claimRows[h.HuntID] > 1 {
				out.raced = true
			}
		}
	})
	return out
}

// TestSimulationNoDoubleWinBelowBound: thousands of seeded scenarios with visibility lag below
// settle/2 never produce two winners for one (hunt, fire).
func TestSimulationNoDoubleWinBelowBound(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 300
	}
	var scenarios, fires, won, raced int
	for i := range n {
		seed := uint64(i)
		p := genParams(rand.New(rand.NewPCG(seed, 0xC1A1)), 0, simSettle/2)
		if p.visibility() >= simSettle/2 {
			t.Fatalf("generator: seed %d has L=%s", seed, p.visibility())
		}
		out := runScenario(t, seed, p)
		scenarios++
		if out.raced {
			raced++
		}
		for h := 0; h < p.hunts; h++ {
			hunt := fmt.Sprintf("hunt-%d", h)
			fires++
			switch n := out.wins[hunt]; {
			case n > 1:
				t.Fatalf("seed %d: %s won %d times with L=%s < settle/2 (%s)", seed, hunt, n, p.visibility(), p)
			case n == 1:
				won++
				if out.advances[hunt] != 1 || out.watermarks[hunt] != simFire {
					t.Fatalf("seed %d: %s won once but advances=%d watermark=%d (%s)", seed, hunt, out.advances[hunt], out.watermarks[hunt], p)
				}
			}
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d scenarios, %d fires: %d won exactly once, %d never won (all claims late or lost); %d scenarios raced (≥2 claim rows landed for one hunt)",
		scenarios, fires, won, fires-won, raced)
	// The property must not hold vacuously: most fires get a winner, and many scenarios race.
	if won < fires*3/4 {
		t.Fatalf("only %d of %d fires won: the simulation is not exercising the protocol", won, fires)
	}
	if raced < scenarios/10 {
		t.Fatalf("only %d of %d scenarios raced", raced, scenarios)
	}
}

// TestSimulationDoublesBeyondBoundAreAbsorbed: with visibility lag beyond settle/2 the
// simulation finds double wins; the idempotent findings set and the fenced watermark absorb
// them (the unique output per (hunt, fire) is exactly one clean run's).
func TestSimulationDoublesBeyondBoundAreAbsorbed(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 300
	}
	var doubles, fires, dupRows, fenced int
	for i := range n {
		seed := uint64(1_000_000 + i)
		p := genParams(rand.New(rand.NewPCG(seed, 0xBAD)), simSettle/2, 3*simSettle)
		out := runScenario(t, seed, p)
		for h := 0; h < p.hunts; h++ {
			hunt := fmt.Sprintf("hunt-%d", h)
			fires++
			if out.wins[hunt] > 1 {
				doubles++
				if doubles <= 5 {
					t.Logf("double: seed %d %s won %d times, L=%s (%s)", seed, hunt, out.wins[hunt], p.visibility(), p)
				}
			}
			// Beyond the bound a winner's fenced advance may be refused (the fire then stays
			// owed and is claimed again); one that lands writes exactly the fire, never more.
			if out.advances[hunt] > 0 && out.watermarks[hunt] != simFire {
				t.Fatalf("seed %d: %s advanced but watermark = %d", seed, hunt, out.watermarks[hunt])
			}
			if out.watermarks[hunt] > simFire {
				t.Fatalf("seed %d: %s watermark %d beyond the fire", seed, hunt, out.watermarks[hunt])
			}
			if out.wins[hunt] > 0 && out.advances[hunt] == 0 {
				fenced++
			}
		}
		// Whatever the number of runs, the unique findings are exactly those of one run per
		// fire that ran.
		want := map[string]bool{}
		for h := 0; h < p.hunts; h++ {
			hunt := fmt.Sprintf("hunt-%d", h)
			if out.wins[hunt] > 0 {
				for _, k := range findingsOf(hunt, simFire) {
					want[k] = true
				}
			}
		}
		if len(out.findings.unique) != len(want) {
			t.Fatalf("seed %d: %d unique findings, want %d", seed, len(out.findings.unique), len(want))
		}
		for k := range want {
			if !out.findings.unique[k] {
				t.Fatalf("seed %d: finding %s missing", seed, k)
			}
		}
		dupRows += out.findings.raw - len(out.findings.unique)
	}
	t.Logf("%d scenarios with L in [settle/2, 3·settle): %d of %d fires won more than once; %d duplicate finding rows, all collapsed by the (hunt_id, fire, finding_id) key; %d fires whose every advance was fenced (left owed)",
		n, doubles, fires, dupRows, fenced)
	if doubles == 0 {
		t.Fatal("no double win found beyond the bound: the simulation cannot see the failure it guards against")
	}
	if dupRows == 0 {
		t.Fatal("doubles wrote no duplicate rows")
	}
}
