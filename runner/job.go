package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// RunReport describes one finished attempt (for Options.OnRun).
type RunReport struct {
	HuntID      string
	Fire        int64
	RunID       uuid.UUID
	Status      hunt.RunStatus
	Requested   bool
	Backfill    string    // the backfill's id, for a backfill chunk
	WindowStart time.Time // data window actually read (delay applied)
	WindowEnd   time.Time
	GapStart    int64 // skipped range, when GapEnd > GapStart
	GapEnd      int64
	Rows        uint64 // findings stored
	Dropped     uint64 // findings past the hunt's max_findings, not stored
	Duration    time.Duration
	Err         error
}

// job is one won fire: queued, then running, with its lease renewed from the moment it was won.
type job struct {
	r         *Runner
	hunt      *hunt.Hunt
	fire      int64
	requested bool
	backfill  *backfillChunk  // nil for a live fire
	state     store.HuntState // as read by the tick that claimed it (a backfill's: its key's)
	// serverAt maps the process clock onto the server's: the tick's snapshot time and the
	// local time it was read at. Used only to tell whether a run overran its interval.
	snapNow, snapLocal time.Time

	mu       sync.Mutex
	lease    lease.Lease
	lost     bool
	ctx      context.Context // cancelled when the lease is lost
	cancel   context.CancelFunc
	stopOnce sync.Once
	stopCh   chan struct{}
	renewing sync.WaitGroup // the renewal goroutine
}

func (r *Runner) newJob(d dueFire, l lease.Lease, st store.HuntState, snapNow, snapLocal time.Time) *job {
	ctx, cancel := context.WithCancel(r.runCtx)
	return &job{r: r, hunt: d.Hunt, fire: d.Fire, requested: d.Requested, backfill: d.Backfill, state: st, lease: l,
		snapNow: snapNow, snapLocal: snapLocal,
		ctx: ctx, cancel: cancel, stopCh: make(chan struct{})}
}

func (j *job) currentLease() lease.Lease {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lease
}

func (j *job) isLost() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lost
}

func (j *job) stopRenewal() { j.stopOnce.Do(func() { close(j.stopCh) }) }

// endRenewal stops the renewals and waits for one in flight: after it, no renewal row of
// this lease can land. A commit spends the lease and frees the hunt for its next fire, and a
// renewal landing after a peer's claim of that fire would stand above the claim.
func (j *job) endRenewal() {
	j.stopRenewal()
	j.renewing.Wait()
}

// serverNow estimates the server's clock from the tick's snapshot and the process clock.
func (j *job) serverNow() time.Time { return j.snapNow.Add(time.Since(j.snapLocal)) }

// trusted reports whether the lease may still be written under: not lost, and before its
// process-clock trust deadline.
func (j *job) trusted() bool {
	l := j.currentLease()
	return !j.isLost() && (l.Trusted.IsZero() || time.Now().Before(l.Trusted))
}

// startRenewal renews the lease every lease/3 until stopRenewal. A renewal that reports the
// lease lost cancels the run; one that fails otherwise is retried soon (a quarter of the trust
// left, at least 100 ms), and the run is cancelled only when the lease can no longer be
// trusted, so one slow answer from a loaded ClickHouse does not cost the fire.
func (j *job) startRenewal() {
	every := j.r.opts.Lease / 3
	j.renewing.Add(1)
	go func() {
		defer j.renewing.Done()
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-j.stopCh:
				return
			case <-j.ctx.Done():
				return
			case <-t.C:
			}
			cur := j.currentLease()
			left := time.Until(cur.Trusted)
			if left <= 0 {
				j.markLost("renewals failed until the lease ran out")
				return
			}
			ctx, cancel := context.WithTimeout(j.ctx, min(every, left))
			nl, err := j.r.claimer.Renew(ctx, cur)
			cancel()
			switch {
			case err == nil:
				j.mu.Lock()
				j.lease = nl
				j.mu.Unlock()
				t.Reset(every)
			case errors.Is(err, lease.ErrLost):
				j.markLost("renewal found the lease taken")
				return
			default:
				j.r.opts.Metrics.clickhouseError(j.ctx, stageRenew)
				j.r.log.Warn("lease renewal failed; retrying", "hunt_id", j.hunt.ID, "fire", unixUTC(j.fire),
					"claim_id", cur.ClaimID, "trusted_for", time.Until(cur.Trusted).Round(time.Millisecond).String(), "error", err)
				t.Reset(max(time.Until(cur.Trusted)/4, 100*time.Millisecond))
			}
		}
	}()
}

