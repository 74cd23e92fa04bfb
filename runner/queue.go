package runner

import (
	"context"
	"time"

	"github.com/hunt-runner/hunt-runner/lease"
)

// The run queue: won fires wait here for one of Options.Concurrency run slots, most overdue
// first, and its size decides how much a tick claims.

// queueTarget is how many won fires may wait for a slot (r.mu held): Options.MaxQueued when
// set, otherwise what the slots finish during two claim cycles (Concurrency × 2 cycles ÷ run,
// from the moving averages), between Concurrency and 32 × Concurrency, and never more than
// the slots finish in a third of a lease, so a queued fire starts before its lease needs a
// renewal. Two cycles, because the next claim starts when half the target, one cycle's worth,
// is left queued (dispatch): the slots then never wait for a claim to settle.
func (r *Runner) queueTarget() int {
	if r.opts.MaxQueued > 0 {
		return r.opts.MaxQueued
	}
	c := r.opts.Concurrency
	if r.runAvg <= 0 || r.tickAvg <= 0 {
		return c
	}
	n := 2 * int(int64(c)*int64(r.tickAvg)/int64(r.runAvg))
	n = min(n, int(int64(c)*int64(r.opts.Lease/3)/int64(r.runAvg)))
	return min(max(n, c), 32*c)
}

// ewma folds d into the moving average avg (weight 1/8), starting at d.
func ewma(avg, d time.Duration) time.Duration {
	if avg == 0 {
		return d
	}
	return avg + (d-avg)/8
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

func (r *Runner) isHeld(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.held[id]
	return ok
}

// enqueue adds won jobs and starts as many as there are free slots.
func (r *Runner) enqueue(jobs []*job) {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		ls := make([]lease.Lease, 0, len(jobs))
		for _, j := range jobs {
			ls = append(ls, j.currentLease())
		}
		r.releaseAll(ls)
		return
	}
	for _, j := range jobs {
		r.held[j.key()] = j
		r.queue = append(r.queue, j)
		j.startRenewal()
	}
	liveFirst(r.queue)
	r.mu.Unlock()
	r.dispatch()
}

// dispatch starts queued jobs while run slots are free. It is called after enqueue and after
// every finished run, so the queue drains in order without a long-lived worker pool.
func (r *Runner) dispatch() {
	for {
		r.mu.Lock()
		if r.stopping || len(r.queue) == 0 {
			r.mu.Unlock()
			return
		}
		if !r.sem.TryAcquire(1) {
			r.mu.Unlock()
			return
		}
		j := r.queue[0]
		r.queue = r.queue[1:]
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			// Release the slot, start the next job, and only then leave the wait group, so a
			// drain or a test never sees zero running while the queue still holds work.
			defer r.wg.Done()
			defer r.dispatch()
			defer r.sem.Release(1)
			started := time.Now()
			r.execute(j)
			r.mu.Lock()
			delete(r.held, j.key())
			r.runAvg = ewma(r.runAvg, time.Since(started))
			// Claim again, while due fires wait, once the queue is down to half its target, which
			// is what the slots finish during one claim cycle: the claim then lands before the
			// queue runs dry, and each claim still brings a cycle's worth (a claim costs a settle
			// whatever its size, so claiming for every finished run would cap throughput at a
			// fire per settle). Half the target, not the cycle itself: a target capped below two
			// cycles (MaxQueued, the caps) would otherwise wake a tick for every finished run.
			qt := r.queueTarget()
			free := r.opts.Concurrency + qt - len(r.held)
			wake := r.backlog && !r.stopping && free > 0 && len(r.queue) <= qt/2
			r.mu.Unlock()
			if wake {
				select {
				case r.wake <- struct{}{}:
				default:
				}
			}
		}()
	}
}
