package lease

import (
	"math/rand/v2"
	"testing"
	"time"
)

// genCommitParams draws a multi-fire scenario: hunts firing every simInterval, claimers
// ticking, pausing past or around the lease, commits failing (before applying or with the
// answer lost) at errRate, findings inserts landing late; claim visibility lag L below lMax
// and hunt_watermark replication lag below wmMax, each table with its own lag matrix.
func genCommitParams(rng *rand.Rand, lMin, lMax, wmMax time.Duration) simParams {
	p := genParams(rng, lMin, lMax)
	p.claimers = 2 + rng.IntN(3)
	p.fires = 3 + rng.IntN(4)
	p.lease = 4*simSettle + time.Duration(rng.Int64N(int64(4*time.Second)))
	p.pauses, p.lateFindings, p.stalls = true, true, true
	p.mergeEvery = 300 * time.Millisecond
	p.errRate = []float64{0, 0.1, 0.3}[rng.IntN(3)]
	p.clockJump = rng.IntN(4) == 0
	p.noSeed = rng.IntN(8) == 0
	p.wmLag = lagMatrix(rng, p.replicas, time.Duration(rng.Float64()*float64(wmMax)))
	p.commitMax = p.insertMax
	return p
}

// commitStats sums what the multi-fire scenarios of a test did, so a test can show its
// invariants did not hold vacuously.
type commitStats struct {
	scenarios, violating int
	firstSeed            uint64
	first                string
	commits, doubleWins  int
	outcomes, pauses     map[string]int
	rawFinds, viewFinds  int
	progressed, hunts    int           // hunts whose watermark reached their last fire
	refused              int           // inserts refused while a quorum insert was pending
	busy                 time.Duration // summed: each scenario's start to its last commit
}

// commitsPerSecond is the commit rate over the scenarios' busy time (virtual clock).
func (st commitStats) commitsPerSecond() float64 {
	if st.busy <= 0 {
		return 0
	}
	return float64(st.commits) / st.busy.Seconds()
}

// playCommits plays n scenarios drawn by gen with mutation mut and counts those that break an
// invariant; stopAtFirst ends at the first.
func playCommits(t *testing.T, n int, seedBase, stream uint64, mut simMutation, stopAtFirst bool, gen func(*rand.Rand) simParams) commitStats {
	t.Helper()
	st := commitStats{outcomes: map[string]int{}, pauses: map[string]int{}}
	for i := range n {
		seed := seedBase + uint64(i)
		p := gen(rand.New(rand.NewPCG(seed, stream)))
		p.mut = mut
		out := runScenario(t, seed, p)
		st.scenarios++
		for _, n := range out.wins {
			if n > 1 {
				st.doubleWins++
			}
		}
		for h := range p.hunts {
			st.hunts++
			st.commits += out.commits[huntName(h)]
			if out.watermarks[huntName(h)] == simFire+int64(p.fires-1)*simInterval {
				st.progressed++
			}
		}
		for k, v := range out.outcomes {
			st.outcomes[k] += v
		}
		for k, v := range out.pauses {
			st.pauses[k] += v
		}
		st.refused += out.refused
		st.busy += out.busy
		st.rawFinds += out.rawFinds
		st.viewFinds += out.viewFinds
		if len(out.errs) > 0 {
			t.Fatalf("seed %d: claim errors %v", seed, out.errs)
		}
		if len(out.violations) > 0 {
			st.violating++
			if st.violating == 1 {
				st.firstSeed, st.first = seed, out.summary()+" ("+p.String()+")"
			}
			if stopAtFirst {
				break
			}
		}
	}
	return st
}

// genBelowBound: claim visibility lag and hunt_watermark replication lag both below settle/2.
func genBelowBound(rng *rand.Rand) simParams {
	return genCommitParams(rng, 0, simSettle/2, simSettle/2)
}

