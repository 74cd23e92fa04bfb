package runner

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
	"time"
)

// createWorkloads creates classes under the server's root workload and drops them when the
// test ends. Workloads are server-wide, so each test names its own.
func createWorkloads(t *testing.T, e *env, names ...string) {
	t.Helper()
	e.exec("CREATE WORKLOAD IF NOT EXISTS all")
	for _, n := range names {
		e.exec("CREATE WORKLOAD " + n + " IN all")
		t.Cleanup(func() { _ = e.db.Conn.Exec(context.Background(), "DROP WORKLOAD IF EXISTS "+n) })
	}
}

// workloadQuery reads back the workload the server applied to the hunt's own statement.
const workloadQuery = "SELECT toString(getSetting('workload')) AS wl FROM events WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} LIMIT 1"

// Every statement of a live fire carries the live class and every statement of a backfill
// chunk the backfill class: the hunt's SELECT (as the server applied it, read back by the
// query) and the insert of its findings. Coordination statements carry none.
func TestWorkloadClassOfEveryRunStatement(t *testing.T) {
	e := newEnv(t)
	sfx := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	live, bfl := "hr_live_"+sfx, "hr_backfill_"+sfx
	createWorkloads(t, e, live, bfl)
	const id = "wl"
	h := hunt.Hunt{ID: id, Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: workloadQuery}
	fire := e.latest(h)
	e.setWatermark(id, fire-3600)
	from, to := fire-4800, fire-4200
	bid, err := e.store().RequestBackfill(e.ctx, store.BackfillRequest{HuntID: id, From: from, To: to, Chunk: 600, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	key := schema.BackfillKey(id, bid)
	log := &chtest.Server{URL: strings.TrimSuffix(e.db.URL, "/")}
	var mark uint64
	if l := log.StatementLog(t); len(l) > 0 {
		mark = l[len(l)-1].Seq
	}
	r := e.runner("pod-a", testSet("x", h), func(o *Options) {
		o.Workloads = attrib.Workloads{Live: live, Backfill: bfl, Preview: "never_" + sfx}
	})
	e.tickUntil(r, "the live fire and the backfill chunk to commit", func() bool {
		lw, _ := e.watermarkOf(id)
		bw, _ := e.watermarkOf(key)
		return lw == fire && bw == to
	})

	want := map[string]string{} // run id → class
	rows, err := e.db.Conn.Query(e.ctx, "SELECT toString(run_id), kind FROM hunt_runs WHERE hunt_id = ? AND status = 'succeeded'", id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var rid, kind string
		if err := rows.Scan(&rid, &kind); err != nil {
			t.Fatal(err)
		}
		want[rid] = map[string]string{string(hunt.KindScheduled): live, string(hunt.KindBackfill): bfl}[kind]
	}
	rows.Close()
	if len(want) != 2 {
		t.Fatalf("committed runs %v, want the live fire and one backfill chunk", want)
	}

	// End to end: the class the server applied to the SELECT, as the query itself read it.
	frows, err := e.db.Conn.Query(e.ctx, "SELECT toString(run_id), finding FROM hunt_findings_committed WHERE hunt_id = ?", id)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for frows.Next() {
		var rid, doc string
		if err := frows.Scan(&rid, &doc); err != nil {
			t.Fatal(err)
		}
		var f struct{ Wl string }
		if err := json.Unmarshal([]byte(doc), &f); err != nil {
			t.Fatalf("finding %q: %v", doc, err)
		}
		if f.Wl != want[rid] {
			t.Errorf("run %s: the server ran the SELECT in workload %q, want %q", rid, f.Wl, want[rid])
		}
		seen++
	}
	frows.Close()
	if seen != 2 {
		t.Fatalf("%d findings, want one per run", seen)
	}

	// As received: the SELECT and the findings insert of each run; nothing else in a class.
	byID := map[string]ctl.Statement{}
	for _, st := range log.StatementsSince(t, mark) {
		if st.Database != e.db.Name {
			continue
		}
		if strings.HasPrefix(st.QueryID, attrib.QueryIDPrefix) {
			byID[st.QueryID] = st
		} else if wl := st.Settings["workload"]; wl != "" {
			t.Errorf("coordination statement in workload %q: %.120s", wl, st.SQL)
		}
	}
	for rid, class := range want {
		for _, step := range []string{"", "findings-1"} {
			qid := attrib.QueryID(uuid.MustParse(rid), step)
			st, ok := byID[qid]
			if !ok {
				t.Errorf("no statement %s", qid)
				continue
			}
			if got := st.Settings["workload"]; got != class {
				t.Errorf("%s: workload %q, want %q", qid, got, class)
			}
		}
	}
}

// No class set: no statement carries a workload setting (what a server without workloads,
// or an operator who made none, gets: the statements sent before classes existed).
func TestNoWorkloadByDefault(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "plain", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	fire := e.latest(h)
	log := &chtest.Server{URL: strings.TrimSuffix(e.db.URL, "/")}
	var mark uint64
	if l := log.StatementLog(t); len(l) > 0 {
		mark = l[len(l)-1].Seq
	}
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickUntil(r, "the fire to commit", func() bool { wm, _ := e.watermarkOf("plain"); return wm == fire })
	n := 0
	for _, st := range log.StatementsSince(t, mark) {
		if st.Database != e.db.Name {
			continue
		}
		n++
		if _, ok := st.Settings["workload"]; ok {
			t.Errorf("statement with a workload setting and no class set: %.120s", st.SQL)
		}
	}
	if n == 0 {
		t.Fatal("no statements logged")
	}
}
