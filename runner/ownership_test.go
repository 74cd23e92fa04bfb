package runner

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/serve"
)

// publishAs writes id's hunt_schedule row as set's materialise would (live, or a tombstone).
func (e *env) publishAs(set string, h hunt.Hunt, live bool) {
	e.t.Helper()
	enabled := 0
	if live {
		enabled = 1
	}
	e.exec("INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated, hunt_set) SELECT ?, ?, ?, ?, 'h', now64(6), ?",
		h.ID, h.IntervalSeconds(), h.OffsetSeconds(), enabled, set)
}

// Two hunt sets share a database. team-b's runner loads a file with an id team-a publishes: it
// never claims it (no lease row, no run), says so once in its log and in a metric, and runs
// its own hunts, an id nobody publishes and one team-a retired. team-a's runner then runs its
// hunt, whose fire team-b left alone.
func TestRunnerNeverClaimsAnotherSetsHunt(t *testing.T) {
	e := newEnv(t)
	mk := func(id string) hunt.Hunt {
		return hunt.Hunt{ID: id, Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	}
	mine, retired, shared, unpublished := mk("mine"), mk("retired"), mk("shared"), mk("unpublished")
	e.publishAs("team-b", mine, true)
	e.publishAs("team-a", retired, true)
	e.publishAs("team-a", retired, false) // team-a retired it: free to take over
	e.publishAs("team-a", shared, true)

	var logs lockedBuffer
	tel, err := serve.NewTelemetry(e.ctx, serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(tel.Meter, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := e.runner("pod-b", testSet("b", mine, retired, shared, unpublished), func(o *Options) {
		o.HuntSet, o.Metrics = "team-b", m
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	e.tickAndWait(b)
	e.tickAndWait(b) // shared is still due: refused again, logged once
	for _, id := range []string{"mine", "retired", "unpublished"} {
		if _, ok := e.watermarkOf(id); !ok {
			t.Errorf("team-b did not run its hunt %s; runs %+v", id, e.runs(id))
		}
	}
	if n := e.count("SELECT count() FROM hunt_lease WHERE hunt_id = 'shared'"); n != 0 {
		t.Fatalf("team-b wrote %d lease rows for team-a's hunt", n)
	}
	if runs := e.runs("shared"); len(runs) != 0 {
		t.Fatalf("team-b ran team-a's hunt: %+v", runs)
	}
	if n := strings.Count(logs.String(), "another hunt set publishes it"); n != 1 {
		t.Fatalf("%d refusal lines over two ticks, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"published_by":"team-a"`) {
		t.Errorf("the refusal does not name the owning set:\n%s", logs.String())
	}
	if body := scrape(t, tel); !strings.Contains(body, `hunt_runner_hunts_foreign{hunt_set="team-a"} 1`) {
		t.Errorf("metrics lack the refused hunt:\n%s", body)
	}

	a := e.runner("pod-a", testSet("a", shared), func(o *Options) { o.HuntSet = "team-a" })
	e.tickAndWait(a)
	if wm, ok := e.watermarkOf("shared"); !ok || wm != e.latest(shared) {
		t.Fatalf("team-a's runner did not commit its hunt: watermark %d/%v, runs %+v", wm, ok, e.runs("shared"))
	}
}

// When who publishes the due hunts cannot be read, the tick claims nothing (claiming unchecked
// could take another set's hunt), and the next tick that can read it claims.
func TestRunnerClaimsNothingWhenOwnershipIsUnknown(t *testing.T) {
	e := newPrivateEnv(t)
	h := hunt.Hunt{ID: "mine", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	e.publishAs("team-b", h, true)
	r := e.runner("pod-b", testSet("b", h), func(o *Options) { o.HuntSet = "team-b" })
	e.srv.SetFaults(t, ctl.FaultRule{Name: "owners", Match: `argMax\(hunt_set`, Effect: ctl.FailBefore})
	e.tickAndWait(r)
	if n := e.count("SELECT count() FROM hunt_lease WHERE hunt_id = 'mine'"); n != 0 {
		t.Fatalf("%d lease rows written while ownership could not be read", n)
	}
	e.srv.ClearFaults(t)
	e.tickAndWait(r)
	if _, ok := e.watermarkOf("mine"); !ok {
		t.Fatalf("the hunt did not run once ownership was readable; runs %+v", e.runs("mine"))
	}
}