func (j *job) markLost(why string) {
	j.mu.Lock()
	j.lost = true
	cl := j.lease.ClaimID
	j.mu.Unlock()
	j.r.log.Warn("lease lost: cancelling the run, writing nothing more", "hunt_id", j.hunt.ID,
		"fire", j.fire, "claim_id", cl, "reason", why)
	j.cancel()
}

// execute runs one won fire and commits it. It never returns an error: every outcome is
// recorded (metrics, hunt_run, hunt_state) and logged here.
func (r *Runner) execute(j *job) {
	defer j.stopRenewal()
	defer j.cancel()
	h := j.hunt
	l := j.currentLease()
	// The window starts where the claim's verify read saw progress, not where the tick's
	// snapshot did: a peer may have committed in between, and the commit compares against it.
	w := runWindowAfter(h, l.Watermark, l.HasWatermark, l.WatermarkInterval, j.fire)
	if j.backfill != nil {
		w = backfillWindow(h, j.backfill, l, j.fire)
	}
	runID := uuid.New()
	ctx, span := r.opts.Tracer.Start(j.ctx, "hunt-runner.run")
	defer span.End()
	span.SetAttributes(attribute.String("hunt_id", h.ID), attribute.Int64("fire", j.fire),
		attribute.String("run_id", runID.String()), attribute.String("claim_id", l.ClaimID.String()),
		attribute.Bool("requested", j.requested))
	log := r.log.With("hunt_id", h.ID, "fire", j.fire, "claim_id", l.ClaimID, "run_id", runID)

	startedLocal := time.Now()
	run := store.Run{HuntID: h.ID, Fire: j.fire, RunID: runID, Owner: r.opts.Owner,
		WindowStart: w.Start, WindowEnd: w.End, Started: startedLocal.UTC(), Kind: hunt.KindScheduled,
		Interval: h.IntervalSeconds(), Revision: h.Revision()}
	if j.requested {
		run.Kind = hunt.KindRequest
	}
	if j.backfill != nil {
		run.Kind = hunt.KindBackfill
	}
	if w.hasGap() {
		run.GapStart, run.GapEnd = w.GapStart, w.GapEnd
	}
	res, err := r.runHunt(ctx, j, runID, w)
	run.RowsWritten, run.FindingsDropped = uint64(len(res.docs)), res.dropped
	run.ExceptionHits = res.hits

	// The commit must not be cut by a lease loss noticed meanwhile (the compare-and-set
	// decides). Its writes are retried through a ClickHouse outage (see durably) until
	// commitBudget, or until shutdown cancels the runs after the grace period; the commit
	// itself only while its lease is still trusted (renewals have ended by then).
	commitCtx, cancel := context.WithTimeout(trace.ContextWithSpan(r.runCtx, span), r.commitBudget())
	defer cancel()
	run.Status, err = r.commit(commitCtx, log, j, run, err)
	if run.Status == hunt.RunSucceeded && len(res.silent) > 0 {
		run.Status = hunt.RunNoData // committed: nothing is examined twice, but the hunt is blind
		run.Error = noDataMessage(res.silent)
	}
	rep := RunReport{HuntID: h.ID, Fire: j.fire, RunID: runID, Requested: j.requested, Status: run.Status, Err: err,
		WindowStart: w.DataStart, WindowEnd: w.DataEnd, Rows: run.RowsWritten, Dropped: run.FindingsDropped,
		Duration: time.Since(startedLocal)}
	if j.backfill != nil {
		rep.Backfill = j.backfill.ID
	}
	if w.hasGap() {
		rep.GapStart, rep.GapEnd = w.GapStart, w.GapEnd
	}
	if err != nil {
		run.Error = err.Error()
	}
	if run.Status == hunt.RunOverBudget {
		run.RowsWritten, run.FindingsDropped = 0, 0
	}
	r.record(commitCtx, log, span, j, run, rep)
	r.opts.Metrics.runDone(ctx, h.ID, run.Kind, rep.Status, rep.Duration, rep.Rows)
	if r.opts.OnRun != nil {
		r.opts.OnRun(rep)
	}
}

