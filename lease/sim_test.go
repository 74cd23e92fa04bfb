package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"
)

// The simulation drives the real claim protocol (protocol.claim) against an in-memory store
// that behaves like a replicated ReplacingMergeTree behind a load balancer, and a model of the
// runner around it (runner/job.go: window, run, findings, commit, renewals, release):
//
//   - every query lands on a random replica and sees a row only once that replica has it:
//     commit time + lag(origin replica → reading replica), 0 on the origin itself; hunt_lease
//     and hunt_watermark replicate independently, each with its own lag matrix;
//   - each replica has its own clock (skew), used for claimed, lease_until, updated and "now";
//   - the conditional claim insert checks freeness on its replica, then takes a while to
//     commit (the insert duration), then the acknowledgement takes a random time to come
//     back, so acknowledgements arrive reordered and sometimes later than the settle;
//   - optionally, a network leg stalls for up to two settles (a paused pod), e.g. between
//     the free read and the insert: only the server-side re-check stops that claim;
//   - claimed has the store clock's resolution (1µs, as DateTime64(6)); background merges
//     collapse each hunt's rows to the greatest claimed, keeping the last inserted of tied
//     rows whatever its claim id, as ReplacingMergeTree(claimed) does, and reach the other
//     replicas with the replication lag;
//   - a winner runs the window [verified watermark, fire) (first run: [fire − interval,
//     fire)), stores one finding per source event of the window under its run id (an insert
//     may time out on the client and land on the server seconds later), and commits with
//     store.Store.Advance's compare-and-set, evaluated on the replica the statement
//     reaches at its server time: the newest lease is this claim's, for this fire, and live,
//     and the newest watermark (greatest (watermark, updated)) is still where the run's window
//     starts (none, for a first run) and below the fire; the run id deduplicates a retried
//     commit. A commit may fail
//     before applying or with its answer lost; the runner retries it (250 ms doubling to 5 s),
//     re-checking the lease's trust deadline (process clock) before each attempt, and reads
//     it back by run id. A won lease is renewed every lease/3 (fenced: newest and live only)
//     until the commit ends, and released (fenced, live only) after a commit that landed or a
//     failed run;
//   - a claimer may pause (SIGSTOP, GC, CPU starvation) at any of these points for longer
//     than the lease, or until just around its expiry: after the tick's snapshot, between the
//     free read and the claim insert, between verify and run, between run and commit, and
//     inside the commit (after the trust check, before each attempt). A pause stops the claimer's renewals too.
//
// All waiting is virtual (testing/synctest), so thousands of scenarios take seconds.
//
// The visibility lag L of a scenario is measured from a claim's server-side freeness check to
// the moment every replica sees its row: insert duration + replication lag.
// docs/claim-protocol.md derives that two claims can both win only if L ≥ settle/2; on a single endpoint the
// acknowledgement rule makes the insert duration harmless whatever it is.
//
// Each guard is needed: with the tie rule, the acknowledgement rule, the settle or the
// server-side re-check removed from the protocol (or from this store's insert), one of the
// tests below finds a double win; with a guard of the commit removed (simMutation), one of
// sim_commit_test.go's tests finds a broken invariant (docs/claim-protocol.md lists which).

const (
	simSettle   = 750 * time.Millisecond
	simLease    = 5 * time.Minute
	simFire     = int64(946684800) // synctest's clock starts at 2000-01-01T00:00:00Z
	simInterval = int64(4)         // seconds between a hunt's fires in multi-fire scenarios
)

// simMutation removes one guard from the model of the runner or of the store, so a test can
// show that some invariant breaks without it.
type simMutation uint

const (
	mutWindowFromSnapshot simMutation = 1 << iota // window starts at the tick snapshot's watermark
	mutNoWatermarkCompare                         // Advance ignores the newest watermark
	mutNoLeaseOwnerCheck                          // Advance checks only that the newest lease is live
	mutNoUntilCheck                               // Advance accepts an expired lease of ours
	mutNoTrustRecheck                             // commit retries skip Lease.Trusted
	mutNewestByUpdated                            // newest watermark by updated alone
	mutViewAllAttempts                            // the committed view shows every attempt's findings
	mutNoCommitDedup                              // a commit's deduplication token is not the run id (a clock in it)
	mutPrevFromLease                              // Advance compares against Lease.Watermark, not the window's start (the first CAS)
)

var mutationNames = map[simMutation]string{
	mutWindowFromSnapshot: "window from the tick snapshot instead of the verified read",
	mutNoWatermarkCompare: "CAS without the watermark compare",
	mutNoLeaseOwnerCheck:  "CAS without the lease-is-ours check",
	mutNoUntilCheck:       "CAS without until > now",
	mutNoTrustRecheck:     "commit retries without the trust re-check",
	mutNewestByUpdated:    "newest watermark by updated only",
	mutViewAllAttempts:    "committed view shows every attempt's findings",
	mutNoCommitDedup:      "commit deduplication token not the run id",
	mutPrevFromLease:      "CAS compares against the verified watermark instead of the window's start",
}

func (m simMutation) String() string {
	var names []string
	for bit := simMutation(1); bit <= m; bit <<= 1 {
		if m&bit != 0 {
			names = append(names, mutationNames[bit])
		}
	}
	return strings.Join(names, " + ")
}

type simParams struct {
	replicas  int
	skew      []time.Duration   // per replica clock offset
	lag       [][]time.Duration // hunt_lease: lag[origin][reader]
	wmLag     [][]time.Duration // hunt_watermark (and findings); nil = the same as lag
	insertMax time.Duration     // check → commit of a claim insert
	netMax    time.Duration     // each way, per query
	ackMax    time.Duration     // commit → acknowledgement
	claimers  int
	hunts     int
	rounds    int  // single-fire scenarios: claim rounds per claimer
	staleRow  bool // an expired lease row from a dead pod exists before the scenario

	resolution  time.Duration // of claimed; 0 = 1µs
	mergeEvery  time.Duration // mean gap between background merges; 0 = none
	startSpread time.Duration // each round starts after a random wait below this; 0 = 2×settle
	stalls      bool          // 2% of network legs stall up to 2×settle more (GC, CPU starvation)
	provisional time.Duration // claim rows' provisional lease, extended by the winner; 0 = none
	// quorum models --consistency quorum: inserts are acknowledged only once a quorum has them
	// and reads are sequentially consistent, so a committed row is visible to every read
	// whatever the replication lag (lag then only delays what no reader is allowed to see).
	quorum bool
	// refusals models insert_quorum_parallel=0 (what --consistency quorum sets): a quorum insert
	// into a table while another is pending there (executing, or waiting quorumLat for its
	// replicas) is refused before executing (code 286), and every quorum insert is
	// acknowledged only quorumLat after it committed.
	refusals  bool
	quorumLat time.Duration

	lease        time.Duration // 0 = simLease
	commitMax    time.Duration // a commit's compare → its row landing; 0 = one instant
	fires        int           // > 0: hunts fire every simInterval, this many times, and claimers tick
	pauses       bool          // claimers pause at the points listed above
	errRate      float64       // chance that a commit, renewal or findings statement fails
	lateFindings bool          // 1 in 8 findings inserts times out and lands up to two leases later
	clockJump    bool          // seed: an older commit whose updated is an hour ahead (a clock that ran fast)
	noSeed       bool          // hunts start without any watermark (first run)
	mut          simMutation
}

