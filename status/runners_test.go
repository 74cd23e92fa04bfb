package status

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// Heartbeats written by the runner's write path make the runners list: status shows the live
// ones, the API those of its window with a live flag, and leases and runs join in by owner.
func TestRunnersFromHeartbeats(t *testing.T) {
	db := fixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := store.New(db.Conn, db.Name)
	started := time.Now().Add(-time.Hour)
	if err := s.Heartbeat(ctx, store.Heartbeat{Owner: "pod-a", Version: "v1.0.0", HuntSet: "default", SetHash: "abc",
		Hunts: 4, Started: started, Beat: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// pod-old stopped ten minutes ago: in the API's 15-minute window, not live; pod-gone
	// stopped half an hour ago: outside it.
	if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_runner_heartbeat (owner, version, hunt_set, set_hash, hunts, last_tick, started) VALUES "+
		"('pod-old', 'v0.9.0', 'default', 'old', 3, now64(3) - INTERVAL 10 MINUTE, now64(3) - INTERVAL 1 DAY), "+
		"('pod-gone', 'v0.9.0', 'default', 'old', 3, now64(3) - INTERVAL 30 MINUTE, now64(3) - INTERVAL 1 DAY)"); err != nil {
		t.Fatal(err)
	}
	rep := read(t, db, fixtureEntries())
	if len(rep.Runners) != 1 || rep.Runners[0].Owner != "pod-a" || rep.Runners[0].Version != "v1.0.0" ||
		rep.Runners[0].Hunts != 4 || rep.Runners[0].SetHash != "abc" || !rep.Runners[0].Live ||
		rep.Runners[0].Started != rfcMilli(started) || !strings.Contains(rep.RunnersLive, "2m0s") {
		t.Errorf("status runners %+v (%s), want pod-a alone", rep.Runners, rep.RunnersLive)
	}
	b, _ := json.Marshal(rep)
	if !strings.Contains(string(b), `"runners":[{"owner":"pod-a"`) {
		t.Errorf("status JSON lacks the runners: %s", b)
	}

	srv := serveFixture(t, db, fixtureEntries())
	code, _, body := get(t, srv.URL+"/api/v1/runners")
	var rr RunnersReport
	if err := json.Unmarshal([]byte(body), &rr); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/runners = %d %v\n%s", code, err, body)
	}
	if rr.Source != runnersSourceHeartbeat || rr.Live != LiveRule || len(rr.Runners) != 2 {
		t.Fatalf("runners %+v, want pod-a and pod-old from heartbeats", rr)
	}
	a, old := rr.Runners[0], rr.Runners[1]
	if a.Owner != "pod-a" || !a.Live || a.LiveLeases != 1 || a.Version != "v1.0.0" ||
		old.Owner != "pod-old" || old.Live || old.Version != "v0.9.0" {
		t.Errorf("runners %+v", rr.Runners)
	}

	// A runner that stops beating drops out of the live list once its beat is older than the
	// window (a short one here, waited for, not slept).
	var live []Runner
	if !chtest.Poll(time.Minute, func() bool {
		var err error
		if live, err = LiveRunners(ctx, store.New(db.Conn, db.Name), time.Second); err != nil {
			t.Fatal(err)
		}
		if len(live) > 0 && live[0].Owner != "pod-a" {
			t.Fatalf("live runners %+v, want pod-a until its beat is a second old", live)
		}
		return len(live) == 0
	}) {
		t.Fatalf("live runners %+v, want pod-a gone once its beat is a second old", live)
	}
}

// Without the heartbeat table (a schema before it), status still answers, with no runners.
func TestRunnersWithoutHeartbeatTable(t *testing.T) {
	db := fixture(t)
	if err := db.Conn.Exec(context.Background(), "DROP TABLE "+db.Name+".hunt_runner_heartbeat"); err != nil {
		t.Fatal(err)
	}
	rep := read(t, db, fixtureEntries())
	if len(rep.Runners) != 0 || rep.Runners == nil {
		t.Errorf("runners %+v, want an empty list", rep.Runners)
	}
	srv := serveFixture(t, db, fixtureEntries())
	if code, _, body := get(t, srv.URL+"/api/v1/runners"); code != 200 || !strings.Contains(body, "heartbeat table is empty") {
		t.Errorf("GET /api/v1/runners = %d\n%s", code, body)
	}
}