// genWatermarkLags: claims below the bound, hunt_watermark lagging half a settle to a settle
// between any two replicas (its replication queue stuck behind a big fetch, say). From a
// settle on, a claim that found the lease spent by a commit visible on one replica can verify
// and compare on replicas without it (seed 7,000,054 with lag up to 1.4 s once renewals retry
// as the runner's do); TestSimulationCompareLimits shows that regime.
func genWatermarkLags(rng *rand.Rand) simParams {
	p := genCommitParams(rng, 0, simSettle/2, 0)
	p.wmLag = lagMatrix(rng, p.replicas, simSettle/2)
	for i := range p.wmLag {
		for j := range p.wmLag[i] {
			if i != j {
				p.wmLag[i][j] += simSettle / 2
			}
		}
	}
	return p
}

// genBeyondBound: single-fire scenarios whose claim visibility lag is in [settle/2, 3·settle),
// so two claims of one fire can both win. wmLag is hunt_watermark's worst replication lag.
func genBeyondBound(wmLag time.Duration) func(*rand.Rand) simParams {
	return func(rng *rand.Rand) simParams {
		p := genParams(rng, simSettle/2, 3*simSettle)
		p.startSpread = simSettle
		p.wmLag = lagMatrix(rng, p.replicas, wmLag)
		return p
	}
}

func (st commitStats) log(t *testing.T, what string) {
	t.Helper()
	t.Logf("%s: %d scenarios, %d hunts (%d reached their last fire), %d commits, %d (hunt, fire) won more than once; attempts %v; pauses %v; %d finding rows stored, %d visible through the committed view",
		what, st.scenarios, st.hunts, st.progressed, st.commits, st.doubleWins, st.outcomes, st.pauses, st.rawFinds, st.viewFinds)
}

// TestSimulationExactlyOnce: hunts firing every few seconds, claimers ticking, pausing for
// longer than the lease or until around its expiry at every point of a run, commits failing
// or losing their answer, findings inserts landing after their attempt died, hunt_lease and
// hunt_watermark lagging independently (each below settle/2), some hunts' history carrying a
// commit whose updated is an hour ahead, some hunts never run before. On every scenario: no
// fire has two commits, each hunt's committed windows tile from where it stood, every
// committed run's findings are there and each source event is seen exactly once through the
// committed view, which shows nothing of an attempt that did not commit.
func TestSimulationExactlyOnce(t *testing.T) {
	t.Parallel()
	n := scenarioCount(500)
	st := playCommits(t, n, 5_000_000, 0xE0CE, 0, true, genBelowBound)
	st.log(t, "below the bound")
	if st.violating > 0 {
		t.Fatalf("seed %d: %s", st.firstSeed, st.first)
	}
	// The invariants must not hold vacuously: the scenarios commit, pause at every point, lose
	// leases to pauses, fail commits, and leave uncommitted findings behind.
	if st.progressed < st.hunts*4/5 {
		t.Fatalf("only %d of %d hunts reached their last fire", st.progressed, st.hunts)
	}
	for _, point := range []string{"between snapshot and claim", "between free read and insert", "between verify and run",
		"between run and commit", "inside the commit (after the trust check)"} {
		if st.pauses[point] == 0 {
			t.Errorf("no pause %s", point)
		}
	}
	for _, o := range []string{"lost: past the trust deadline", "fenced", "failed (findings insert)", "lost before run"} {
		if st.outcomes[o] == 0 {
			t.Errorf("no attempt ended %q", o)
		}
	}
	if st.doubleWins == 0 || st.rawFinds <= st.viewFinds {
		t.Errorf("%d fires won twice, %d of %d findings visible: pauses never handed a fire over", st.doubleWins, st.viewFinds, st.rawFinds)
	}
}

// TestSimulationExactlyOnceProvisional: the scenarios of TestSimulationExactlyOnce with the
// runner's claim: provisional leases extended by the winner. The invariants hold, and a
// provisional row whose claim was acknowledged late frees its hunt without a whole lease.
func TestSimulationExactlyOnceProvisional(t *testing.T) {
	t.Parallel()
	st := playCommits(t, scenarioCount(500), 8_000_000, 0x9F0, 0, true, func(rng *rand.Rand) simParams {
		p := genBelowBound(rng)
		p.provisional = 10 * simSettle
		return p
	})
	st.log(t, "below the bound, provisional claims")
	if st.violating > 0 {
		t.Fatalf("seed %d: %s", st.firstSeed, st.first)
	}
	if st.progressed < st.hunts*4/5 {
		t.Fatalf("only %d of %d hunts reached their last fire", st.progressed, st.hunts)
	}
}