func maxOf(m [][]time.Duration) time.Duration {
	var out time.Duration
	for _, row := range m {
		for _, l := range row {
			out = max(out, l)
		}
	}
	return out
}

func (p simParams) String() string {
	s := fmt.Sprintf("replicas=%d claimers=%d hunts=%d rounds=%d insert≤%s replication≤%s ack≤%s skew=%v resolution=%s merges≈%s",
		p.replicas, p.claimers, p.hunts, p.rounds, p.insertMax, maxOf(p.lag), p.ackMax, p.skew, p.resolution, p.mergeEvery)
	if p.fires > 0 {
		s += fmt.Sprintf(" fires=%d lease=%s pauses=%t errors=%.2f late-findings=%t clock-jump=%t no-seed=%t",
			p.fires, p.leaseOr(), p.pauses, p.errRate, p.lateFindings, p.clockJump, p.noSeed)
	}
	if p.wmLag != nil || p.commitMax > 0 {
		s += fmt.Sprintf(" watermark-lag≤%s commit≤%s", p.wmVisibility(), p.commitMax)
	}
	return s
}

func (p simParams) leaseOr() time.Duration {
	if p.lease == 0 {
		return simLease
	}
	return p.lease
}

// visibility is the scenario's worst visibility lag L of a claim.
func (p simParams) visibility() time.Duration { return p.insertMax + maxOf(p.lag) }

// wmVisibility is the worst replication lag of hunt_watermark.
func (p simParams) wmVisibility() time.Duration {
	if p.wmLag == nil {
		return maxOf(p.lag)
	}
	return maxOf(p.wmLag)
}

// withProvisional makes half of the scenarios claim as the runner does: a provisional lease
// of 10 settles on the claim rows, extended to the whole lease by the winner after its verify.
func withProvisional(rng *rand.Rand, p *simParams) {
	if rng.IntN(2) == 0 {
		p.provisional = 10 * simSettle
	}
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
	p.lag = lagMatrix(rng, p.replicas, replication)
	for i := range p.replicas {
		p.skew[i] = time.Duration(rng.Int64N(int64(400*time.Millisecond))) - 200*time.Millisecond
	}
	return p
}

// lagMatrix draws lag[origin][reader] below maxLag, 0 on the diagonal.
func lagMatrix(rng *rand.Rand, replicas int, maxLag time.Duration) [][]time.Duration {
	m := make([][]time.Duration, replicas)
	for i := range replicas {
		m[i] = make([]time.Duration, replicas)
		for j := range replicas {
			if i != j {
				m[i][j] = time.Duration(rng.Float64() * float64(maxLag))
			}
		}
	}
	return m
}

type simRow struct {
	Row
	claim  bool // a claim row (not a renewal or release copy)
	origin int
	commit time.Time
	seq    int // insertion order: a merge keeps the last inserted of tied rows

	gone   bool // merged away: gone from replica r from goneAt + lag[goneBy][r]
	goneBy int
	goneAt time.Time
}

// simCommit is one hunt_watermark row: a commit and its audit record.
type simCommit struct {
	hunt    string
	wm      int64     // the new watermark: the committed fire
	start   int64     // run_start: where the window the run read starts
	run     uuid.UUID // uuid.Nil for a seeded row
	claimID uuid.UUID
	updated time.Time // server clock of the replica that ran the statement
	origin  int
	commit  time.Time
}

// findingKey is hunt_findings' key (hunt_id, fire, run_id, finding_id); a finding's id is
// its source event, one finding per event.
type findingKey struct {
	hunt  string
	fire  int64
	run   uuid.UUID
	event int64
}

// simWorld is the replicated store shared by every claimer of a scenario.
type simWorld struct {
	p          simParams
	mu         sync.Mutex
	leases     []simRow
	watermarks []simCommit
	findings   map[findingKey]time.Time // when the row landed
	inserted   int                      // claim rows that landed
	pending    map[string]time.Time     // per table: until when a quorum insert is pending (refusals)
	refused    int                      // inserts refused because one was pending
	lastCommit time.Time                // when the last commit row landed
	seq        int
	tiedReads  int // verify or free reads that saw a tie on claimed at the top
}

func (w *simWorld) visible(origin int, commit time.Time, replica int, at time.Time) bool {
	if w.p.quorum {
		return !at.Before(commit)
	}
	return !at.Before(commit.Add(w.p.lag[origin][replica]))
}

func (w *simWorld) wmVisible(m simCommit, replica int, at time.Time) bool {
	if w.p.quorum {
		return !at.Before(m.commit)
	}
	lag := w.p.lag
	if w.p.wmLag != nil {
		lag = w.p.wmLag
	}
	return !at.Before(m.commit.Add(lag[m.origin][replica]))
}

// rowVisible: the row has reached replica r by at, and its merge has not. Caller holds mu.
func (w *simWorld) rowVisible(row *simRow, r int, at time.Time) bool {
	if !w.visible(row.origin, row.commit, r, at) {
		return false
	}
	if w.p.quorum {
		return !row.gone || at.Before(row.goneAt)
	}
	return !row.gone || at.Before(row.goneAt.Add(w.p.lag[row.goneBy][r]))
}

// addLease appends a committed row. Caller holds mu.
func (w *simWorld) addLease(row Row, claim bool, origin int, commit time.Time) {
	w.seq++
	w.leases = append(w.leases, simRow{Row: row, claim: claim, origin: origin, commit: commit, seq: w.seq})
}

// claimedAt is replica r's now64(6) at real time at, at the scenario's clock resolution.
func (w *simWorld) claimedAt(r int, at time.Time) time.Time {
	res := w.p.resolution
	if res == 0 {
		res = time.Microsecond
	}
	return w.clock(r, at).Truncate(res)
}

// nextClaimed is chStore's nextClaimed: replica r's now64(6), or just above prev (the
// claimed of the newest row the statement saw) when prev is ahead of that clock.
func (w *simWorld) nextClaimed(r int, at, prev time.Time) time.Time {
	res := w.p.resolution
	if res == 0 {
		res = time.Microsecond
	}
	if now := w.claimedAt(r, at); now.After(prev) {
		return now
	}
	return prev.Add(res)
}

