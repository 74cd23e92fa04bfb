package runner

import (
	"context"
	"log/slog"
	"sync"
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

// heartbeater writes the runner's heartbeat beside the tick. Safe for concurrent use; the
// tick calls beat, and a drain waits for the beat in flight.
type heartbeater struct {
	store   Heartbeater // nil: the store records no heartbeats
	opts    *Options
	log     *slog.Logger
	metrics *Metrics

	wg       sync.WaitGroup // the beat in flight
	mu       sync.Mutex
	started  time.Time // first tick that read ClickHouse
	last     time.Time // local time of the last beat started
	inFlight bool
}

func newHeartbeater(s StateStore, o *Options) *heartbeater {
	hb, _ := s.(Heartbeater)
	return &heartbeater{store: hb, opts: o, log: o.Logger, metrics: o.Metrics}
}

// beat starts a beat when HeartbeatEvery has passed since the last one. The insert runs
// beside the tick, never in it: a slow or failing ClickHouse must not delay claims, and a
// failure is only counted and logged at debug (the next beat retries; status shows the gap).
// At most one beat is in flight; it ends with ctx or after max(HeartbeatEvery, 5s), when the
// next beat is due anyway.
func (b *heartbeater) beat(ctx context.Context, set *hunt.Set) {
	if b.store == nil {
		return
	}
	now := time.Now()
	b.mu.Lock()
	if b.started.IsZero() {
		b.started = now
	}
	if b.inFlight || (!b.last.IsZero() && now.Sub(b.last) < b.opts.HeartbeatEvery) {
		b.mu.Unlock()
		return
	}
	b.inFlight, b.last = true, now
	beat := store.Heartbeat{Owner: b.opts.Owner, Version: b.opts.Version, HuntSet: b.opts.HuntSet,
		SetHash: set.Hash, Hunts: len(set.Enabled()), Started: b.started, Beat: now}
	b.wg.Add(1)
	b.mu.Unlock()
	if b.opts.HuntFiles != nil {
		beat.HuntFiles = b.opts.HuntFiles()
	}
	go func() {
		defer b.wg.Done()
		bctx, cancel := context.WithTimeout(ctx, max(b.opts.HeartbeatEvery, 5*time.Second))
		err := b.store.Heartbeat(bctx, beat)
		cancel()
		b.mu.Lock()
		b.inFlight = false
		b.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			b.metrics.clickhouseError(ctx, stageHeartbeat)
			b.log.Debug("heartbeat failed; the next one retries", "error", err)
		}
	}()
}
