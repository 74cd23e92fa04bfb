package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store"
)

// Claimer is the claim protocol as the runner uses it (lease.Coordinator implements it).
type Claimer interface {
	Claim(ctx context.Context, fires []lease.Fire) (lease.Result, error)
	// ClaimCapped is Claim holding the live leases of cp.Hunts (and their backfill keys) to
	// cp.Max across every claimer (Options.Cap).
	ClaimCapped(ctx context.Context, fires []lease.Fire, cp lease.Cap) (lease.Result, error)
	Renew(ctx context.Context, l lease.Lease) (lease.Lease, error)
	Release(ctx context.Context, l lease.Lease) error
}

// StateStore is the coordination state as the runner uses it (store.Store implements it).
type StateStore interface {
	// SnapshotOf reads the clock, the small tables in full and the rows of the hunts
	// candidates names (see memory).
	SnapshotOf(ctx context.Context, candidates func(now time.Time) []string) (store.Snapshot, error)
	AdvanceAll(ctx context.Context, commits []store.Commit) []error            // commits each run's WindowEnd and rows, one outcome each
	Committed(ctx context.Context, huntID string, run uuid.UUID) (bool, error) // the run's commit row is there
	RecordRun(ctx context.Context, r store.Run) error
	Recorded(ctx context.Context, r store.Run) (bool, error) // RecordRun's row is there
	SetStates(ctx context.Context, sts []store.State) error  // as few inserts as the URL cap allows

	// InsertFindings writes one attempt's findings in one insert and returns the driver's error
	// as is (storeFindings decides what may be sent again). ForeignPublishers reads which of
	// ids another hunt set than set publishes live, and that set (ownership.go).
	InsertFindings(ctx context.Context, f store.Findings) error
	ForeignPublishers(ctx context.Context, set string, ids []string) (map[string]string, error)
}

// Options configure a Runner. Zero values take the documented defaults.
type Options struct {
	// HuntConn runs the hunts' own SELECTs; nil means the coordination connection. In
	// production it is a separate, read-only identity (provision --role hunts), so a hunt can
	// read source data and nothing of hunt-runner's.
	HuntConn    driver.Conn
	Owner       string        // required: this runner's identity in lease rows (pod name)
	Database    string        // coordination database; default "hunt_runner"
	Tick        time.Duration // how often due fires are planned and claimed; default 5s
	Concurrency int           // runs in flight at once; default 4
	Lease       time.Duration // lease length, renewed every Lease/3 while held; default 5m
	Grace       time.Duration // how long running hunts may finish after shutdown starts; default 30s
	// MaxQueued is how many won fires may wait for a run slot. A tick claims at most
	// Concurrency + MaxQueued − (fires held), so a pod never hoards leases it cannot run soon
	// (peers, scaled up on the backlog, get the rest) and renews few leases. 0 sizes the queue
	// to what the run slots finish during two claim cycles (measured: see queueTarget), so the
	// slots never starve while a claim settles and nothing waits much longer than that.
	// When due fires were left unclaimed, a finished run triggers the next tick once the queue
	// is down to half its target.
	MaxQueued int

	// CheckEvery is how many ticks pass between checks of the published set hash and the
	// replica delay; default 12.
	CheckEvery int
	// Settle is the lease protocol's settle, exported next to the observed replica delay.
	Settle time.Duration

	// Version and HuntSet go into the runner's heartbeat (heartbeat.go); HuntSet defaults to
	// hunt.HuntSetDefault. HeartbeatEvery is the least time between beats; default HeartbeatEvery.
	Version        string
	HuntSet        string
	HeartbeatEvery time.Duration
	// HuntFiles, when set, gives the loaded hunt files' problems as JSON for the heartbeat,
	// so that `status` without a hunt source can show them.
	HuntFiles func() string

	Logger  *slog.Logger
	Metrics *Metrics         // nil: no metrics
	Tracer  trace.Tracer     // nil: no traces
	Clock   func() time.Time // local clock for backoff and readiness; default time.Now
	// ScheduleClock maps the server's clock, as each snapshot reads it, to the instant whose
	// fires are owed: which fire is latest, how far behind a hunt is, whether a run overran.
	// nil: the server's clock. Leases, backoff and pauses are always compared on the server's
	// clock, which wrote them. Tests pin it to a fixed instant so the fires, and so the
	// windows a run reads, never depend on the hour a test runs at.
	ScheduleClock func(server time.Time) time.Time

	// PublishedHash returns the set hash materialise last published; nil skips the check.
	PublishedHash func(ctx context.Context) (string, error)
	// ReplicaDelay returns the observed replication delay; nil skips it.
	ReplicaDelay func(ctx context.Context) (time.Duration, error)
	// OnRun, when set, is called after every finished attempt (dev prints it).
	OnRun func(RunReport)

	// MaxFindingBytes caps one finding's document: a longer one is stored as a truncation
	// record (FindingsQuery); default DefaultMaxFindingBytes, at least MinMaxFindingBytes.
	// MaxRunFindingsBytes caps what one run holds and stores, labels included: the rows past
	// it are dropped and counted; default DefaultMaxRunFindingsBytes. Both are enforced by
	// the server (the rows are never sent) and again by the runner's reader.
	MaxFindingBytes     int64
	MaxRunFindingsBytes int64

	// Cap is the most runs of this hunt set's hunts (live fires and backfill chunks) in flight
	// across every pod of the set at once: each holds a live lease while queued or running,
	// and a tick claims at most Cap − (live leases of the set), held exactly by the claim
	// (lease.Coordinator.ClaimCapped). Every pod of the set must run with the same Cap.
	// 0 (CapDefault): no cap.
	Cap int

	// Workloads are the workload classes of live fires and backfill chunks: each statement of
	// such a run (its source checks, its SELECT, its findings insert) carries the class as the
	// workload setting. Empty classes send none (attrib.WorkloadLiveDefault and friends).
	// The caller checks the server knows them (attrib.CheckWorkloads).
	Workloads attrib.Workloads
}

