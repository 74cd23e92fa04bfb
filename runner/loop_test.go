package runner

import (
	"context"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

func TestOutageDelay(t *testing.T) {
	cases := []struct {
		tick     time.Duration
		failures int
		want     time.Duration
	}{
		{5 * time.Second, 1, 5 * time.Second},
		{5 * time.Second, 2, 10 * time.Second},
		{5 * time.Second, 3, 20 * time.Second},
		{5 * time.Second, 4, 30 * time.Second}, // capped at 30 s
		{5 * time.Second, 40, 30 * time.Second},
		{time.Second, 3, 4 * time.Second},
		{time.Second, 9, 8 * time.Second}, // capped at 8 ticks
		{time.Minute, 3, time.Minute},     // never below one tick
	}
	for _, tc := range cases {
		r := &Runner{opts: Options{Tick: tc.tick}}
		if got := r.outageDelay(tc.failures); got != tc.want {
			t.Errorf("outageDelay(tick %v, %d failures) = %v, want %v", tc.tick, tc.failures, got, tc.want)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	for name, o := range map[string]Options{
		"no owner":       {},
		"short lease":    {Owner: "a", Lease: time.Second},
		"negative tick":  {Owner: "a", Tick: -time.Second},
		"negative queue": {Owner: "a", MaxQueued: -1},
	} {
		if err := o.setDefaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	o := Options{Owner: "a"}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if o.Tick != 5*time.Second || o.Concurrency != 4 || o.MaxQueued != 0 || o.Lease != 5*time.Minute || o.Grace != 30*time.Second {
		t.Fatalf("defaults %+v", o)
	}
}

func TestReadyWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	set := testSet("x")
	r := &Runner{opts: Options{Tick: time.Second, Clock: func() time.Time { return now }}, source: func() *hunt.Set { return set }}
	if r.Ready() == nil {
		t.Fatal("ready before any snapshot")
	}
	r.lastOK = now.Add(-2 * time.Second)
	if err := r.Ready(); err != nil {
		t.Fatalf("not ready 2 s after a snapshot: %v", err)
	}
	r.lastOK = now.Add(-4 * time.Second)
	if r.Ready() == nil {
		t.Fatal("still ready 4 s (> 3 ticks) after the last snapshot")
	}
	set = nil
	r.lastOK = now
	if r.Ready() == nil {
		t.Fatal("ready with no hunts loaded")
	}
}

// The queue sizes itself to what the slots finish during two claim cycles, within bounds,
// unless MaxQueued fixes it.
func TestQueueTarget(t *testing.T) {
	r := &Runner{exec: newExecutor(Options{Concurrency: 4, Lease: 5 * time.Minute}, nil, nil)}
	for _, tc := range []struct {
		run, tick time.Duration
		want      int
	}{
		{0, 0, 4}, // nothing measured yet: one per slot
		{100 * time.Millisecond, time.Second, 80}, // ten runs per slot per claim cycle, two cycles
		{time.Second, 100 * time.Millisecond, 4},  // at least one per slot
		{time.Millisecond, 10 * time.Second, 128}, // at most thirty-two per slot
		{200 * time.Millisecond, 800 * time.Millisecond, 32},
	} {
		r.exec.runAvg, r.exec.tickAvg = tc.run, tc.tick
		if got := r.exec.queueTarget(); got != tc.want {
			t.Errorf("run %s, claim cycle %s: queue %d, want %d", tc.run, tc.tick, got, tc.want)
		}
	}
	r.exec.lease, r.exec.runAvg, r.exec.tickAvg = 3*time.Second, 100*time.Millisecond, 10*time.Second
	if got := r.exec.queueTarget(); got != 40 { // a third of the lease: ten runs per slot
		t.Errorf("short lease: queue %d, want 40", got)
	}
	r.exec.maxQueued = 3
	if got := r.exec.queueTarget(); got != 3 {
		t.Errorf("MaxQueued 3: queue %d", got)
	}
}

// holdRuns takes every run slot, so won fires stay queued (a test can count a tick's round
// trips, or change the world between claim and run); the returned function gives them back
// and starts the queue.
func holdRuns(t testing.TB, r *Runner) func() {
	t.Helper()
	if err := r.exec.sem.Acquire(context.Background(), int64(r.opts.Concurrency)); err != nil {
		t.Fatal(err)
	}
	return func() {
		r.exec.sem.Release(int64(r.opts.Concurrency))
		r.exec.dispatch()
	}
}