// runHunt runs the hunt's query and stores what it found under runID, unless the lease can no
// longer be trusted (queued too long, or renewals failing).
func (r *Runner) runHunt(ctx context.Context, j *job, runID uuid.UUID, w window) (found, error) {
	if !j.trusted() {
		j.markLost("the lease was past its trusted deadline before the run started")
		return found{}, errLeaseLost
	}
	kind := attrib.Live
	if j.backfill != nil {
		kind = attrib.Backfill
	}
	// Freshness is about the live feed: a backfill reads the past, whatever the source does now.
	var silent []hunt.Source
	if j.backfill == nil {
		var err error
		if silent, err = r.silentSources(ctx, j.hunt, j.fire, runID, w); err != nil {
			return found{}, err
		}
	}
	res, err := r.query(ctx, j.hunt, j.fire, runID, w, kind)
	res.silent = silent
	if err != nil {
		return res, err
	}
	if res.dropped > 0 {
		r.opts.Metrics.findingsDropped(ctx, j.hunt.ID, res.dropped)
	}
	return res, r.storeFindings(ctx, j.hunt, j.fire, runID, res.docs, kind)
}

var errLeaseLost = errors.New("lease lost during the run")

// commit decides the run's outcome and, for a run that succeeded, commits it: one
// compare-and-set insert that moves the watermark and is the run's audit row (Advance). Every
// attempt, retries included, is made only while the lease is still trusted.
func (r *Runner) commit(ctx context.Context, log logger, j *job, run store.Run, runErr error) (hunt.RunStatus, error) {
	switch {
	case j.isLost() || errors.Is(runErr, errLeaseLost):
		return hunt.RunLost, errLeaseLost
	case runErr != nil && r.runCtx.Err() != nil:
		return hunt.RunCancelled, runErr // shutdown cut the run: commit nothing, the lease expires
	// A backfill chunk over its budget fails like any error (its backoff, docs/runner.md).
	case runErr != nil && overBudget(runErr) && j.backfill == nil && j.hunt.OnBudget == hunt.OnBudgetSkip:
		run = skipWindow(run) // commit the window as a recorded gap, below
	case runErr != nil && overBudget(runErr) && j.backfill == nil:
		return hunt.RunOverBudget, runErr // the window stays owed; record holds the hunt off
	case runErr != nil:
		return hunt.RunFailed, runErr
	}
	done := hunt.RunSucceeded
	if runErr != nil {
		done = hunt.RunOverBudget
	}
	run.Status = done
	// The lease is trusted from its last renewal on; the commit, retries included, must fit
	// in what is left of it.
	j.endRenewal()
	// An attempt whose outcome is unknown may still be running on the server until its
	// execution bound has passed; the next one waits for that, so two attempts of one run are
	// never in flight together (each would pass a compare that the other has not landed yet).
	var runningUntil time.Time
	err := r.durably(ctx, log, "commit the run", func(ctx context.Context) error {
		if d := time.Until(runningUntil); d > 0 && !lease.Sleep(ctx, d) {
			return ctx.Err()
		}
		if !j.trusted() {
			// Renewals failed for longer than the lease can be trusted: a peer may hold it.
			j.markLost("the lease is past its trusted deadline")
			return fmt.Errorf("%w: past the trusted deadline", lease.ErrLost)
		}
		l := j.currentLease()
		if !l.Trusted.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, l.Trusted)
			defer cancel()
		}
		sent := time.Now()
		bound := store.CommitBound(ctx)
		err := r.store.Advance(ctx, l, run)
		if err != nil && !lease.Refused(err) {
			runningUntil = sent.Add(bound)
		}
		return err
	})
	if err != nil && !runningUntil.IsZero() && (errors.Is(err, lease.ErrLost) || retryable(err)) {
		// An attempt's outcome stayed unknown and no later attempt settled it (trust ran out
		// first, or the budget did): that attempt may have landed. Once it can no longer be
		// running, its row decides; a run is never recorded lost, or failed, beside its commit.
		switch landed, rerr := r.landed(ctx, j, run, runningUntil); {
		case rerr == nil && landed:
			return done, runErr
		case rerr != nil:
			r.opts.Metrics.clickhouseError(ctx, stageCommit)
			return hunt.RunUnknown, fmt.Errorf("commit: %w (read-back: %v)", err, rerr)
		}
	}
	switch {
	case err == nil:
		return done, runErr
	case errors.Is(err, store.ErrFenced), errors.Is(err, lease.ErrLost):
		return hunt.RunLost, fmt.Errorf("commit refused: %w", err)
	case retryable(err):
		// The budget ran out with the outcome still unknown: the commit may have landed, so
		// nothing that says otherwise is written (no failure, no backoff, no release, no audit
		// row). A landed commit spent the lease; otherwise it expires.
		r.opts.Metrics.clickhouseError(ctx, stageCommit)
		return hunt.RunUnknown, fmt.Errorf("commit: %w", err)
	default:
		r.opts.Metrics.clickhouseError(ctx, stageCommit)
		return hunt.RunFailed, fmt.Errorf("commit: %w", err)
	}
}