// merge is a background merge on replica m: per hunt, of the rows m has, only the greatest
// claimed survives, the last inserted when several share it (ReplacingMergeTree(claimed)).
// Caller holds mu.
func (w *simWorld) merge(m int, at time.Time) {
	keep := map[string]*simRow{}
	for i := range w.leases {
		row := &w.leases[i]
		if !w.rowVisible(row, m, at) {
			continue
		}
		if k := keep[row.HuntID]; k == nil || row.Claimed.After(k.Claimed) || (row.Claimed.Equal(k.Claimed) && row.seq > k.seq) {
			keep[row.HuntID] = row
		}
	}
	for i := range w.leases {
		row := &w.leases[i]
		if k := keep[row.HuntID]; k != nil && k != row && !row.gone && w.rowVisible(row, m, at) {
			row.gone, row.goneBy, row.goneAt = true, m, at
		}
	}
}

// clock is replica r's reading of the (virtual) real time at.
func (w *simWorld) clock(r int, at time.Time) time.Time { return at.Add(w.p.skew[r]) }

// newestLease is the newest lease row of hunt visible on replica r at time at, and whether a
// row of another claim id shares its claimed (NewestLeaseSQL's tied). Caller holds mu.
func (w *simWorld) newestLease(hunt string, r int, at time.Time) (best Row, tied, found bool) {
	for i := range w.leases {
		row := &w.leases[i]
		if row.HuntID != hunt || !w.rowVisible(row, r, at) {
			continue
		}
		if !found || Newer(row.Row, best) {
			best, found = row.Row, true
		}
	}
	for i := range w.leases {
		row := &w.leases[i]
		if found && row.HuntID == hunt && row.ClaimID != best.ClaimID && row.Claimed.Equal(best.Claimed) && w.rowVisible(row, r, at) {
			tied = true
		}
	}
	return best, tied, found
}

// newerCommit is NewestWatermarkSQL's order: (watermark, updated), or updated alone under
// mutNewestByUpdated.
func (w *simWorld) newerCommit(a, b simCommit) bool {
	if w.p.mut&mutNewestByUpdated == 0 && a.wm != b.wm {
		return a.wm > b.wm
	}
	return a.updated.After(b.updated)
}

// newestWatermark is the newest hunt_watermark row of hunt visible on r at at. Caller holds mu.
func (w *simWorld) newestWatermark(hunt string, r int, at time.Time) (simCommit, bool) {
	var best simCommit
	found := false
	for _, m := range w.watermarks {
		if m.hunt != hunt || !w.wmVisible(m, r, at) {
			continue
		}
		if !found || w.newerCommit(m, best) {
			best, found = m, true
		}
	}
	return best, found
}

// simClient is one connection of a claimer: its own random source for latencies, faults and
// replica choice, so a scenario replays from its seed. Each goroutine has its own.
type simClient struct {
	w   *simWorld
	rng *rand.Rand
	cl  *simClaimer // the process it belongs to (nil: never paused)
}

var errSimStore = errors.New("sim: statement failed")

// errSimRefused is the server's answer to a quorum insert while another is pending.
var errSimRefused = &clickhouse.Exception{Code: 286, Name: "UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE", Message: "sim: previous quorum insert pending"}

// beginInsert starts an insert into table: refused (errSimRefused) while a quorum insert is
// pending there under refusals; else the table is pending until the returned done is called
// (when the statement commits) plus quorumLat, and done waits quorumLat (the acknowledgement
// comes once the replicas confirm). Without refusals both are no-ops.
func (c *simClient) beginInsert(table string) (done func(), err error) {
	if !c.w.p.refusals {
		return func() {}, nil
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.w.pending == nil {
		c.w.pending = map[string]time.Time{}
	}
	if time.Now().Before(c.w.pending[table]) {
		c.w.refused++
		return nil, errSimRefused
	}
	c.w.pending[table] = time.Now().Add(24 * time.Hour) // executing
	return func() {
		c.w.mu.Lock()
		c.w.pending[table] = time.Now().Add(c.w.p.quorumLat)
		c.w.mu.Unlock()
		time.Sleep(c.w.p.quorumLat)
	}, nil
}

// jitter is Jitter on c's random source, so a scenario replays from its seed.
func (c *simClient) jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(c.rng.Int64N(int64(d/2)))
}

var simTrace func(string, ...any)

func (c *simClient) net() {
	if c.cl != nil {
		c.cl.gate()
	}
	d := time.Duration(c.rng.Int64N(int64(c.w.p.netMax) + 1))
	if c.w.p.stalls && c.rng.IntN(50) == 0 {
		d += time.Duration(c.rng.Int64N(int64(2 * simSettle)))
	}
	time.Sleep(d)
}

func (c *simClient) replica() int { return c.rng.IntN(c.w.p.replicas) }

// fault draws a statement failure: before the server applied it, or after (the answer lost).
func (c *simClient) fault() (before, after bool) {
	if c.w.p.errRate == 0 || c.rng.Float64() >= c.w.p.errRate {
		return false, false
	}
	b := c.rng.IntN(2) == 0
	return b, !b
}