// TestSimulationQuorumModeAnyLag: replication lag of up to three settles on hunt_lease and two
// to four on hunt_watermark, far beyond both bounds. Without quorum the simulation finds
// overlapping or doubled commits in these scenarios; with --consistency quorum (acknowledged
// only once a quorum has the row, sequentially consistent reads) every invariant holds.
func TestSimulationQuorumModeAnyLag(t *testing.T) {
	t.Parallel()
	gen := func(quorum bool) func(*rand.Rand) simParams {
		return func(rng *rand.Rand) simParams {
			p := genCommitParams(rng, 0, simSettle/2, 0)
			p.replicas = 2 + rng.IntN(2)
			p.skew = make([]time.Duration, p.replicas)
			p.lag = lagMatrix(rng, p.replicas, 3*simSettle)
			p.wmLag = lagMatrix(rng, p.replicas, 2*simSettle)
			for i := range p.wmLag {
				for j := range p.wmLag[i] {
					if i != j {
						p.wmLag[i][j] += 2 * simSettle
					}
				}
			}
			p.quorum = quorum
			// What quorum mode costs: insert_quorum_parallel=0 refuses concurrent quorum
			// inserts into one table, and every insert waits for its replicas.
			p.refusals, p.quorumLat = quorum, time.Duration(rng.Int64N(int64(100*time.Millisecond)))
			return p
		}
	}
	without := playCommits(t, 1000, 9_000_000, 0x0F0, 0, true, gen(false)) // stops at the first failure
	if without.violating == 0 {
		t.Fatalf("no scenario of %d broke an invariant without quorum: the lags are not large enough to matter", without.scenarios)
	}
	t.Logf("without quorum, seed %d (after %d): %s", without.firstSeed, without.scenarios, without.first)
	st := playCommits(t, scenarioCount(300), 9_000_000, 0x0F0, 0, true, gen(true))
	st.log(t, "quorum mode, lag up to 3-4 settles")
	t.Logf("quorum mode: %d inserts refused while another was pending, all retried", st.refused)
	if st.refused == 0 {
		t.Fatal("no insert was refused: the scenarios do not exercise insert_quorum_parallel=0")
	}
	if st.violating > 0 {
		t.Fatalf("quorum mode, seed %d: %s", st.firstSeed, st.first)
	}
	if st.progressed < st.hunts*4/5 {
		t.Fatalf("only %d of %d hunts reached their last fire", st.progressed, st.hunts)
	}
}

// TestSimulationWatermarkLagsLease: with hunt_watermark replicating half a settle to a settle
// behind (hunt_lease below the bound) all four invariants still hold: a claim verifies a settle
// after its row landed and compares later still, so both reads see any commit that spent the
// lease before. From a settle of lag on, a claim that found the lease spent by a commit visible
// on one replica can verify and compare on replicas without it (seed 7,000,054 of the former
// 1-2 settle range, once renewals retry as the runner's do; TestSimulationCompareLimits).
func TestSimulationWatermarkLagsLease(t *testing.T) {
	t.Parallel()
	st := playCommits(t, scenarioCount(400), 7_000_000, 0x77, 0, true, genWatermarkLags)
	st.log(t, "hunt_watermark lagging half a settle to a settle")
	if st.violating > 0 {
		t.Fatalf("seed %d: %s", st.firstSeed, st.first)
	}
	if st.progressed < st.hunts*4/5 {
		t.Fatalf("only %d of %d hunts reached their last fire", st.progressed, st.hunts)
	}
}

