package lease

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
)

// The cap's simulation: claimers of one scope claim fires of many hunts under Cap{Max: n}
// against the replicated model store (sim_test.go), each tick taking at most n − (live leases
// it reads) fires, as the runner's planner does, and run what they keep for a while before a
// fenced release (or, one time in four, leaving the lease to expire). A hunt's fire is never
// committed, so a released hunt is due again at once: the scope stays saturated and claims
// race all the time. The invariant: at no instant are more than n of the kept claims running.

// capMutation removes the cap's guard, so a test can show the bound breaks without it.
type capMutation uint8

const (
	capGuarded  capMutation = iota
	capPlanOnly             // no cap read after the verify: only the planner's n − live
	capRank                 // a claim counts only leases claimed before it (by their first claimed, then claim id)
)

var capMutationNames = map[capMutation]string{capGuarded: "guarded", capPlanOnly: "planner limit only", capRank: "rank by claim time"}

type capParams struct {
	skew     time.Duration // replica clocks within ±skew
	max      int
	maxBatch int
	mut      capMutation
}

// capClient is a claimer's connection, remembering its last batch of claim ids so that
// capRank can find the claim the rank is taken against.
type capClient struct {
	*simClient
	mut  capMutation
	mine []uuid.UUID
}

func (c *capClient) InsertClaims(ctx context.Context, claims []Row, lease time.Duration) error {
	c.mine = c.mine[:0]
	for _, r := range claims {
		c.mine = append(c.mine, r.ClaimID)
	}
	return c.simClient.InsertClaims(ctx, claims, lease)
}

// firstClaimed is when claim id was first claimed: the claim row's claimed, which renewals and
// extensions do not change (what a "started" column would keep). Caller holds mu.
func (w *simWorld) firstClaimed(id uuid.UUID) (time.Time, bool) {
	for i := range w.leases {
		if w.leases[i].claim && w.leases[i].ClaimID == id {
			return w.leases[i].Claimed, true
		}
	}
	return time.Time{}, false
}

var capTrace func(string, ...any)

func (c *capClient) Running(ctx context.Context, hunts []string) ([]Row, error) {
	rows, err := c.simClient.Running(ctx, hunts)
	if capTrace != nil {
		var ss []string
		for _, r := range rows {
			ss = append(ss, r.HuntID+"/"+r.ClaimID.String()[:8])
		}
		capTrace("%s pod-%d running read: %v", time.Now().Format("05.000"), c.cl.id, ss)
	}
	if err != nil || c.mut != capRank || len(c.mine) == 0 {
		return rows, err
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	own, ok := c.w.firstClaimed(c.mine[0])
	if !ok {
		return rows, nil
	}
	ref := Row{ClaimID: c.mine[0], Claimed: own}
	return slices.DeleteFunc(rows, func(r Row) bool {
		if slices.Contains(c.mine, r.ClaimID) {
			return false
		}
		first, _ := c.w.firstClaimed(r.ClaimID)
		return Newer(Row{ClaimID: r.ClaimID, Claimed: first}, ref) // ranks after ours: not counted
	}), nil
}

type capOutcome struct {
	mu       sync.Mutex
	running  int
	peak     int
	kept     int
	overCap  int
	claims   int
	worst    string // when the peak was reached, and by whom
	expired  int
	released int
}

// runCapScenario plays one cap scenario for a minute of virtual time.
func runCapScenario(t *testing.T, seed uint64, p simParams, cp capParams) *capOutcome {
	out := &capOutcome{}
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{p: p, findings: map[findingKey]time.Time{}}
		ids := make([]string, p.hunts)
		for i := range ids {
			ids[i] = huntName(i)
		}
		until := time.Now().Add(time.Minute)
		lease := p.leaseOr()
		var wg sync.WaitGroup
		for i := range p.claimers {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			cl := &simClaimer{id: i, seed: seed, w: w}
			c := &capClient{simClient: &simClient{w: w, rng: rng, cl: cl}, mut: cp.mut}
			proto := &protocol{store: c, owner: fmt.Sprintf("pod-%d", i), lease: lease, provisional: p.provisional, settle: simSettle,
				log: slog.New(slog.NewTextHandler(io.Discard, nil)), newID: func() uuid.UUID { return randomUUID(rng) }, jitter: c.jitter}
			wg.Go(func() {
				var runs sync.WaitGroup
				defer runs.Wait()
				var jobs uint64 // this claimer's runs, seeding each one's connection
				for time.Now().Before(until) {
					time.Sleep(time.Duration(rng.Int64N(int64(simSettle)) + 1))
					// The planner: at most max − (live leases it reads) fires, chosen at random.
					live, err := c.Running(context.Background(), ids)
					if err != nil {
						continue
					}
					room := min(cp.max-len(live), cp.maxBatch)
					if room <= 0 {
						continue
					}
					var due []Fire
					for _, k := range rng.Perm(len(ids))[:room] {
						due = append(due, Fire{HuntID: ids[k], Fire: simFire})
					}
					var res Result
					if cp.mut == capPlanOnly {
						res, err = proto.claim(context.Background(), due)
					} else {
						res, err = proto.claimCapped(context.Background(), due, Cap{Max: cp.max, Hunts: ids})
					}
					if err != nil {
						continue
					}
					out.mu.Lock()
					out.claims += len(due)
					out.overCap += res.OverCap
					out.kept += len(res.Won)
					if capTrace != nil {
						capTrace("%s pod-%d due=%v won=%d over=%d lost=%d", time.Now().Format("05.000"), cl.id, due, len(res.Won), res.OverCap, len(res.Lost))
					}
					for _, l := range res.Won {
						if capTrace != nil {
							capTrace("%s pod-%d KEEP %s claim=%s claimed=%s until=%s", time.Now().Format("05.000"), cl.id, l.HuntID, l.ClaimID.String()[:8], l.Claimed.Format("05.000"), l.Until.Format("05.000"))
						}
						out.running++
						if out.running > out.peak {
							out.peak = out.running
							out.worst = fmt.Sprintf("pod-%d kept %s at %s", cl.id, l.HuntID, time.Now().Format("05.000"))
						}
					}
					out.mu.Unlock()
					for _, l := range res.Won {
						// A holder stops by its trust deadline (this model does not renew), less the
						// clock spread: a lease counts while live on the reader's clock, and a
						// replica up to 2 × skew ahead of the writer sees it end that much sooner.
						d := min(time.Duration(rng.Int64N(int64(3*simSettle))), max(time.Until(l.Trusted)-2*cp.skew, 0))
						expire := rng.IntN(4) == 0
						jobs++
						rc := &simClient{w: w, rng: rand.New(rand.NewPCG(seed, uint64(i)<<32|jobs)), cl: cl}
						runs.Go(func() {
							time.Sleep(d)
							out.mu.Lock()
							if capTrace != nil {
								capTrace("%s pod-%d END %s claim=%s expire=%t", time.Now().Format("05.000"), cl.id, l.HuntID, l.ClaimID.String()[:8], expire)
							}
							out.running--
							if expire {
								out.expired++
							} else {
								out.released++
							}
							out.mu.Unlock()
							if !expire {
								_ = rc.Release(context.Background(), []Lease{l})
							}
						})
					}
				}
			})
		}
		wg.Wait()
	})
	return out
}