func (o *Options) setDefaults() error {
	if o.Owner == "" {
		return errors.New("runner: Owner is required")
	}
	if o.Database == "" {
		o.Database = chstore.DefaultDatabase
	}
	if o.Tick == 0 {
		o.Tick = 5 * time.Second
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Lease == 0 {
		o.Lease = 5 * time.Minute
	}
	if o.Grace == 0 {
		o.Grace = 30 * time.Second
	}
	if o.CheckEvery == 0 {
		o.CheckEvery = 12
	}
	if o.HuntSet == "" {
		o.HuntSet = hunt.HuntSetDefault
	}
	if o.HeartbeatEvery <= 0 {
		o.HeartbeatEvery = HeartbeatEvery
	}
	if o.MaxFindingBytes == 0 {
		o.MaxFindingBytes = DefaultMaxFindingBytes
	}
	if o.MaxRunFindingsBytes == 0 {
		o.MaxRunFindingsBytes = DefaultMaxRunFindingsBytes
	}
	switch {
	case o.Tick < 0:
		return fmt.Errorf("runner: tick %v must be positive", o.Tick)
	case o.Concurrency < 0:
		return fmt.Errorf("runner: concurrency %d must be positive", o.Concurrency)
	case o.Cap < 0:
		return fmt.Errorf("runner: cap %d must not be negative (0: no cap)", o.Cap)
	case o.MaxQueued < 0:
		return fmt.Errorf("runner: max queued %d must not be negative", o.MaxQueued)
	case o.Lease < 3*time.Second:
		return fmt.Errorf("runner: lease %v must be at least 3s (it is renewed every lease/3)", o.Lease)
	case o.Grace < 0:
		return fmt.Errorf("runner: grace %v must not be negative", o.Grace)
	case o.CheckEvery < 0:
		return fmt.Errorf("runner: check-every %d must be positive", o.CheckEvery)
	case o.MaxFindingBytes < MinMaxFindingBytes:
		return fmt.Errorf("runner: max finding bytes %d must be at least %d (a truncation record must fit)", o.MaxFindingBytes, MinMaxFindingBytes)
	case o.MaxRunFindingsBytes < o.MaxFindingBytes:
		return fmt.Errorf("runner: max run findings bytes %d must be at least max finding bytes %d", o.MaxRunFindingsBytes, o.MaxFindingBytes)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("runner")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.ScheduleClock == nil {
		o.ScheduleClock = func(server time.Time) time.Time { return server }
	}
	return nil
}

// Defaults of Options (the run command's flags use them too).
const (
	DefaultConcurrency = 4
	CapDefault         = 0 // no cap on the set's runs in flight
)

// Runner is the worker loop. Create it with New and run it with Start, once.
//
// It is made of parts that each own their state: the planner (due fires from a snapshot,
// and what the last plan left behind), ownership (hunts another set publishes), the claim
// protocol (Claimer), the executor (run slots and the queue of won fires), the commit path
// (commit.go: the compare-and-set, the outcome record, the grouped state writes), the
// heartbeater and the publication check. tick composes them once per tick on Start's
// goroutine; runs, renewals, heartbeats and metrics work beside it, each through the part it
// uses. Its methods are safe for concurrent use.
type Runner struct {
	huntConn driver.Conn // the hunts' SELECTs; everything on hunt-runner's tables goes through store
	claimer  Claimer
	store    StateStore
	source   Source
	opts     Options
	log      *slog.Logger

	planner *planner
	owners  *ownership
	exec    *executor
	hb      *heartbeater
	pub     *publication
	commits *committer
	memory  *memory         // what the last ticks read of each hunt (tick's goroutine only)
	runCtx  context.Context // what runs hang off: it outlives Start's by the grace period

	// The tick loop's own state: tick's goroutine only, but for what mu guards.
	outage  bool // the last snapshot failed
	capLost bool // the last claim released fires over the cap: the next tick is jittered
	mu      sync.Mutex
	lastOK  time.Time // local time of the last successful snapshot (Ready reads it)
	ticks   int
}

// New validates the options and returns a Runner.
func New(conn driver.Conn, claimer Claimer, store StateStore, source Source, opts Options) (*Runner, error) {
	if conn == nil || claimer == nil || store == nil || source == nil {
		return nil, errors.New("runner: conn, claimer, store and source are required")
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	huntConn := opts.HuntConn
	if huntConn == nil {
		huntConn = conn
	}
	r := &Runner{
		huntConn: huntConn, claimer: claimer, store: store, source: source, opts: opts,
		log:     opts.Logger,
		planner: newPlanner(opts.Tick),
		memory:  newMemory(),
		runCtx:  context.Background(),
	}
	r.owners = &ownership{store: store, opts: &r.opts, foreign: map[string]string{}}
	r.exec = newExecutor(opts, r.execute, r.releaseAll)
	r.hb = newHeartbeater(store, &r.opts)
	r.pub = &publication{opts: &r.opts, log: opts.Logger}
	r.commits = newCommitter(store, claimer, &r.opts)
	if opts.Metrics != nil {
		opts.Metrics.observe(r)
	}
	return r, nil
}

// Tick is the effective tick (Options.Tick after defaults).
func (r *Runner) Tick() time.Duration { return r.opts.Tick }

// Ready reports why the runner is not ready, or nil: hunts must be loaded and ClickHouse must
// have answered a snapshot within the last three ticks.
func (r *Runner) Ready() error {
	if r.source() == nil {
		return errors.New("hunt definitions not loaded yet")
	}
	r.mu.Lock()
	last := r.lastOK
	r.mu.Unlock()
	if last.IsZero() {
		return errors.New("ClickHouse not reached yet")
	}
	if age := r.opts.Clock().Sub(last); age > r.readyWindow() {
		return fmt.Errorf("ClickHouse not reached for %v", age.Round(time.Second))
	}
	return nil
}

func (r *Runner) readyWindow() time.Duration {
	w := 3 * r.opts.Tick
	if w < 3*time.Second {
		w = 3 * time.Second
	}
	return w
}

// Start ticks until ctx ends, then drains: no new claims, running hunts get Options.Grace to
// finish, the rest are cancelled. It returns nil after a clean drain.
func (r *Runner) Start(ctx context.Context) error {
	// Runs outlive ctx by up to the grace period, so they hang off their own context.
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	r.runCtx = runCtx

	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			r.drain(cancelRuns)
			return nil
		case <-timer.C:
		case <-r.exec.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		if err := r.tick(ctx); err != nil && ctx.Err() == nil {
			failures++
			timer.Reset(r.outageDelay(failures))
			continue
		}
		failures = 0
		next := r.opts.Tick
		if r.capLost {
			// Claimers that released each other's claims over the cap must not meet again on
			// the next tick: pods started together tick in step.
			next = lease.Jitter(next)
		}
		timer.Reset(next)
	}
}

// outageDelay backs the tick off while ClickHouse is unreachable: tick, 2×tick … capped at
// min(8×tick, 30s) (never below one tick), so recovery is noticed quickly.
func (r *Runner) outageDelay(failures int) time.Duration {
	limit := 8 * r.opts.Tick
	if limit > 30*time.Second {
		limit = 30 * time.Second
	}
	if limit < r.opts.Tick {
		limit = r.opts.Tick
	}
	d := r.opts.Tick
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// drain stops claiming, releases leases won but not started, waits up to Grace for running
// hunts and cancels whatever is still running after that.
func (r *Runner) drain(cancelRuns context.CancelFunc) {
	queued, running := r.exec.stop()
	r.log.Info("runner stopping", "running", running, "queued_released", len(queued), "grace", r.opts.Grace.String())
	ls := make([]lease.Lease, 0, len(queued))
	for _, j := range queued {
		j.endRenewal() // none may land after the release
		ls = append(ls, j.currentLease())
	}
	r.releaseAll(ls)
	done := make(chan struct{})
	go func() { r.exec.wg.Wait(); r.hb.wg.Wait(); close(done) }()
	grace := time.NewTimer(r.opts.Grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		r.log.Warn("grace period over: cancelling running hunts; their leases will expire", "grace", r.opts.Grace.String())
		cancelRuns()
		<-done
	}
	r.log.Info("runner stopped")
}

// tick plans and claims once. An error means ClickHouse could not be read (the caller backs off).
func (r *Runner) tick(ctx context.Context) error {
	start, began := r.opts.Clock(), time.Now()
	ctx, span := r.opts.Tracer.Start(ctx, "hunt-runner.tick")
	defer span.End()
	defer func() { r.opts.Metrics.tickDone(ctx, time.Since(start)) }()

	set := r.source()
	if set == nil {
		span.SetAttributes(attribute.Bool("hunts_loaded", false))
		return nil
	}
	snap, err := r.store.SnapshotOf(ctx, func(now time.Time) []string {
		return r.memory.candidates(set, r.opts.ScheduleClock(now), now)
	})
	snapLocal := time.Now()
	if err != nil {
		r.opts.Metrics.clickhouseError(ctx, stageSnapshot)
		span.RecordError(err)
		span.SetStatus(codes.Error, "snapshot")
		first := !r.outage
		r.outage = true
		if first {
			r.log.Error("ClickHouse unavailable: claims paused", "error", err)
		}
		return fmt.Errorf("snapshot: %w", err)
	}
	if r.outage {
		r.log.Info("ClickHouse reachable again: claims resume")
	}
	r.mu.Lock()
	r.outage = false
	r.lastOK = r.opts.Clock()
	r.ticks++
	check := r.ticks%r.opts.CheckEvery == 1 || r.opts.CheckEvery == 1
	r.mu.Unlock()
	if r.exec.isStopping() {
		return nil
	}
	r.hb.beat(ctx, set)

	at := r.opts.ScheduleClock(snap.Now)
	r.memory.learn(snap, set, at)
	state := r.memory.view(snap)
	p := r.planner.planOn(snap.Now, state, set, r.memory.attention(snap, set), at, r.exec.isHeld)
	r.planner.remember(p, set)
	r.opts.Metrics.huntsLoaded(r, set)
	span.SetAttributes(attribute.Int("hunts", len(set.Enabled())), attribute.Int("due", len(p.Due)),
		attribute.Int("leased", p.Leased), attribute.Int("backoff", p.BackOff))
	if check {
		r.pub.check(ctx, set)
	}
	capacity := r.exec.capacity(len(p.Due))
	if len(p.Due) > capacity {
		p.Due = p.Due[:max(capacity, 0)] // most overdue first: the rest waits for a slot
	}
	p.Due = append(p.Due, r.planBackfills(snap, set, capacity-len(p.Due))...) // below live fires
	if len(p.Due) > 0 {
		if p.Due, err = r.owners.ownDue(ctx, set, p.Due); err != nil {
			span.RecordError(err)
			r.log.Warn("claims skipped this tick: who publishes the due hunts could not be read", "error", err)
			return nil
		}
	}

	p.Due = r.capDue(ctx, snap, set, p.Due)

	if len(p.Due) == 0 {
		r.log.Debug("tick: nothing due", "hunts", len(set.Enabled()), "leased", p.Leased, "backoff", p.BackOff, "busy", p.Busy)
		return nil
	}

	fires := make([]lease.Fire, len(p.Due))
	byKey := make(map[lease.Fire]dueFire, len(p.Due))
	for i, d := range p.Due {
		fires[i] = lease.Fire{HuntID: d.key(), Fire: d.Fire}
		byKey[fires[i]] = d
	}
	// A claim cut by shutdown mid-settle would leave rows that hold their hunts until the
	// lease expires (minutes); finish it instead, and hand back what it won.
	claimCtx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), r.opts.Lease/2)
	var res lease.Result
	if r.opts.Cap > 0 {
		res, err = r.claimer.ClaimCapped(claimCtx, fires, lease.Cap{Max: r.opts.Cap, Hunts: capScope(set)})
	} else {
		res, err = r.claimer.Claim(claimCtx, fires)
	}
	cancelClaim()
	r.opts.Metrics.capDeferredFires(ctx, capStageClaim, res.OverCap)
	r.capLost = res.OverCap > 0
	if ctx.Err() != nil {
		r.releaseAll(res.Won)
		return nil
	}
	r.opts.Metrics.claimInserted(ctx, res.InsertTook)
	r.opts.Metrics.claims(ctx, claimWon, len(res.Won))
	r.opts.Metrics.claims(ctx, claimLost, len(res.Lost))
	r.opts.Metrics.claims(ctx, claimAlreadyRun, len(res.AlreadyRun))
	r.opts.Metrics.claims(ctx, claimError, len(res.Failed))
	if err == nil {
		err = res.Err
	}
	if err != nil {
		// Leases in res.Won are still valid even when part of the batch failed.
		r.opts.Metrics.clickhouseError(ctx, stageClaim)
		span.RecordError(err)
		r.log.Warn("claim failed", "fires", len(fires), "won", len(res.Won), "error", err)
	}
	span.SetAttributes(attribute.Int("won", len(res.Won)), attribute.Int("lost", len(res.Lost)),
		attribute.Int("already_run", len(res.AlreadyRun)))
	r.log.Debug("tick claimed", "due", len(p.Due), "won", len(res.Won), "lost", len(res.Lost),
		"already_run", len(res.AlreadyRun), "failed", len(res.Failed))
	r.exec.claimed(time.Since(began))
	if len(res.Won) == 0 {
		return nil
	}
	// Keep the plan's order (most overdue first) for the queue.
	won := make(map[lease.Fire]lease.Lease, len(res.Won))
	for _, l := range res.Won {
		won[lease.Fire{HuntID: l.HuntID, Fire: l.Fire}] = l
	}
	var jobs []*job
	for _, f := range fires {
		l, ok := won[f]
		if !ok {
			continue
		}
		d := byKey[f]
		jobs = append(jobs, r.newJob(d, l, stateOf(snap, state, d), snap.Now, snapLocal))
	}
	r.exec.enqueue(jobs)
	return nil
}

// capDue keeps at most Cap − (live leases of the set's hunts and their backfill keys, as the
// snapshot saw them) of due, most overdue first (live fires before backfill chunks). The
// snapshot only plans: ClaimCapped's read after the verify is what holds the cap.
func (r *Runner) capDue(ctx context.Context, snap store.Snapshot, set *hunt.Set, due []dueFire) []dueFire {
	if r.opts.Cap <= 0 || len(due) == 0 {
		return due
	}
	held := 0
	inSet := map[string]bool{}
	for _, h := range set.Hunts {
		inSet[h.ID] = true
		if st, ok := snap.Hunts[h.ID]; ok && st.LeaseHeld(snap.Now) {
			held++
		}
	}
	for _, b := range snap.Backfills {
		if inSet[b.HuntID] && b.Progress.LeaseHeld(snap.Now) {
			held++
		}
	}
	room := max(r.opts.Cap-held, 0)
	if len(due) <= room {
		return due
	}
	r.opts.Metrics.capDeferredFires(ctx, capStagePlan, len(due)-room)
	r.log.Debug("due fires held back by the cap", "cap", r.opts.Cap, "held", held, "due", len(due), "claimed", room)
	return due[:room]
}

// capScope is the cap's scope: every loaded hunt of the set, disabled ones too (a hunt disabled
// by a reload may still be running a fire its lease holds).
func capScope(set *hunt.Set) []string {
	out := make([]string, len(set.Hunts))
	for i, h := range set.Hunts {
		out[i] = h.ID
	}
	return out
}

// releaseAll hands back leases that will not be run (shutdown), so peers need not wait for
// them to expire.
func (r *Runner) releaseAll(ls []lease.Lease) {
	for _, l := range ls {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.claimer.Release(ctx, l); err != nil {
			r.log.Warn("release of an unstarted lease failed; it will expire", "hunt_id", l.HuntID, "fire", l.Fire, "error", err)
		}
		cancel()
	}
}