func (c *simClient) Read(ctx context.Context, hunts []string) (View, error) {
	c.net()
	r := c.replica()
	at := time.Now()
	v := View{Now: c.w.clock(r, at), Leases: map[string]Row{}, Watermarks: map[string]int64{}, Tied: map[string]bool{}}
	c.w.mu.Lock()
	for _, h := range hunts {
		if l, tied, ok := c.w.newestLease(h, r, at); ok {
			v.Leases[h] = l
			if tied {
				v.Tied[h] = true
				c.w.tiedReads++
			}
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
	if c.cl != nil {
		c.cl.maybePause(c.rng, "between free read and insert", nil)
	}
	c.net()
	done, err := c.beginInsert("hunt_lease")
	if err != nil {
		c.net()
		return err
	}
	r := c.replica()
	check := time.Now()
	now := c.w.clock(r, check)
	var rows []Row
	c.w.mu.Lock()
	for _, cl := range claims {
		m, hasWM := c.w.newestWatermark(cl.HuntID, r, check)
		l, _, ok := c.w.newestLease(cl.HuntID, r, check)
		if ok && l.Until.After(now) && !(hasWM && l.Fire <= m.wm) {
			continue
		}
		if hasWM && m.wm >= cl.Fire {
			continue
		}
		cl.Claimed, cl.Until = c.w.nextClaimed(r, check, l.Claimed), now.Add(lease)
		rows = append(rows, cl)
	}
	c.w.mu.Unlock()
	time.Sleep(time.Duration(c.rng.Int64N(int64(c.w.p.insertMax) + 1)))
	c.w.mu.Lock()
	commit := time.Now()
	for _, row := range rows {
		c.w.addLease(row, true, r, commit)
	}
	c.w.inserted += len(rows)
	c.w.mu.Unlock()
	done()
	time.Sleep(time.Duration(c.rng.Int64N(int64(c.w.p.ackMax) + 1)))
	return nil
}

func (c *simClient) Release(ctx context.Context, leases []Lease) error {
	c.net()
	done, err := c.beginInsert("hunt_lease")
	if err != nil {
		c.net()
		return err
	}
	r := c.replica()
	c.w.mu.Lock()
	at := time.Now()
	now := c.w.clock(r, at)
	for _, l := range leases {
		// Fenced: only while the newest row is this claim's and still live.
		if cur, _, ok := c.w.newestLease(l.HuntID, r, at); ok && cur.ClaimID == l.ClaimID && cur.Until.After(now) {
			cur.Claimed, cur.Until = c.w.nextClaimed(r, at, cur.Claimed), now
			c.w.addLease(cur, false, r, at)
		}
	}
	c.w.mu.Unlock()
	done()
	c.net()
	return nil
}

// Extend is chStore.Extend: for each lease whose row is still the newest of its hunt and lives
// more than margin on the replica reached, a copy lasting lease from that replica's clock. The
// statement checks and lands in one instant (chStore bounds it to margin/2).
func (c *simClient) Extend(ctx context.Context, leases []Lease, lease, margin time.Duration) error {
	c.net()
	done, err := c.beginInsert("hunt_lease")
	if err != nil {
		c.net()
		return err
	}
	r := c.replica()
	c.w.mu.Lock()
	at := time.Now()
	now := c.w.clock(r, at)
	for _, l := range leases {
		if cur, _, ok := c.w.newestLease(l.HuntID, r, at); ok && cur.ClaimID == l.ClaimID && cur.Until.After(now.Add(margin)) {
			cur.Claimed, cur.Until = c.w.nextClaimed(r, at, cur.Claimed), now.Add(lease)
			c.w.addLease(cur, false, r, at)
		}
	}
	c.w.mu.Unlock()
	done()
	c.net()
	return nil
}

// Renew is store.Leases.Renew: a fenced copy of the newest row with a fresh claimed and until
// (only while it is ours and live). A failed statement answers errSimUnknown (the outcome is
// unknown), so the protocol's read-back decides, as on the engine.
func (c *simClient) Renew(_ context.Context, l Lease, lease time.Duration) error {
	c.net()
	before, after := c.fault()
	done, refused := c.beginInsert("hunt_lease")
	switch {
	case refused != nil:
		before = true
	case before:
		done() // failed before applying: nothing pending
	}
	if !before {
		r := c.replica()
		c.w.mu.Lock()
		at := time.Now()
		now := c.w.clock(r, at)
		if cur, _, ok := c.w.newestLease(l.HuntID, r, at); ok && cur.ClaimID == l.ClaimID && cur.Until.After(now) {
			cur.Claimed, cur.Until = c.w.nextClaimed(r, at, cur.Claimed), now.Add(lease)
			c.w.addLease(cur, false, r, at)
		}
		c.w.mu.Unlock()
		done()
	}
	c.net()
	if before || after {
		return errSimUnknown
	}
	return nil
}

// Running is store.Leases.Running on the replica reached: the newest row of every key of hunts
// (a key's hunt is what precedes its first '#') that is live on that replica's clock and not
// spent.
func (c *simClient) Running(ctx context.Context, hunts []string) ([]Row, error) {
	c.net()
	r := c.replica()
	at := time.Now()
	now := c.w.clock(r, at)
	in := make(map[string]bool, len(hunts))
	for _, h := range hunts {
		in[h] = true
	}
	var out []Row
	c.w.mu.Lock()
	seen := map[string]bool{}
	for i := range c.w.leases {
		key := c.w.leases[i].HuntID
		if h, _, _ := strings.Cut(key, "#"); !in[h] || seen[key] {
			continue
		}
		seen[key] = true
		l, _, ok := c.w.newestLease(key, r, at)
		if !ok || !l.Until.After(now) {
			continue
		}
		if m, has := c.w.newestWatermark(key, r, at); has && m.wm >= l.Fire {
			continue
		}
		out = append(out, l)
	}
	c.w.mu.Unlock()
	c.net()
	return out, nil
}

// errSimUnknown is a write's answer that leaves its outcome unknown (Transient, not Refused).
var errSimUnknown = &clickhouse.Exception{Code: 210, Name: "NETWORK_ERROR", Message: "sim: answer lost"}

// simRun is what a run of a won fire read and stores: findings of [start, end) under run.
type simRun struct {
	hunt       string
	fire       int64
	start, end int64
	run        uuid.UUID
}

// insertFindings stores one finding per source event of the run's window, keyed by run. An
// insert may time out on the client while the server applies it much later: the attempt
// then fails, and its rows land after it died.
func (c *simClient) insertFindings(run simRun) error {
	c.net()
	land := time.Now()
	late := c.w.p.lateFindings && c.rng.IntN(8) == 0
	if late {
		land = land.Add(time.Duration(c.rng.Int64N(int64(2 * c.w.p.leaseOr()))))
	}
	c.w.mu.Lock()
	if c.w.findings == nil {
		c.w.findings = map[findingKey]time.Time{}
	}
	for e := run.start; e < run.end; e++ {
		k := findingKey{hunt: run.hunt, fire: run.fire, run: run.run, event: e}
		if t, ok := c.w.findings[k]; !ok || land.Before(t) {
			c.w.findings[k] = land
		}
	}
	c.w.mu.Unlock()
	if late {
		time.Sleep(time.Duration(c.rng.Int64N(int64(simSettle))))
		return errSimStore
	}
	c.net()
	return nil
}

// advance is store.Store.Advance: one compare-and-set insert evaluated on the replica the
// statement reaches, at its server time, then a read-back by run id. It reports whether the
// run's commit row was read back; an error when the statement or the read-back failed.
func (c *simClient) advance(l Lease, run simRun) (bool, error) {
	c.net()
	before, after := c.fault()
	done, refused := c.beginInsert("hunt_watermark")
	if refused != nil {
		c.net()
		return false, refused
	}
	if before {
		done()
	}
	if !before {
		r := c.replica()
		c.w.mu.Lock()
		at := time.Now()
		now := c.w.clock(r, at)
		m := c.w.p.mut
		cur, _, ok := c.w.newestLease(l.HuntID, r, at)
		leaseOK := ok && (m&mutNoLeaseOwnerCheck != 0 || (cur.ClaimID == l.ClaimID && cur.Fire == l.Fire)) &&
			(m&mutNoUntilCheck != 0 || cur.Until.After(now))
		newest, hasNewest := c.w.newestWatermark(l.HuntID, r, at)
		// The newest watermark must still be where the run's window starts (or there must
		// still be none, for a first run: what the claim verified), and below the new one.
		prev := run.start
		if m&mutPrevFromLease != 0 {
			prev = 0
			if l.HasWatermark {
				prev = l.Watermark
			}
		}
		wmOK := m&mutNoWatermarkCompare != 0 || (hasNewest == l.HasWatermark && (!l.HasWatermark || newest.wm == prev))
		c.w.mu.Unlock()
		// With commitMax, the compare runs at the statement's start and the row lands after
		// the insert's own duration (an INSERT … SELECT reads, then writes a part).
		if c.w.p.commitMax > 0 {
			time.Sleep(time.Duration(c.rng.Int64N(int64(c.w.p.commitMax) + 1)))
		}
		c.w.mu.Lock()
		// The run id is the insert's deduplication token: a retry of a commit that landed is
		// dropped whichever replica it reaches.
		dup := c.w.p.mut&mutNoCommitDedup == 0 && slices.ContainsFunc(c.w.watermarks, func(x simCommit) bool { return x.run == run.run })
		if simTrace != nil {
			simTrace("advance %s fire=%d [%d,%d) verified=%d/%t r=%d check=%s land=%s leaseOK=%t(newest %s until %s now %s) wmOK=%t(newest %d) dup=%t",
				l.HuntID, l.Fire-simFire, run.start-simFire, run.end-simFire, l.Watermark-simFire, l.HasWatermark, r, at.Format("05.000"), time.Now().Format("05.000"),
				leaseOK, cur.Owner, cur.Until.Format("05.000"), now.Format("05.000"), wmOK, newest.wm-simFire, dup)
		}
		if leaseOK && wmOK && run.end > prev && !dup {
			c.w.watermarks = append(c.w.watermarks, simCommit{hunt: l.HuntID, wm: run.end, start: run.start, run: run.run,
				claimID: l.ClaimID, updated: now, origin: r, commit: time.Now()})
			c.w.lastCommit = time.Now()
		}
		c.w.mu.Unlock()
		done()
	}
	c.net()
	if before || after {
		return false, errSimStore
	}
	// Read back (Committed): a separate round trip, maybe to a replica the row has not reached.
	c.net()
	r := c.replica()
	c.w.mu.Lock()
	at := time.Now()
	found := slices.ContainsFunc(c.w.watermarks, func(x simCommit) bool { return x.run == run.run && c.w.wmVisible(x, r, at) })
	c.w.mu.Unlock()
	c.net()
	return found, nil
}

// simClaimer is one pod: the claim protocol, and the runner's handling of what it wins.
type simClaimer struct {
	id    int
	seed  uint64
	w     *simWorld
	c     *simClient // the tick goroutine's connection
	proto *protocol
	out   *simOutcome

	mu          sync.Mutex
	pausedUntil time.Time
	jobs        uint64
}

// gate holds a goroutine of a paused process until the pause ends.
func (cl *simClaimer) gate() {
	cl.mu.Lock()
	d := time.Until(cl.pausedUntil)
	cl.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
}

// maybePause pauses the whole process, 1 time in 10 at each point, either for longer than a
// lease or (with a lease held) until just around its expiry, where a late write is most
// dangerous.
func (cl *simClaimer) maybePause(rng *rand.Rand, point string, l *Lease) {
	p := cl.w.p
	if !p.pauses || rng.IntN(10) != 0 {
		return
	}
	lease := p.leaseOr()
	d := lease + time.Duration(rng.Int64N(int64(lease)))
	if l != nil && rng.IntN(2) == 0 {
		if e := time.Until(l.Until) + time.Duration(rng.Int64N(int64(3*simSettle))) - 2*simSettle; e > 0 {
			d = e
		}
	}
	cl.mu.Lock()
	// Two jobs of the process may pause in the same instant: the longer pause wins, whichever
	// goroutine runs first, so a seed replays the same.
	if end := time.Now().Add(d); end.After(cl.pausedUntil) {
		cl.pausedUntil = end
	}
	cl.mu.Unlock()
	cl.out.note(func(o *simOutcome) { o.pauses[point]++ })
	time.Sleep(d)
}

// job is one won fire as runner/job.go holds it.
type simJob struct {
	mu    sync.Mutex
	lease Lease
	lost  bool
	stop  chan struct{}
}

func (j *simJob) current() Lease {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lease
}

func (j *simJob) markLost() {
	j.mu.Lock()
	j.lost = true
	j.mu.Unlock()
}

func (j *simJob) trusted() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return !j.lost && time.Now().Before(j.lease.Trusted)
}

// renewals is runner's startRenewal, on its own connection c: every lease/3, until the job stops; a lost lease, or
// failed renewals until the trust deadline, mark the job lost.
func (cl *simClaimer) renewals(j *simJob, c *simClient) {
	lease := cl.w.p.leaseOr()
	every := lease / 3
	next := every
	for {
		select {
		case <-j.stop:
			return
		case <-time.After(next):
		}
		// A paused process renews only when the pause ends: c's round trips wait at the gate.
		cur := j.current()
		nl, err := cl.renewer(c).renew(context.Background(), cur)
		switch {
		case err == nil:
			j.mu.Lock()
			j.lease = nl
			j.mu.Unlock()
			next = every
		case errors.Is(err, ErrLost):
			j.markLost()
			return
		case time.Until(cur.Trusted) <= 0:
			j.markLost()
			return
		default:
			// runner.startRenewal: a failed renewal is retried soon.
			next = max(time.Until(cur.Trusted)/4, 100*time.Millisecond)
		}
	}
}

// renewer is cl's protocol over the job's own connection c.
func (cl *simClaimer) renewer(c *simClient) *protocol {
	p := *cl.proto
	p.store = c
	return &p
}

func (cl *simClaimer) newClient() *simClient {
	cl.jobs++
	return &simClient{w: cl.w, rng: rand.New(rand.NewPCG(cl.seed, uint64(cl.id)<<32|cl.jobs)), cl: cl}
}

func randomUUID(rng *rand.Rand) uuid.UUID {
	var id uuid.UUID
	for j := range id {
		id[j] = byte(rng.UintN(256))
	}
	return id
}

// execute is runner.execute and runner.commit for one won lease, on connection c (its
// renewals on rc). snap is the watermark the
// tick's snapshot saw (used only under mutWindowFromSnapshot).
func (cl *simClaimer) execute(l Lease, c, rc *simClient, snap int64, snapHas bool) {
	p := cl.w.p
	j := &simJob{lease: l, stop: make(chan struct{})}
	var renew sync.WaitGroup
	renew.Go(func() { cl.renewals(j, rc) })
	var stopOnce sync.Once
	endRenewals := func() { stopOnce.Do(func() { close(j.stop) }); renew.Wait() }
	defer endRenewals()

	cl.maybePause(c.rng, "between verify and run", &l)
	if !j.trusted() {
		cl.out.note(func(o *simOutcome) { o.outcomes["lost before run"]++ })
		return
	}
	start, has := l.Watermark, l.HasWatermark
	if p.mut&mutWindowFromSnapshot != 0 {
		start, has = snap, snapHas
	}
	if !has {
		start = l.Fire - simInterval
	}
	start = min(start, l.Fire)
	run := simRun{hunt: l.HuntID, fire: l.Fire, start: start, end: l.Fire, run: randomUUID(c.rng)}
	time.Sleep(time.Duration(c.rng.Int64N(int64(2 * simSettle)))) // the hunt's query
	if err := c.insertFindings(run); err != nil {
		cl.out.note(func(o *simOutcome) { o.outcomes["failed (findings insert)"]++ })
		_ = c.Release(context.Background(), []Lease{j.current()})
		return
	}
	cl.maybePause(c.rng, "between run and commit", &l)
	// runner.commit: a lease already known lost commits nothing.
	j.mu.Lock()
	lost := j.lost
	j.mu.Unlock()
	if lost {
		cl.out.note(func(o *simOutcome) { o.outcomes["lost before commit"]++ })
		return
	}
	// runner.commit ends the renewals first: the commit spends the lease, and a renewal
	// landing after a peer's next claim would stand above it.
	endRenewals()
	budget := time.Now().Add(max(p.leaseOr(), time.Minute))
	wait, refusedWait := 250*time.Millisecond, 50*time.Millisecond
	for {
		if p.mut&mutNoTrustRecheck == 0 && !j.trusted() {
			cl.out.note(func(o *simOutcome) { o.outcomes["lost: past the trust deadline"]++ })
			return
		}
		// A pause after the trust check sends the statement late whatever the check said.
		cur := j.current()
		cl.maybePause(c.rng, "inside the commit (after the trust check)", &cur)
		ok, err := c.advance(j.current(), run)
		switch {
		case err == nil && ok:
			// The commit spent the lease: no release.
			cl.out.note(func(o *simOutcome) { o.outcomes["committed"]++ })
			return
		case err == nil:
			cl.out.note(func(o *simOutcome) { o.outcomes["fenced"]++ })
			return
		case time.Now().After(budget):
			cl.out.note(func(o *simOutcome) { o.outcomes["failed (commit budget)"]++ })
			_ = c.Release(context.Background(), []Lease{j.current()})
			return
		}
		// runner.durably: a refusal is retried sooner than an outage.
		if errors.Is(err, errSimRefused) {
			time.Sleep(c.jitter(refusedWait))
			refusedWait = min(2*refusedWait, time.Second)
			continue
		}
		time.Sleep(c.jitter(wait))
		wait = min(2*wait, 5*time.Second)
	}
}

// singleFire is the claim loop of single-fire scenarios: every round claims the one fire of
// every hunt.
func (cl *simClaimer) singleFire(hunts []Fire, spread time.Duration) {
	p := cl.w.p
	for range p.rounds {
		time.Sleep(time.Duration(cl.c.rng.Int64N(int64(spread))))
		res, err := cl.proto.claim(context.Background(), hunts)
		if err != nil {
			cl.out.note(func(o *simOutcome) { o.errs = append(o.errs, err.Error()) })
			return
		}
		cl.won(res.Won, nil)
	}
}

// won runs the won leases, each on its own goroutine as the runner's jobs, and waits for them.
func (cl *simClaimer) won(won []Lease, snaps map[string]View) {
	var wg sync.WaitGroup
	for _, l := range won {
		if simTrace != nil {
			simTrace("pod-%d won %s fire=%d wm=%d until=%s trusted=%s", cl.id, l.HuntID, l.Fire-simFire, l.Watermark-simFire, l.Until.Format("05.000"), l.Trusted.Format("05.000"))
		}
		cl.out.note(func(o *simOutcome) { o.wins[Fire{HuntID: l.HuntID, Fire: l.Fire}]++ })
		var snap int64
		var has bool
		if v, ok := snaps[l.HuntID]; ok {
			snap, has = v.Watermarks[l.HuntID]
		}
		// Clients are made here, in order, so each job's random source is the same on every
		// replay of the seed.
		c, rc := cl.newClient(), cl.newClient()
		wg.Go(func() { cl.execute(l, c, rc, snap, has) })
	}
	wg.Wait()
}

// ticks is the runner's tick loop in multi-fire scenarios: read a snapshot, pick each hunt's
// newest fire that has come and is above the snapshot's watermark, claim them in one batch,
// run what was won; until every fire is long past.
func (cl *simClaimer) ticks(hunts []string, until time.Time) {
	p := cl.w.p
	for time.Now().Before(until) {
		time.Sleep(time.Duration(cl.c.rng.Int64N(int64(time.Duration(simInterval)*time.Second/2) + 1)))
		snap, _ := cl.c.Read(context.Background(), hunts)
		k := (time.Now().Unix() - simFire) / simInterval
		if k < 0 {
			continue
		}
		fire := simFire + min(k, int64(p.fires-1))*simInterval
		var due []Fire
		for _, h := range hunts {
			if wm, ok := snap.Watermarks[h]; ok && wm >= fire {
				continue
			}
			due = append(due, Fire{HuntID: h, Fire: fire})
		}
		if len(due) == 0 {
			continue
		}
		cl.maybePause(cl.c.rng, "between snapshot and claim", nil)
		res, err := cl.proto.claim(context.Background(), due)
		if err != nil {
			cl.out.note(func(o *simOutcome) { o.errs = append(o.errs, err.Error()) })
			continue
		}
		snaps := map[string]View{}
		for _, l := range res.Won {
			snaps[l.HuntID] = snap
		}
		cl.won(res.Won, snaps)
	}
}

type simOutcome struct {
	mu         sync.Mutex
	wins       map[Fire]int     // claims won per (hunt, fire)
	commits    map[string]int   // commit rows per hunt (seeds excluded)
	watermarks map[string]int64 // newest watermark per hunt once everything replicated
	base       map[string]int64 // where each hunt's committed windows must start tiling
	hasBase    map[string]bool  // false: the hunt had no watermark (first run)
	outcomes   map[string]int   // per attempt: committed, fenced, lost …
	pauses     map[string]int   // pauses taken per point
	raced      bool             // at least two claim rows for one (hunt, fire) landed
	tiedReads  int              // reads that saw a tie on claimed at the top of a hunt
	rawFinds   int              // finding rows stored (every attempt)
	viewFinds  int              // finding rows the committed view shows
	refused    int              // inserts refused while a quorum insert was pending (refusals)
	busy       time.Duration    // from the start to the last commit row landing
	violations []string         // broken invariants
	errs       []string         // claim errors (the model's store never fails a claim)
}

func (o *simOutcome) note(f func(*simOutcome)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o)
}

