package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// committer is the commit path of a finished run: the compare-and-set that commits it (with
// the read-back that settles an unknown answer), and the record of every outcome (the lease's
// release, hunt_state through the grouped writes, the hunt_run row, the log line). It holds
// no state of its own beyond its two groups of writes; it is safe for concurrent use by every
// run.
type committer struct {
	store   StateStore
	claimer Claimer
	states  *group[store.State] // hunt_state writes of concurrent runs, grouped
	commits *group[commitAttempt]
	opts    *Options
	log     *slog.Logger
}

func newCommitter(s StateStore, c Claimer, o *Options) *committer {
	cm := &committer{store: s, claimer: c, opts: o, log: o.Logger}
	cm.states = newGroup(together(s.SetStates), refusedWhole)
	cm.commits = newGroup(cm.advance, func(err error) bool {
		// A fence's verdict, or a trust that ran out, is the row's own, not the statement's.
		return refusedWhole(err) && !errors.Is(err, store.ErrFenced) && !errors.Is(err, lease.ErrLost)
	})
	return cm
}

// commitAttempt is one attempt of a run's commit in the commit group, and where the batch it
// went out in records when it was sent and its execution bound.
type commitAttempt struct {
	job   *job
	run   store.Run
	sent  *time.Time
	bound *time.Duration
}

// advance sends the attempts of one batch as one compare-and-set (store.Store.AdvanceAll).
// An attempt whose lease is past its trusted deadline is not sent (a peer may hold the
// lease); the batch's deadline is the earliest trust of those sent, so none is written after
// its own, and the statement's execution bound (store.CommitBound) follows from it.
func (c *committer) advance(ctx context.Context, items []commitAttempt) []error {
	errs := make([]error, len(items))
	var send []int
	var batch []store.Commit
	var deadline time.Time
	for i, it := range items {
		if !it.job.trusted() {
			it.job.markLost("the lease is past its trusted deadline")
			errs[i] = fmt.Errorf("%w: past the trusted deadline", lease.ErrLost)
			continue
		}
		l := it.job.currentLease()
		if !l.Trusted.IsZero() && (deadline.IsZero() || l.Trusted.Before(deadline)) {
			deadline = l.Trusted
		}
		send = append(send, i)
		batch = append(batch, store.Commit{Lease: l, Run: it.run})
	}
	if len(batch) == 0 {
		return errs
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.opts.Lease/3, 10*time.Second))
	defer cancel()
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	sent, bound := time.Now(), store.CommitBound(ctx)
	res := c.store.AdvanceAll(ctx, batch)
	for k, i := range send {
		*items[i].sent, *items[i].bound = sent, bound
		errs[i] = res[k]
	}
	return errs
}