// TestSimulationDoublesBeyondBoundAreAbsorbed: with claim visibility lag beyond settle/2 two
// claims of one fire can both win. While every commit's compare reads hunt_watermark without
// lag and lands in the instant it reads, the compare-and-set still lets at most one of them
// commit, and windows tile. Without the watermark compare the simulation finds the second
// commit. (With hunt_watermark lag or a commit statement that takes time, it does not hold:
// TestSimulationCompareLimits.)
func TestSimulationDoublesBeyondBoundAreAbsorbed(t *testing.T) {
	t.Parallel()
	n := scenarioCount(1000)
	st := playCommits(t, n, 1_000_000, 0xBAD, 0, false, genBeyondBound(0))
	st.log(t, "beyond the bound, hunt_watermark without lag")
	if st.violating > 0 {
		t.Fatalf("seed %d: %s", st.firstSeed, st.first)
	}
	if st.doubleWins == 0 {
		t.Fatal("no fire won twice beyond the bound: the simulation cannot see the failure the compare-and-set absorbs")
	}
	noCompare := playCommits(t, n, 1_000_000, 0xBAD, mutNoWatermarkCompare, true, genBeyondBound(0))
	if noCompare.violating == 0 {
		t.Fatalf("without the watermark compare no scenario of %d broke an invariant", noCompare.scenarios)
	}
	t.Logf("without the watermark compare, seed %d: %s", noCompare.firstSeed, noCompare.first)
}

// TestSimulationCompareLimits shows where the compare-and-set stops holding with every guard
// in place, so the bounds in docs/claim-protocol.md are the simulation's, not a guess. The
// compare is an INSERT … SELECT: it reads the newest watermark on the replica it reaches when
// it starts and its row lands when the insert ends, so two commits whose statements come
// within (statement duration + hunt_watermark lag) of each other can both pass it.
func TestSimulationCompareLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		seed   uint64
		stream uint64
		gen    func(*rand.Rand) simParams
	}{
		// Claims below the bound, but hunt_watermark lagging 2 to 4 settles: a peer claims after
		// the release, and its verify and its compare both read a replica without the commit.
		{"watermark lag of 2-4 settles", 6_000_000, 0x1A6, func(rng *rand.Rand) simParams {
			p := genCommitParams(rng, 0, simSettle/2, 0)
			p.wmLag = lagMatrix(rng, p.replicas, 2*simSettle)
			for i := range p.wmLag {
				for j := range p.wmLag[i] {
					if i != j {
						p.wmLag[i][j] += 2 * simSettle
					}
				}
			}
			return p
		}},
		// Beyond the bound, two winners' compares on different replicas within the lag.
		{"beyond the bound, watermark lag below settle/2", 1_000_000, 0xBAD, genBeyondBound(simSettle / 2)},
		// Beyond the bound, no lag, but each compare reads before the other's row lands.
		{"beyond the bound, commit statements up to the insert duration", 1_000_000, 0xBAD, func(rng *rand.Rand) simParams {
			p := genBeyondBound(0)(rng)
			p.commitMax = p.insertMax
			return p
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := playCommits(t, 1000, tc.seed, tc.stream, 0, true, tc.gen) // stops at the first failure
			if st.violating == 0 {
				t.Fatalf("no scenario of %d broke an invariant: the simulation cannot see this limit", st.scenarios)
			}
			t.Logf("seed %d (after %d): %s", st.firstSeed, st.scenarios, st.first)
		})
	}
}