// landed reads back whether run committed, once an attempt whose outcome is unknown can no
// longer be running on the server (until, its execution bound): reading is safe whatever the
// lease, so it is retried like a commit write while ctx (the commit budget) allows.
func (r *Runner) landed(ctx context.Context, j *job, run store.Run, until time.Time) (bool, error) {
	if !lease.Sleep(ctx, time.Until(until)) {
		return false, ctx.Err()
	}
	var landed bool
	err := r.durably(ctx, r.log, "read back the commit", func(ctx context.Context) (err error) {
		landed, err = r.store.Committed(ctx, j.currentLease().HuntID, run.RunID)
		return err
	})
	return landed, err
}

// record writes what follows an outcome: the release of a failed attempt's lease, the state
// of the attempt's coordination key (the hunt's, or its backfill's: a chunk leaves the hunt's
// health and overrun count alone), the audit row of an attempt that did not commit, and the
// log line.
func (r *Runner) record(ctx context.Context, log logger, span trace.Span, j *job, run store.Run, rep RunReport) {
	h := j.hunt
	what := "hunt run"
	if j.backfill != nil {
		what = "backfill chunk"
		log = withBackfill{log, j.backfill.ID}
	}
	switch rep.Status {
	case hunt.RunSucceeded: // the commit spent the lease: it frees the hunt without a release
		if j.backfill != nil {
			if j.state.ConsecutiveFailures != 0 || j.state.HasRetryAfter {
				r.setState(ctx, log, store.State{HuntID: j.key(), Status: hunt.RunSucceeded, LastFire: j.fire})
			}
		} else {
			r.recordLiveSuccess(ctx, log, j, rep)
		}
		log.Info(what+" succeeded", "findings", rep.Rows, "findings_dropped", rep.Dropped,
			"window_start", rep.WindowStart, "window_end", rep.WindowEnd, "duration_seconds", rep.Duration.Seconds())
	case hunt.RunFailed:
		// The count and the backoff are derived on the server from the key's newest state row;
		// these are what this pod's snapshot expects them to be, for the log.
		failures := j.state.ConsecutiveFailures + 1
		d := backoffDelay(r.opts.Tick, h.IntervalSeconds(), failures)
		base, limit := backoffRule(r.opts.Tick, h.IntervalSeconds())
		r.setState(ctx, log, store.State{HuntID: j.key(), Status: hunt.RunFailed, LastError: run.Error, LastFire: j.fire,
			BackoffBase: base, BackoffCap: limit, TooAggressive: j.state.TooAggressive})
		r.release(ctx, log, j)
		run.Finished = time.Now().UTC()
		r.recordRun(ctx, log, run)
		span.SetStatus(codes.Error, "failed")
		span.RecordError(logSafe(rep.Err))
		log.Error(what+" failed", "error", rep.Err, "consecutive_failures", failures, "backoff", d.String())
	case hunt.RunNoData, hunt.RunOverBudget: // live fires only: a backfill chunk over budget fails
		r.recordBlind(ctx, log, span, j, run, rep)
	case hunt.RunLost:
		// Someone else owns the fire now: no commit, no release, only the audit row.
		run.Finished = time.Now().UTC()
		r.recordRun(ctx, log, run)
		span.SetStatus(codes.Error, "lost")
		log.Warn(what+" lost its lease; nothing committed", "error", rep.Err)
	case hunt.RunCancelled:
		span.SetStatus(codes.Error, "cancelled")
		log.Warn(what+" cancelled by shutdown; nothing committed, the lease will expire", "error", rep.Err)
	case hunt.RunUnknown:
		span.SetStatus(codes.Error, "unknown")
		log.Error(what+"'s commit outcome stayed unknown; nothing more recorded (hunt_runs shows it if it landed)", "error", rep.Err)
	}
}