func (o *simOutcome) winsOf(hunt string) int { return o.wins[Fire{HuntID: hunt, Fire: simFire}] }

func huntName(i int) string { return fmt.Sprintf("hunt-%d", i) }

// runScenario plays one scenario to the end inside a synctest bubble and checks the
// invariants of commits on the final state (everything replicated, every late insert landed).
func runScenario(t *testing.T, seed uint64, p simParams) *simOutcome {
	out := &simOutcome{wins: map[Fire]int{}, commits: map[string]int{}, watermarks: map[string]int64{},
		base: map[string]int64{}, hasBase: map[string]bool{}, outcomes: map[string]int{}, pauses: map[string]int{}}
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{p: p, findings: map[findingKey]time.Time{}}
		start := time.Now()
		hunts := make([]Fire, p.hunts)
		ids := make([]string, p.hunts)
		lease := p.leaseOr()
		for i := range hunts {
			id := huntName(i)
			hunts[i], ids[i] = Fire{HuntID: id, Fire: simFire}, id
			if !p.noSeed {
				w0 := simFire - 60
				if p.fires > 0 {
					w0 = simFire - simInterval
				}
				out.base[id], out.hasBase[id] = w0, true
				if p.clockJump {
					// An older commit written while its replica's clock ran an hour fast.
					w.watermarks = append(w.watermarks, simCommit{hunt: id, wm: w0 - simInterval, start: w0 - 2*simInterval,
						run: uuid.New(), updated: start.Add(time.Hour), commit: start.Add(-2 * time.Hour)})
				}
				w.watermarks = append(w.watermarks, simCommit{hunt: id, wm: w0, start: w0 - simInterval,
					updated: start.Add(-time.Hour), commit: start.Add(-time.Hour)})
			}
			if p.staleRow {
				w.addLease(Row{HuntID: id, Fire: simFire - 60, Owner: "dead-pod", ClaimID: uuid.New(),
					Claimed: start.Add(-10 * time.Minute), Until: start.Add(-5 * time.Minute)}, true, 0, start.Add(-10*time.Minute))
			}
		}
		seeded := len(w.watermarks)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var merger sync.WaitGroup
		if p.mergeEvery > 0 {
			mrng := rand.New(rand.NewPCG(seed, 0x3E7))
			merger.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(mrng.Int64N(int64(2*p.mergeEvery)) + 1)):
					}
					w.mu.Lock()
					w.merge(mrng.IntN(p.replicas), time.Now())
					w.mu.Unlock()
				}
			})
		}
		spread := p.startSpread
		if spread == 0 {
			spread = 2 * simSettle
		}
		until := start.Add(time.Duration(int64(p.fires)*simInterval)*time.Second + 3*lease)
		for i := range p.claimers {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			cl := &simClaimer{id: i, seed: seed, w: w, out: out}
			cl.c = &simClient{w: w, rng: rng, cl: cl}
			cl.proto = &protocol{store: cl.c, owner: fmt.Sprintf("pod-%d", i), lease: lease, provisional: p.provisional, settle: simSettle,
				log: slog.New(slog.NewTextHandler(io.Discard, nil)), newID: func() uuid.UUID { return randomUUID(rng) },
				jitter: cl.c.jitter}
			wg.Go(func() {
				if p.fires > 0 {
					cl.ticks(ids, until)
				} else {
					cl.singleFire(hunts, spread)
				}
			})
		}
		wg.Wait()
		close(stop)
		merger.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		out.tiedReads = w.tiedReads
		out.refused = w.refused
		if !w.lastCommit.IsZero() {
			out.busy = w.lastCommit.Sub(start)
		}
		claimRows := map[Fire]int{}
		for _, row := range w.leases {
			if row.claim && row.Owner != "dead-pod" {
				claimRows[Fire{HuntID: row.HuntID, Fire: row.Fire}]++
			}
		}
		for _, n := range claimRows {
			if n > 1 {
				out.raced = true
			}
		}
		end := time.Now().Add(24 * time.Hour) // everything replicated and landed by then
		for _, id := range ids {
			if m, ok := w.newestWatermark(id, 0, end); ok {
				out.watermarks[id] = m.wm
			}
		}
		for _, m := range w.watermarks[seeded:] {
			out.commits[m.hunt]++
		}
		out.violations = w.invariants(ids, w.watermarks[seeded:], out)
	})
	return out
}

