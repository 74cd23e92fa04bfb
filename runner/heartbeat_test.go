package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/internal/serve"
	"github.com/hunt-runner/hunt-runner/status"
	"github.com/hunt-runner/hunt-runner/store"
)

type beatRow struct {
	version, set, hash string
	hunts              uint32
	lastTick, started  time.Time
	n                  uint64
}

func (e *env) beat(owner string) beatRow {
	e.t.Helper()
	var b beatRow
	e.scan(&b.n, "SELECT count() FROM hunt_runner_heartbeat WHERE owner = ?", owner)
	if b.n == 0 {
		return b
	}
	row := e.db.Conn.QueryRow(e.ctx, `SELECT argMax(version, last_tick), argMax(hunt_set, last_tick), argMax(set_hash, last_tick),
    argMax(hunts, last_tick), max(last_tick), argMax(started, last_tick) FROM hunt_runner_heartbeat WHERE owner = ?`, owner)
	if err := row.Scan(&b.version, &b.set, &b.hash, &b.hunts, &b.lastTick, &b.started); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// A running runner's heartbeat appears with what it loaded and keeps moving; while every
// heartbeat insert fails the runner keeps ticking (and counts the failures), and once the
// inserts succeed again the heartbeat moves on.
func TestHeartbeatFreshAndFailureHarmless(t *testing.T) {
	e := newPrivateEnv(t)
	tel, err := serve.NewTelemetry(e.ctx, serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(tel.Meter, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	set := testSet("set-hb",
		hunt.Hunt{ID: "a", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, Enabled: true},
		hunt.Hunt{ID: "b", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, Enabled: true})
	r := e.runner("pod-hb", set, func(o *Options) {
		o.Tick, o.HeartbeatEvery, o.Version, o.Metrics = 100*time.Millisecond, 100*time.Millisecond, "v1.2.3-test", m
	})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	chtest.Eventually(t, time.Minute, "the heartbeat appears", func() bool { return e.beat("pod-hb").n > 0 })
	first := e.beat("pod-hb")
	if first.version != "v1.2.3-test" || first.set != hunt.HuntSetDefault || first.hash != "set-hb" || first.hunts != 2 ||
		first.started.IsZero() || first.started.After(first.lastTick.Add(time.Minute)) {
		t.Fatalf("heartbeat %+v, want version v1.2.3-test, set default, hash set-hb, 2 hunts", first)
	}
	chtest.Eventually(t, time.Minute, "the heartbeat moves on", func() bool { return e.beat("pod-hb").lastTick.After(first.lastTick) })
	if b := e.beat("pod-hb"); !b.started.Equal(first.started) {
		t.Errorf("started moved from %v to %v while the runner kept running", first.started, b.started)
	}

	e.srv.SetFaults(t, ctl.FaultRule{Name: "hb", Kind: ctl.KindInsert, Match: "hunt_runner_heartbeat", Effect: ctl.FailBefore, Code: 252})
	fired := func() int64 {
		for _, st := range e.srv.FaultStats(t) {
			if st.Name == "hb" {
				return st.Fired
			}
		}
		return 0
	}
	chtest.Eventually(t, time.Minute, "heartbeat inserts fail", func() bool { return fired() >= 3 })
	r.mu.Lock()
	ticks := r.ticks
	r.mu.Unlock()
	stuck := e.beat("pod-hb").lastTick
	chtest.Eventually(t, time.Minute, "the runner ticks on while heartbeats fail", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.ticks > ticks+3
	})
	if err := r.Ready(); err != nil {
		t.Errorf("not ready while only heartbeats fail: %v", err)
	}
	if !strings.Contains(scrape(t, tel), `hunt_runner_clickhouse_errors_total{stage="heartbeat"}`) {
		t.Error("failed heartbeats are not counted in hunt_runner_clickhouse_errors_total")
	}

	// A heartbeat insert that hangs holds neither the tick nor a second beat.
	e.srv.SetFaults(t, ctl.FaultRule{Name: "hb", Kind: ctl.KindInsert, Match: "hunt_runner_heartbeat", Effect: ctl.DelayStart,
		Delay: time.Minute})
	chtest.Eventually(t, time.Minute, "a heartbeat insert is held", func() bool { return fired() == 1 })
	r.mu.Lock()
	ticks = r.ticks
	r.mu.Unlock()
	chtest.Eventually(t, time.Minute, "the runner ticks on while a heartbeat hangs", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.ticks > ticks+5
	})
	if n := fired(); n != 1 {
		t.Errorf("%d heartbeat inserts started while one hung, want 1", n)
	}
	e.srv.ClearFaults(t)
	chtest.Eventually(t, time.Minute, "the heartbeat moves on after the fault", func() bool { return e.beat("pod-hb").lastTick.After(stuck) })
	for _, id := range []string{"a", "b"} {
		chtest.Eventually(t, time.Minute, "hunt "+id+" commits", func() bool { _, ok := e.watermarkOf(id); return ok })
	}

	// status lists the running runner; once stopped, it drops out of the live list.
	rep, err := status.Read(e.ctx, store.New(e.db.Conn, e.db.Name), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runners) != 1 || rep.Runners[0].Owner != "pod-hb" || rep.Runners[0].Version != "v1.2.3-test" || rep.Runners[0].Hunts != 2 {
		t.Errorf("status runners %+v, want pod-hb", rep.Runners)
	}
	cancel()
	<-done
	stopped = true
	chtest.Eventually(t, time.Minute, "the stopped runner drops out of the live list", func() bool {
		live, err := status.LiveRunners(e.ctx, store.New(e.db.Conn, e.db.Name), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return len(live) == 0
	})
}

// Options default to the default hunt set and a 30 s heartbeat; a runner beats at most once
// per HeartbeatEvery however often it ticks.
func TestHeartbeatEvery(t *testing.T) {
	o := Options{Owner: "x"}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if o.HuntSet != hunt.HuntSetDefault || o.HeartbeatEvery != HeartbeatEvery {
		t.Errorf("defaults: hunt set %q, heartbeat every %v", o.HuntSet, o.HeartbeatEvery)
	}
	e := newEnv(t)
	r := e.runner("pod-once", testSet("h"), func(o *Options) { o.HeartbeatEvery = time.Hour })
	for range 3 {
		e.tickAndWait(r) // waits for the beat too
	}
	if n := e.count("SELECT count() FROM hunt_runner_heartbeat WHERE owner = 'pod-once'"); n != 1 {
		t.Errorf("%d heartbeat rows after 3 ticks within an hour, want 1", n)
	}
}

// skip counts a beat as just sent, so the next one is HeartbeatEvery away: a test that counts
// a tick's statements leaves the beat, which runs beside the tick, out.
func (b *heartbeater) skip() {
	b.mu.Lock()
	b.last = time.Now()
	b.mu.Unlock()
}