// recordLiveSuccess is what a live fire's commit adds: its gap's metric and log line, the
// overrun count, and the hunt's health transition.
func (r *Runner) recordLiveSuccess(ctx context.Context, log logger, j *job, rep RunReport) {
	h := j.hunt
	if rep.GapEnd > rep.GapStart {
		r.opts.Metrics.gap(ctx, h.ID)
		log.Warn("gap: outage longer than max_catchup, skipped range recorded",
			"gap_start", unixUTC(rep.GapStart), "gap_end", unixUTC(rep.GapEnd), "max_catchup_seconds", h.MaxCatchupSeconds())
	}
	// Overruns are counted here, by the one run that committed the fire, so the cluster counts
	// each exactly once: the run overran when the hunt's next fire came due before it
	// committed. A run longer than the interval itself can never keep up.
	st := j.state
	overran := !j.requested && schedule.LatestFire(r.opts.ScheduleClock(j.serverNow()).Unix(), h.IntervalSeconds(), h.OffsetSeconds()) > j.fire
	aggressive := rep.Duration > h.Interval
	if overran {
		r.opts.Metrics.overrun(ctx, h.ID)
		log.Warn("overrun: the next fire came due before this run committed", "overrun_count_before", st.OverrunCount,
			"duration_seconds", rep.Duration.Seconds(), "interval_seconds", h.IntervalSeconds(), "too_aggressive", aggressive)
	}
	// hunt_state records health transitions: a healthy hunt staying healthy writes nothing
	// (one round trip less per run); the commit row carries its progress. The overrun is
	// counted by the server, once for this fire (store.State.Overran).
	if overran || aggressive != st.TooAggressive || st.Status != hunt.RunSucceeded || st.ConsecutiveFailures != 0 ||
		st.LastError != "" || st.HasRetryAfter {
		r.setState(ctx, log, store.State{HuntID: h.ID, Status: hunt.RunSucceeded, LastFire: j.fire,
			Overran: overran, TooAggressive: aggressive})
	}
}

// withBackfill adds a backfill's id to every line of a logger.
type withBackfill struct {
	logger
	id string
}

func (l withBackfill) Info(msg string, args ...any) {
	l.logger.Info(msg, append(args, "backfill_id", l.id)...)
}
func (l withBackfill) Warn(msg string, args ...any) {
	l.logger.Warn(msg, append(args, "backfill_id", l.id)...)
}
func (l withBackfill) Error(msg string, args ...any) {
	l.logger.Error(msg, append(args, "backfill_id", l.id)...)
}

func unixUTC(s int64) string { return time.Unix(s, 0).UTC().Format(time.RFC3339) }

type logger interface {
	Info(string, ...any)
	Warn(string, ...any)
	Error(string, ...any)
}