// commit decides the run's outcome and, for a run that succeeded, commits it: one
// compare-and-set insert that moves the watermark and is the run's audit row (AdvanceAll, in a
// batch with the commits of the runs that finished meanwhile: the commit group). Every
// attempt, retries included, is made only while the lease is still trusted.
func (c *committer) commit(ctx context.Context, log logger, j *job, run store.Run, runErr error) (hunt.RunStatus, error) {
	switch {
	case j.isLost() || errors.Is(runErr, errLeaseLost):
		return hunt.RunLost, errLeaseLost
	case runErr != nil && j.runs.Err() != nil:
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
	err := c.durably(ctx, log, "commit the run", func(ctx context.Context) error {
		if d := time.Until(runningUntil); d > 0 && !lease.Sleep(ctx, d) {
			return ctx.Err()
		}
		if !runningUntil.IsZero() {
			// An earlier attempt's outcome is unknown and it can no longer be running: its row
			// decides. Sending again would put the commit in another batch, whose deduplication
			// token differs (store.Store.AdvanceAll), so it goes out only if that row is absent.
			landed, err := c.store.Committed(ctx, j.currentLease().HuntID, run.RunID)
			if err != nil {
				return fmt.Errorf("%w: read-back before a retry: %w", store.ErrUnknown, err)
			}
			if landed {
				return nil
			}
		}
		var sent time.Time
		var bound time.Duration
		err := c.commits.write(ctx, commitAttempt{job: j, run: run, sent: &sent, bound: &bound})
		if !sent.IsZero() && err != nil && !lease.Refused(err) {
			runningUntil = sent.Add(bound)
		}
		return err
	})
	switch {
	case err == nil:
		return done, runErr
	case errors.Is(err, store.ErrFenced), errors.Is(err, lease.ErrLost):
		// Lost is final even after an attempt whose outcome was unknown: the attempt that found
		// the trust gone first read that one's row back once it could no longer be running
		// (above), and found none, so none can land later.
		return hunt.RunLost, fmt.Errorf("commit refused: %w", err)
	case retryable(err):
		// The budget ran out with the outcome still unknown: the commit may have landed, so
		// nothing that says otherwise is written (no failure, no backoff, no release, no audit
		// row). A landed commit spent the lease; otherwise it expires.
		c.opts.Metrics.clickhouseError(ctx, stageCommit)
		return hunt.RunUnknown, fmt.Errorf("commit: %w", err)
	default:
		c.opts.Metrics.clickhouseError(ctx, stageCommit)
		return hunt.RunFailed, fmt.Errorf("commit: %w", err)
	}
}

// record writes what follows an outcome: the release of a failed attempt's lease, the state
// of the attempt's coordination key (the hunt's, or its backfill's: a chunk leaves the hunt's
// health and overrun count alone), the audit row of an attempt that did not commit, and the
// log line.
func (c *committer) record(ctx context.Context, log logger, span trace.Span, j *job, run store.Run, rep RunReport) {
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
				c.setState(ctx, log, store.State{HuntID: j.key(), Status: hunt.RunSucceeded, LastFire: j.fire})
			}
		} else {
			c.recordLiveSuccess(ctx, log, j, run, rep)
		}
		log.Info(what+" succeeded", "findings", rep.Rows, "findings_dropped", rep.Dropped,
			"window_start", rep.WindowStart, "window_end", rep.WindowEnd, "duration_seconds", rep.Duration.Seconds())
	case hunt.RunFailed:
		// The count and the backoff are derived on the server from the key's newest state row;
		// these are what this pod's snapshot expects them to be, for the log.
		failures := j.state.ConsecutiveFailures + 1
		d := backoffDelay(c.opts.Tick, h.IntervalSeconds(), failures)
		base, limit := backoffRule(c.opts.Tick, h.IntervalSeconds())
		c.setState(ctx, log, store.State{HuntID: j.key(), Status: hunt.RunFailed, LastError: run.Error, LastFire: j.fire,
			BackoffBase: base, BackoffCap: limit, TooAggressive: j.state.TooAggressive})
		c.release(ctx, log, j)
		run.Finished = time.Now().UTC()
		c.recordRun(ctx, log, run)
		span.SetStatus(codes.Error, "failed")
		span.RecordError(logSafe(rep.Err))
		log.Error(what+" failed", "error", rep.Err, "consecutive_failures", failures, "backoff", d.String())
	case hunt.RunNoData, hunt.RunOverBudget: // live fires only: a backfill chunk over budget fails
		c.recordBlind(ctx, log, span, j, run, rep)
	case hunt.RunLost:
		// Someone else owns the fire now: no commit, no release, only the audit row.
		run.Finished = time.Now().UTC()
		c.recordRun(ctx, log, run)
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

// overran reports whether the hunt's next fire is already due as j's commit is about to be
// sent: the run overran (a live fire only; a requested one is off the schedule). The commit
// row carries it (store.Run.Overran), so that the cluster counts each fire's overrun exactly
// once and an overrunning hunt writes nothing more per fire.
func (c *committer) overran(j *job) bool {
	h := j.hunt
	return j.backfill == nil && !j.requested &&
		schedule.LatestFire(c.opts.ScheduleClock(j.serverNow()).Unix(), h.IntervalSeconds(), h.OffsetSeconds()) > j.fire
}

