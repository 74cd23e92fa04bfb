package runner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/lease"
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

	runs context.Context // what every run hangs off: ended by shutdown after the grace period

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
	return &job{r: r, runs: r.runCtx, hunt: d.Hunt, fire: d.Fire, requested: d.Requested, backfill: d.Backfill, state: st, lease: l,
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
	commitCtx, cancel := context.WithTimeout(trace.ContextWithSpan(r.runCtx, span), r.commits.commitBudget())
	defer cancel()
	run.Overran = err == nil && r.commits.overran(j)
	run.Status, err = r.commits.commit(commitCtx, log, j, run, err)
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
	r.commits.record(commitCtx, log, span, j, run, rep)
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

func unixUTC(s int64) string { return time.Unix(s, 0).UTC().Format(time.RFC3339) }