// commitBudget bounds how long a finished run keeps retrying its commit writes through a
// ClickHouse outage: a lease, and at least a minute.
func (r *Runner) commitBudget() time.Duration { return max(r.opts.Lease, time.Minute) }

// retryable tells a write that may succeed when sent again (no answer, a refusal before
// execution, an answer that leaves the outcome unknown: lease.Transient) from one whose answer
// is final (a definite exception, or a fence: retrying changes nothing). Every commit write is
// safe to repeat: the watermark write is fenced, refuses a second row of its run and is read
// back by run id, a hunt_run row is looked up by run id before it is written again, and a
// hunt_state row is fenced on its fire.
func retryable(err error) bool {
	return errors.Is(err, store.ErrUnknown) || lease.Transient(err)
}

// durably runs one commit write, retrying after a jittered backoff (250 ms doubling to 5 s)
// while it fails in a retryable way and ctx allows. An outage between the hunt query and its
// commit must not leave a watermark without its hunt_run row, nor lose the run's outcome; and
// writers refused together (several pods' quorum inserts into one table) must not collide again.
func (r *Runner) durably(ctx context.Context, log logger, what string, write func(context.Context) error) error {
	// A refusal before execution (another quorum insert pending on the table) clears as soon
	// as that insert is confirmed: it is retried sooner than an outage.
	wait, refusedWait := 250*time.Millisecond, 50*time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, min(r.opts.Lease/3, 10*time.Second))
		err := write(actx)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		if attempt == 1 {
			log.Warn("commit write failed; retrying until ClickHouse answers", "write", what, "error", err)
		}
		r.opts.Metrics.clickhouseError(ctx, stageCommit)
		var d time.Duration
		if lease.Refused(err) {
			d, refusedWait = refusedWait, min(2*refusedWait, time.Second)
		} else {
			d, wait = wait, min(2*wait, 5*time.Second)
		}
		if !lease.Sleep(ctx, lease.Jitter(d)) {
			return err
		}
	}
}

// recordRunOnce is a RecordRun that may be retried: hunt_run is a plain MergeTree (an audit
// log), so an insert that landed but whose answer was lost must not be written again. Before a
// retry it looks the row up by run_id (one read, on the retry path only).
func (r *Runner) recordRunOnce(run store.Run) func(context.Context) error {
	tried := false
	return func(ctx context.Context) error {
		if tried {
			if ok, err := r.store.Recorded(ctx, run); err != nil || ok {
				return err
			}
		}
		tried = true
		return r.store.RecordRun(ctx, run)
	}
}

// release hands back the lease of a fire that did not commit. Renewals end first: one landing
// after the release would hold the hunt again until it expired.
func (r *Runner) release(ctx context.Context, log logger, j *job) {
	j.endRenewal()
	// One attempt: a lease that cannot be released simply expires.
	ctx, cancel := context.WithTimeout(ctx, min(r.opts.Lease/3, 10*time.Second))
	defer cancel()
	if err := r.claimer.Release(ctx, j.currentLease()); err != nil {
		if !errors.Is(err, lease.ErrFenced) && !errors.Is(err, lease.ErrLost) {
			r.opts.Metrics.clickhouseError(ctx, stageRelease)
		}
		log.Warn("lease release failed; it will expire", "error", err)
	}
}

func (r *Runner) recordRun(ctx context.Context, log logger, run store.Run) {
	if err := r.durably(ctx, log, "record the run", r.recordRunOnce(run)); err != nil {
		r.opts.Metrics.clickhouseError(ctx, stageCommit)
		log.Error("recording the run failed", "status", run.Status, "error", err)
	}
}

func (r *Runner) setState(ctx context.Context, log logger, st store.State) {
	if err := r.durably(ctx, log, "record the hunt state", func(ctx context.Context) error { return r.states.write(ctx, st) }); err != nil {
		r.opts.Metrics.clickhouseError(ctx, stageCommit)
		log.Error("recording the hunt state failed", "status", st.Status, "error", err)
	}
}