func genCapParams(rng *rand.Rand, skew time.Duration) simParams {
	p := genParams(rng, 0, simSettle/2)
	p.claimers = 2 + rng.IntN(5)
	p.hunts = 8 + rng.IntN(12)
	p.stalls = true
	// A lease short enough that unreleased ones expire within the scenario.
	p.lease = 4*simSettle + 2*skew + time.Duration(rng.Int64N(int64(12*simSettle)))
	if rng.IntN(2) == 0 && p.lease > 10*simSettle {
		p.provisional = 10 * simSettle
	}
	for i := range p.skew {
		p.skew[i] = time.Duration(rng.Int64N(int64(2*skew)+1)) - skew
	}
	return p
}

type capStats struct {
	scenarios, claims, kept, overCap, expired, released, atMax int
}

// capHolds plays n scenarios with the guard cp.mut and returns the first that broke the
// bound (0: none) and the totals.
func capHolds(t *testing.T, n int, base uint64, skew time.Duration, mut capMutation) (uint64, string, capStats) {
	var st capStats
	for i := range n {
		seed := base + uint64(i)
		rng := rand.New(rand.NewPCG(seed, 0xCA9))
		p := genCapParams(rng, skew)
		cp := capParams{skew: skew, max: 1 + rng.IntN(3), maxBatch: 1 + rng.IntN(3), mut: mut}
		if mut == capRank {
			cp.maxBatch = 1
		}
		o := runCapScenario(t, seed, p, cp)
		st.scenarios++
		st.claims += o.claims
		st.kept += o.kept
		st.overCap += o.overCap
		st.expired += o.expired
		st.released += o.released
		if o.peak == cp.max {
			st.atMax++
		}
		if o.peak > cp.max {
			return seed, fmt.Sprintf("cap %d: %d running at once (%s); %s", cp.max, o.peak, o.worst, p), st
		}
	}
	return 0, "", st
}

// TestSimulationCapHolds: many claimers, cap n, replicas with lag below settle/2 and clocks
// up to a second apart: never more than n kept claims run at once.
func TestSimulationCapHolds(t *testing.T) {
	t.Parallel()
	n := scenarioCount(300)
	seed, why, st := capHolds(t, n, 8_000_000, time.Second, capGuarded)
	if seed != 0 {
		t.Fatalf("seed %d: %s", seed, why)
	}
	t.Logf("%d scenarios: %d fires claimed, %d kept, %d won over the cap and released; runs ended by release %d, by expiry %d; "+
		"%d scenarios reached the cap", st.scenarios, st.claims, st.kept, st.overCap, st.released, st.expired, st.atMax)
	// Not vacuous: the cap is reached, and the guard is what holds it there.
	if st.atMax < st.scenarios/2 || st.overCap == 0 {
		t.Fatalf("only %d of %d scenarios reached the cap, %d claims over it: the simulation is not exercising the cap",
			st.atMax, st.scenarios, st.overCap)
	}
}

// TestSimulationCapGuards: without the cap read (the planner's limit alone), and with a rank
// by claim time instead of counting every other live lease, the bound breaks.
func TestSimulationCapGuards(t *testing.T) {
	t.Parallel()
	for _, mut := range []capMutation{capPlanOnly, capRank} {
		t.Run(capMutationNames[mut], func(t *testing.T) {
			seed, why, st := capHolds(t, scenarioCount(300), 8_000_000, time.Second, mut)
			if seed == 0 {
				t.Fatalf("%s: the bound held over %d scenarios: the mutation is not caught", capMutationNames[mut], st.scenarios)
			}
			t.Logf("%s: caught at seed %d: %s", capMutationNames[mut], seed, why)
		})
	}
}