// recordLiveSuccess is what a live fire's commit adds: its gap's and its overrun's metrics and
// log lines, and the hunt's health transition.
func (c *committer) recordLiveSuccess(ctx context.Context, log logger, j *job, run store.Run, rep RunReport) {
	h := j.hunt
	if rep.GapEnd > rep.GapStart {
		c.opts.Metrics.gap(ctx, h.ID)
		log.Warn("gap: outage longer than max_catchup, skipped range recorded",
			"gap_start", unixUTC(rep.GapStart), "gap_end", unixUTC(rep.GapEnd), "max_catchup_seconds", h.MaxCatchupSeconds())
	}
	// A run longer than the interval itself can never keep up.
	st := j.state
	aggressive := rep.Duration > h.Interval
	if run.Overran {
		c.opts.Metrics.overrun(ctx, h.ID)
		log.Warn("overrun: the next fire came due before this run committed",
			"duration_seconds", rep.Duration.Seconds(), "interval_seconds", h.IntervalSeconds(), "too_aggressive", aggressive)
	}
	// hunt_state records health transitions: a healthy hunt staying healthy writes nothing
	// (one round trip less per run), overrunning or not, and a hunt without a row is healthy,
	// so its first success writes none either; the commit row carries its progress and its
	// overrun. (A late row of an older fire cannot land past this commit: store.SetStates.)
	if aggressive != st.TooAggressive || (st.Status != "" && st.Status != hunt.RunSucceeded) || st.ConsecutiveFailures != 0 ||
		st.LastError != "" || st.HasRetryAfter {
		c.setState(ctx, log, store.State{HuntID: h.ID, Status: hunt.RunSucceeded, LastFire: j.fire, TooAggressive: aggressive})
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

type logger interface {
	Info(string, ...any)
	Warn(string, ...any)
	Error(string, ...any)
}

// commitBudget bounds how long a finished run keeps retrying its commit writes through a
// ClickHouse outage: a lease, and at least a minute.
func (c *committer) commitBudget() time.Duration { return max(c.opts.Lease, time.Minute) }

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
func (c *committer) durably(ctx context.Context, log logger, what string, write func(context.Context) error) error {
	// A refusal before execution (another quorum insert pending on the table) clears as soon
	// as that insert is confirmed: it is retried sooner than an outage.
	wait, refusedWait := 250*time.Millisecond, 50*time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, min(c.opts.Lease/3, 10*time.Second))
		err := write(actx)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		if attempt == 1 {
			log.Warn("commit write failed; retrying until ClickHouse answers", "write", what, "error", err)
		}
		c.opts.Metrics.clickhouseError(ctx, stageCommit)
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
func (c *committer) recordRunOnce(run store.Run) func(context.Context) error {
	tried := false
	return func(ctx context.Context) error {
		if tried {
			if ok, err := c.store.Recorded(ctx, run); err != nil || ok {
				return err
			}
		}
		tried = true
		return c.store.RecordRun(ctx, run)
	}
}

// release hands back the lease of a fire that did not commit. Renewals end first: one landing
// after the release would hold the hunt again until it expired.
func (c *committer) release(ctx context.Context, log logger, j *job) {
	j.endRenewal()
	// One attempt: a lease that cannot be released simply expires.
	ctx, cancel := context.WithTimeout(ctx, min(c.opts.Lease/3, 10*time.Second))
	defer cancel()
	if err := c.claimer.Release(ctx, j.currentLease()); err != nil {
		if !errors.Is(err, lease.ErrFenced) && !errors.Is(err, lease.ErrLost) {
			c.opts.Metrics.clickhouseError(ctx, stageRelease)
		}
		log.Warn("lease release failed; it will expire", "error", err)
	}
}

func (c *committer) recordRun(ctx context.Context, log logger, run store.Run) {
	if err := c.durably(ctx, log, "record the run", c.recordRunOnce(run)); err != nil {
		c.opts.Metrics.clickhouseError(ctx, stageCommit)
		log.Error("recording the run failed", "status", run.Status, "error", err)
	}
}

func (c *committer) setState(ctx context.Context, log logger, st store.State) {
	if err := c.durably(ctx, log, "record the hunt state", func(ctx context.Context) error { return c.states.write(ctx, st) }); err != nil {
		c.opts.Metrics.clickhouseError(ctx, stageCommit)
		log.Error("recording the hunt state failed", "status", st.Status, "error", err)
	}
}

// recordBlind records the outcomes of a hunt that could not look: no_data (committed while a
// declared source was silent) and over_budget (stopped by its read budget). Both are states of
// the hunt in hunt_state, shown until a run succeeds again, and neither counts as a failure.
func (c *committer) recordBlind(ctx context.Context, log logger, span trace.Span, j *job, run store.Run, rep RunReport) {
	h := j.hunt
	st := j.state
	switch {
	case rep.Status == hunt.RunNoData:
		// The commit spent the lease. A hunt staying no_data for the same sources writes nothing.
		if st.Status != hunt.RunNoData || st.LastError != run.Error || st.ConsecutiveFailures != 0 || st.HasRetryAfter {
			c.setState(ctx, log, store.State{HuntID: h.ID, Status: hunt.RunNoData, LastError: run.Error, LastFire: j.fire,
				TooAggressive: st.TooAggressive})
		}
		log.Warn("hunt run committed with a silent source: state no_data until it speaks again", "findings", rep.Rows,
			"window_start", rep.WindowStart, "window_end", rep.WindowEnd, "reason", run.Error)
	case h.OnBudget == hunt.OnBudgetSkip:
		// Committed as a recorded gap: the hunt moves on; its next fire is due as usual.
		c.setState(ctx, log, store.State{HuntID: h.ID, Status: hunt.RunOverBudget, LastError: run.Error, LastFire: j.fire,
			TooAggressive: st.TooAggressive})
		run.Finished = time.Now().UTC()
		c.recordRun(ctx, log, run)
		c.opts.Metrics.gap(ctx, h.ID)
		span.SetStatus(codes.Error, "over_budget")
		log.Warn("hunt run stopped by its read budget; on_budget: skip recorded the window as a gap", "error", rep.Err,
			"max_rows_read", h.MaxRowsRead, "max_bytes_read", h.MaxBytesRead,
			"gap_start", unixUTC(run.WindowStart), "gap_end", unixUTC(run.WindowEnd))
	default:
		// The window stays owed. Running it again at once would read as much again: the hunt is
		// held off one interval (its next fire), then tried once more.
		c.setState(ctx, log, store.State{HuntID: h.ID, Status: hunt.RunOverBudget, LastError: run.Error, LastFire: j.fire,
			TooAggressive: st.TooAggressive, Hold: h.Interval})
		c.release(ctx, log, j)
		run.Finished = time.Now().UTC()
		c.recordRun(ctx, log, run)
		span.SetStatus(codes.Error, "over_budget")
		log.Error("hunt run stopped by its read budget; nothing committed, retried after one interval", "error", rep.Err,
			"max_rows_read", h.MaxRowsRead, "max_bytes_read", h.MaxBytesRead, "hold", h.Interval.String())
	}
}