// invariants checks the final state of a scenario: no fire has two commits; each hunt's
// committed windows tile from where it stood (each starts where the previous one ended); every
// committed run's findings are present, and the committed view shows each source event
// exactly once and nothing of an attempt that did not commit. Caller holds mu.
func (w *simWorld) invariants(hunts []string, commits []simCommit, out *simOutcome) []string {
	var bad []string
	committed := map[uuid.UUID]simCommit{}
	byHunt := map[string][]simCommit{}
	for _, m := range commits {
		committed[m.run] = m
		byHunt[m.hunt] = append(byHunt[m.hunt], m)
	}
	// The committed view: findings whose (hunt, run) has a commit row.
	view := map[findingKey]bool{}
	for k := range w.findings {
		out.rawFinds++
		if _, ok := committed[k.run]; ok || w.p.mut&mutViewAllAttempts != 0 {
			view[k] = true
		}
	}
	out.viewFinds = len(view)
	for _, h := range hunts {
		rows := byHunt[h]
		sort.SliceStable(rows, func(a, b int) bool { return rows[a].wm < rows[b].wm })
		next, has := out.base[h], out.hasBase[h]
		for i, m := range rows {
			if i > 0 && rows[i-1].wm == m.wm {
				bad = append(bad, fmt.Sprintf("%s: fire %d committed twice", h, m.wm-simFire))
			}
			if has && m.start != next {
				kind := "overlaps"
				if m.start > next {
					kind = "leaves a hole after"
				}
				bad = append(bad, fmt.Sprintf("%s: committed window [%d, %d) %s the previous one ending at %d",
					h, m.start-simFire, m.wm-simFire, kind, next-simFire))
			}
			next, has = m.wm, true
			for e := m.start; e < m.wm; e++ {
				if !view[findingKey{hunt: h, fire: m.wm, run: m.run, event: e}] {
					bad = append(bad, fmt.Sprintf("%s: committed run of fire %d lacks its finding of event %d", h, m.wm-simFire, e-simFire))
				}
			}
		}
		seen := map[int64]int{}
		for k := range view {
			if k.hunt != h {
				continue
			}
			seen[k.event]++
			if _, ok := committed[k.run]; !ok {
				bad = append(bad, fmt.Sprintf("%s: finding of event %d from uncommitted attempt of fire %d is visible",
					h, k.event-simFire, k.fire-simFire))
			}
		}
		for e, n := range seen {
			if n > 1 {
				bad = append(bad, fmt.Sprintf("%s: event %d has %d committed findings", h, e-simFire, n))
			}
		}
	}
	sort.Strings(bad)
	return slices.Compact(bad)
}

