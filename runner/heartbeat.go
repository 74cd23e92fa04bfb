package runner

import (
	"context"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

// HeartbeatEvery is the default of Options.HeartbeatEvery. A fixed period, not every
// CheckEvery ticks: status's liveness window (status.LiveWithin, 2 minutes) must hold whatever
// the tick, and at 30 s it is four missed beats. One single-row insert per runner per 30 s is
// negligible next to the claims.
const HeartbeatEvery = 30 * time.Second

// Heartbeater records a runner's heartbeat (store.Store implements it). A StateStore that
// does not implement it records none.
type Heartbeater interface {
	Heartbeat(ctx context.Context, h store.Heartbeat) error
}

// heartbeatState is the runner's own bookkeeping of its beats (r.mu held).
type heartbeatState struct {
	started  time.Time // first tick that read ClickHouse
	last     time.Time // local time of the last beat started
	inFlight bool
}

// heartbeat starts a beat when HeartbeatEvery has passed since the last one. The insert runs
// beside the tick, never in it: a slow or failing ClickHouse must not delay claims, and a
// failure is only counted and logged at debug (the next beat retries; status shows the gap).
// At most one beat is in flight; it ends with ctx or after max(HeartbeatEvery, 5s), when the
// next beat is due anyway.
func (r *Runner) heartbeat(ctx context.Context, set *hunt.Set) {
	hb, ok := r.store.(Heartbeater)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if r.hb.started.IsZero() {
		r.hb.started = now
	}
	if r.hb.inFlight || (!r.hb.last.IsZero() && now.Sub(r.hb.last) < r.opts.HeartbeatEvery) {
		r.mu.Unlock()
		return
	}
	r.hb.inFlight, r.hb.last = true, now
	beat := store.Heartbeat{Owner: r.opts.Owner, Version: r.opts.Version, HuntSet: r.opts.HuntSet,
		SetHash: set.Hash, Hunts: len(set.Enabled()), Started: r.hb.started, Beat: now}
	r.wg.Add(1) // a drain waits for it, so nothing writes after Start returns
	r.mu.Unlock()
	if r.opts.HuntFiles != nil {
		beat.HuntFiles = r.opts.HuntFiles()
	}
	go func() {
		defer r.wg.Done()
		bctx, cancel := context.WithTimeout(ctx, max(r.opts.HeartbeatEvery, 5*time.Second))
		err := hb.Heartbeat(bctx, beat)
		cancel()
		r.mu.Lock()
		r.hb.inFlight = false
		r.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			r.opts.Metrics.clickhouseError(ctx, stageHeartbeat)
			r.log.Debug("heartbeat failed; the next one retries", "error", err)
		}
	}()
}