// TestSimulationCommitGuards removes each guard of the window and commit, alone, and replays
// the scenarios of the test named with it until one breaks an invariant.
// docs/claim-protocol.md lists the seeds, and the guards no scenario needs alone: a window
// from the tick snapshot is harmless while Advance compares against the window's own start
// (its commit is refused), so it is removed together with that compare here.
func TestSimulationCommitGuards(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mut    simMutation
		test   string
		seed   uint64
		stream uint64
		gen    func(*rand.Rand) simParams
	}{
		{mutWindowFromSnapshot | mutPrevFromLease, "TestSimulationExactlyOnce", 5_000_000, 0xE0CE, genBelowBound},
		{mutNoLeaseOwnerCheck, "TestSimulationExactlyOnce", 5_000_000, 0xE0CE, genBelowBound},
		{mutNewestByUpdated, "TestSimulationExactlyOnce", 5_000_000, 0xE0CE, genBelowBound},
		{mutViewAllAttempts, "TestSimulationExactlyOnce", 5_000_000, 0xE0CE, genBelowBound},
		{mutNoCommitDedup, "TestSimulationExactlyOnce", 5_000_000, 0xE0CE, genBelowBound},
		{mutNoWatermarkCompare, "TestSimulationDoublesBeyondBoundAreAbsorbed", 1_000_000, 0xBAD, genBeyondBound(0)},
	}
	for _, tc := range cases {
		t.Run(tc.mut.String()+" in "+tc.test, func(t *testing.T) {
			// Not shortened under -short: the run stops at the first failure, and a shorter
			// run could miss the seed that catches it.
			st := playCommits(t, 1000, tc.seed, tc.stream, tc.mut, true, tc.gen)
			if st.violating == 0 {
				t.Fatalf("not caught in %d scenarios of %s", st.scenarios, tc.test)
			}
			t.Logf("caught by %s's scenarios, seed %d (after %d): %s", tc.test, st.firstSeed, st.scenarios, st.first)
		})
	}
}

// TestSimulationQuorumRefusalsStayLive: three pods committing bursts of fires (20 hunts firing
// together) in quorum mode, where ClickHouse refuses (286) a quorum insert into a table while
// another is pending on it and acknowledges each only once its replicas confirm (up to 100 ms).
// Refused claims, extensions, renewals and commits are retried after a jittered wait: every
// hunt reaches its last fire, every invariant holds, and the commit rate is measured against a
// single endpoint on the same seeds (no refusals, no quorum wait). Pauses and statement
// failures are off here, so the figures are throughput and not the outages of the other tests.
func TestSimulationQuorumRefusalsStayLive(t *testing.T) {
	t.Parallel()
	gen := func(quorum bool) func(*rand.Rand) simParams {
		return func(rng *rand.Rand) simParams {
			p := genCommitParams(rng, 0, simSettle/2, simSettle/2)
			p.pauses, p.stalls, p.lateFindings, p.errRate = false, false, false, 0
			p.claimers, p.hunts, p.fires, p.lease = 3, 20, 4, 8*time.Second
			if quorum {
				p.replicas = 3
				p.skew = make([]time.Duration, p.replicas)
				p.lag = lagMatrix(rng, p.replicas, 3*simSettle)
				p.wmLag = lagMatrix(rng, p.replicas, 3*simSettle)
				p.quorum, p.refusals = true, true
				p.quorumLat = 20*time.Millisecond + time.Duration(rng.Int64N(int64(80*time.Millisecond)))
			} else {
				p.replicas, p.skew, p.lag, p.wmLag = 1, []time.Duration{0}, [][]time.Duration{{0}}, nil
			}
			return p
		}
	}
	n := scenarioCount(40)
	single := playCommits(t, n, 12_000_000, 0x9A0, 0, true, gen(false))
	quorum := playCommits(t, n, 12_000_000, 0x9A0, 0, true, gen(true))
	for _, st := range []struct {
		name string
		commitStats
	}{{"single endpoint", single}, {"quorum", quorum}} {
		st.log(t, st.name)
		t.Logf("%s: %.1f commits/s over %s of busy time, %d inserts refused", st.name, st.commitsPerSecond(), st.busy.Round(time.Second), st.refused)
		if st.violating > 0 {
			t.Fatalf("%s, seed %d: %s", st.name, st.firstSeed, st.first)
		}
		if st.progressed != st.hunts {
			t.Fatalf("%s: only %d of %d hunts reached their last fire", st.name, st.progressed, st.hunts)
		}
	}
	if quorum.refused == 0 {
		t.Fatal("no insert was refused in quorum mode: the bursts do not overlap")
	}
	t.Logf("quorum / single endpoint commit rate: %.2f", quorum.commitsPerSecond()/single.commitsPerSecond())
}