// summary is the first few violations of a scenario.
func (o *simOutcome) summary() string {
	v := o.violations
	if len(v) > 4 {
		v = append(v[:4:4], fmt.Sprintf("… %d more", len(o.violations)-4))
	}
	return strings.Join(v, "; ")
}

// scenarioCount is full, or at most 300 under -short.
func scenarioCount(full int) int {
	if testing.Short() {
		return min(full, 300)
	}
	return full
}

// simStats sums the scenarios of a test that must never find a double win.
type simStats struct {
	scenarios, fires, won, raced, fenced, tiedReads int
}

// noDoubleWins plays n seeded scenarios drawn by gen and fails at the first (hunt, fire) won
// twice, or at the first broken invariant of commits. A single win must commit the fire unless
// fencedOK (a late claim's orphan row may land over the winner, which then loses its lease
// and commits nothing: the fire stays owed).
func noDoubleWins(t *testing.T, n int, seedBase, stream uint64, fencedOK bool, gen func(*rand.Rand) simParams) simStats {
	t.Helper()
	var st simStats
	for i := range n {
		seed := seedBase + uint64(i)
		p := gen(rand.New(rand.NewPCG(seed, stream)))
		out := runScenario(t, seed, p)
		st.scenarios++
		st.tiedReads += out.tiedReads
		if out.raced {
			st.raced++
		}
		if len(out.violations) > 0 {
			t.Fatalf("seed %d: %s (%s)", seed, out.summary(), p)
		}
		for h := 0; h < p.hunts; h++ {
			hunt := huntName(h)
			st.fires++
			switch n := out.winsOf(hunt); {
			case n > 1:
				t.Fatalf("seed %d: %s won %d times with L=%s (%s)", seed, hunt, n, p.visibility(), p)
			case n == 1 && out.commits[hunt] == 0 && fencedOK:
				st.fenced++
			case n == 1:
				st.won++
				if out.commits[hunt] != 1 || out.watermarks[hunt] != simFire {
					t.Fatalf("seed %d: %s won once but commits=%d watermark=%d (%s)", seed, hunt, out.commits[hunt], out.watermarks[hunt], p)
				}
			}
		}
		if t.Failed() {
			break
		}
	}
	return st
}

