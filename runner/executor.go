package runner

import (
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/hunt-runner/hunt-runner/lease"
)

// executor owns the run slots and the queue of won fires waiting for one: most overdue first,
// and its size decides how much a tick claims. It is safe for concurrent use: the tick
// enqueues and asks for capacity, finished runs dispatch the next, metrics read its counts.
type executor struct {
	concurrency int
	maxQueued   int           // Options.MaxQueued: 0 sizes the queue from the moving averages
	lease       time.Duration // a queued fire must start well within it (queueTarget)
	run         func(*job)    // runs one job to its recorded outcome (Runner.execute)
	release     func([]lease.Lease)

	sem  *semaphore.Weighted
	wg   sync.WaitGroup // running jobs
	wake chan struct{}  // finished runs ask for an early tick while backlog is set

	mu       sync.Mutex
	queue    []*job          // won, waiting for a run slot, most overdue first
	held     map[string]*job // lease key → job (queued or running)
	stopping bool
	backlog  bool          // the last tick left due fires unclaimed for lack of capacity
	runAvg   time.Duration // moving average of a run, start to commit
	tickAvg  time.Duration // moving average of a tick that claimed (snapshot + claim)
}

func newExecutor(o Options, run func(*job), release func([]lease.Lease)) *executor {
	return &executor{concurrency: o.Concurrency, maxQueued: o.MaxQueued, lease: o.Lease, run: run, release: release,
		sem: semaphore.NewWeighted(int64(o.Concurrency)), wake: make(chan struct{}, 1), held: map[string]*job{}}
}

// queueTarget is how many won fires may wait for a slot (e.mu held): Options.MaxQueued when
// set, otherwise what the slots finish during two claim cycles (Concurrency × 2 cycles ÷ run,
// from the moving averages), between Concurrency and 32 × Concurrency, and never more than
// the slots finish in a third of a lease, so a queued fire starts before its lease needs a
// renewal. Two cycles, because the next claim starts when half the target, one cycle's worth,
// is left queued (dispatch): the slots then never wait for a claim to settle.
func (e *executor) queueTarget() int {
	if e.maxQueued > 0 {
		return e.maxQueued
	}
	c := e.concurrency
	if e.runAvg <= 0 || e.tickAvg <= 0 {
		return c
	}
	n := 2 * int(int64(c)*int64(e.tickAvg)/int64(e.runAvg))
	n = min(n, int(int64(c)*int64(e.lease/3)/int64(e.runAvg)))
	return min(max(n, c), 32*c)
}

// capacity is how many more fires a tick may claim, recording whether due fires (due of
// them) are left unclaimed for lack of it: finished runs then wake the next tick early.
func (e *executor) capacity(due int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.concurrency + e.queueTarget() - len(e.held)
	e.backlog = due > max(c, 0)
	return c
}

// claimed folds the duration of a tick that claimed into the queue's sizing.
func (e *executor) claimed(d time.Duration) {
	e.mu.Lock()
	e.tickAvg = ewma(e.tickAvg, d)
	e.mu.Unlock()
}

// ewma folds d into the moving average avg (weight 1/8), starting at d.
func ewma(avg, d time.Duration) time.Duration {
	if avg == 0 {
		return d
	}
	return avg + (d-avg)/8
}

func (e *executor) isHeld(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.held[key]
	return ok
}

// heldBackfills counts the backfill chunks held (queued or running).
func (e *executor) heldBackfills() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, j := range e.held {
		if j.backfill != nil {
			n++
		}
	}
	return n
}

// counts is what metrics read: jobs running and queued.
func (e *executor) counts() (running, queued int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.held) - len(e.queue), len(e.queue)
}

// enqueue adds won jobs and starts as many as there are free slots; once the executor is
// stopping it releases them instead.
func (e *executor) enqueue(jobs []*job) {
	e.mu.Lock()
	if e.stopping {
		e.mu.Unlock()
		ls := make([]lease.Lease, 0, len(jobs))
		for _, j := range jobs {
			ls = append(ls, j.currentLease())
		}
		e.release(ls)
		return
	}
	for _, j := range jobs {
		e.held[j.key()] = j
		e.queue = append(e.queue, j)
		j.startRenewal()
	}
	liveFirst(e.queue)
	e.mu.Unlock()
	e.dispatch()
}

// dispatch starts queued jobs while run slots are free. It is called after enqueue and after
// every finished run, so the queue drains in order without a long-lived worker pool.
func (e *executor) dispatch() {
	for {
		e.mu.Lock()
		if e.stopping || len(e.queue) == 0 {
			e.mu.Unlock()
			return
		}
		if !e.sem.TryAcquire(1) {
			e.mu.Unlock()
			return
		}
		j := e.queue[0]
		e.queue = e.queue[1:]
		e.wg.Add(1)
		e.mu.Unlock()
		go func() {
			// Release the slot, start the next job, and only then leave the wait group, so a
			// drain or a test never sees zero running while the queue still holds work.
			defer e.wg.Done()
			defer e.dispatch()
			defer e.sem.Release(1)
			started := time.Now()
			e.run(j)
			e.mu.Lock()
			delete(e.held, j.key())
			e.runAvg = ewma(e.runAvg, time.Since(started))
			// Claim again, while due fires wait, once the queue is down to half its target, which
			// is what the slots finish during one claim cycle: the claim then lands before the
			// queue runs dry, and each claim still brings a cycle's worth (a claim costs a settle
			// whatever its size, so claiming for every finished run would cap throughput at a
			// fire per settle). Half the target, not the cycle itself: a target capped below two
			// cycles (MaxQueued, the caps) would otherwise wake a tick for every finished run.
			qt := e.queueTarget()
			free := e.concurrency + qt - len(e.held)
			wake := e.backlog && !e.stopping && free > 0 && len(e.queue) <= qt/2
			e.mu.Unlock()
			if wake {
				select {
				case e.wake <- struct{}{}:
				default:
				}
			}
		}()
	}
}

// stop ends claiming for good and hands back the jobs still queued, unstarted; it returns how
// many are running.
func (e *executor) stop() (queued []*job, running int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopping = true
	queued, e.queue = e.queue, nil
	for _, j := range queued {
		delete(e.held, j.key())
	}
	return queued, len(e.held)
}

func (e *executor) isStopping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopping
}