// TestSimulationNoDoubleWinBelowBound: thousands of seeded scenarios with visibility lag below
// settle/2 never produce two winners for one (hunt, fire).
func TestSimulationNoDoubleWinBelowBound(t *testing.T) {
	t.Parallel()
	n := scenarioCount(1500)
	st := noDoubleWins(t, n, 0, 0xC1A1, false, func(rng *rand.Rand) simParams {
		p := genParams(rng, 0, simSettle/2)
		p.mergeEvery, p.stalls = 300*time.Millisecond, true
		if p.visibility() >= simSettle/2 {
			t.Fatalf("generator: L=%s", p.visibility())
		}
		withProvisional(rng, &p)
		return p
	})
	t.Logf("%d scenarios, %d fires: %d won exactly once, %d never won (all claims late or lost); %d scenarios raced (≥2 claim rows landed for one hunt)",
		st.scenarios, st.fires, st.won, st.fires-st.won, st.raced)
	// The property must not hold vacuously: most fires get a winner, and many scenarios race.
	if st.won < st.fires*3/4 {
		t.Fatalf("only %d of %d fires won: the simulation is not exercising the protocol", st.won, st.fires)
	}
	if st.raced < st.scenarios/10 {
		t.Fatalf("only %d of %d scenarios raced", st.raced, st.scenarios)
	}
}

// TestSimulationSingleEndpointAnyInsertLatency: on one endpoint (no replication lag) the
// protocol holds whatever the insert takes, up to three settles, because of the
// acknowledgement rule: a statement acknowledged a settle or more after it was sent does
// not count. Without the rule this test finds double wins.
func TestSimulationSingleEndpointAnyInsertLatency(t *testing.T) {
	t.Parallel()
	n := scenarioCount(1500)
	st := noDoubleWins(t, n, 2_000_000, 0x5106, true, func(rng *rand.Rand) simParams {
		p := genParams(rng, 0, 3*simSettle)
		p.insertMax = p.visibility()
		p.replicas, p.skew, p.lag = 1, p.skew[:1], [][]time.Duration{{0}}
		p.mergeEvery, p.stalls = 300*time.Millisecond, true
		withProvisional(rng, &p)
		return p
	})
	t.Logf("%d scenarios, %d fires: %d won and committed, %d won but fenced by a late claim's row (left owed), %d never won; %d scenarios raced",
		st.scenarios, st.fires, st.won, st.fenced, st.fires-st.won-st.fenced, st.raced)
	if st.won < st.fires/2 || st.raced < st.scenarios/10 {
		t.Fatalf("%d of %d fires won, %d of %d scenarios raced: the simulation is not exercising the protocol",
			st.won, st.fires, st.raced, st.scenarios)
	}
}

// TestSimulationTiesAcrossMerges: claimers start together on a store clock of 50 ms
// resolution, so claims often tie on claimed, while merges (keeping the last inserted of tied
// rows, not the greatest claim id) run about once a settle, so one verifier can read a tie and
// another the merged survivor alone. A tie at the top is lost for every claim in it; without
// that rule this test finds double wins. A survivor that wins after the merge can still have
// its commit refused by a replica the merge has not reached, where the tied loser is newest
// by claim id (seed 3,002,417, found in a run of 3,000): the fire stays owed, so that counts
// as fenced, not as a failure.
func TestSimulationTiesAcrossMerges(t *testing.T) {
	t.Parallel()
	n := scenarioCount(1500)
	st := noDoubleWins(t, n, 3_000_000, 0x7135, true, func(rng *rand.Rand) simParams {
		p := genParams(rng, 0, simSettle/2)
		p.resolution, p.mergeEvery, p.startSpread = 50*time.Millisecond, simSettle, 20*time.Millisecond
		p.netMax /= 10
		withProvisional(rng, &p)
		return p
	})
	t.Logf("%d scenarios, %d fires: %d won exactly once and committed, %d won but fenced by an unmerged tie, %d never won; %d reads saw a tie at the top",
		st.scenarios, st.fires, st.won, st.fenced, st.fires-st.won-st.fenced, st.tiedReads)
	if st.tiedReads < st.scenarios/10 {
		t.Fatalf("only %d tied reads in %d scenarios: ties are not exercised", st.tiedReads, st.scenarios)
	}
}
