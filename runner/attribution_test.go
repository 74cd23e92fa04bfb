package runner

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// comment is a log_comment as the tests decode it: every key of the schema.
type comment struct {
	App      string `json:"app"`
	HuntID   string `json:"hunt_id"`
	Fire     string `json:"fire"`
	RunID    string `json:"run_id"`
	Revision string `json:"revision"`
	Kind     string `json:"kind"`
	RunnerID string `json:"runner_id"`
	HuntSet  string `json:"hunt_set"`
}

// attributedQuery reads back the log_comment the server applied to the hunt's own statement,
// and the hunt id the server's JSON parser finds in it.
const attributedQuery = "SELECT toString(getSetting('log_comment')) AS lc, JSONExtractString(toString(getSetting('log_comment')), 'hunt_id') AS seen " +
	"FROM events WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} LIMIT 1"

// Every statement of a run carries a JSON log_comment naming its hunt, fire, run, revision,
// kind and runner, with a query_id per statement under the run's prefix: the live fire's and
// the backfill chunk's hunt SELECT (read back by the query itself, so it is what the server
// applied) and the insert of their findings. The hunt id is hostile: quotes and a backslash
// must not break the JSON, and the server must parse the id back out of it.
func TestAttributionOfEveryRunStatement(t *testing.T) {
	e := newEnv(t)
	const id = `q"uo'te\back`
	h := hunt.Hunt{ID: id, Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: attributedQuery, Hash: "rev-0123abcd"}
	fire := e.latest(h)
	e.setWatermark(id, fire-3600)
	from, to := fire-4800, fire-4200 // inside the two hours of events, before the live watermark: one chunk
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
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickUntil(r, "the live fire and the backfill chunk to commit", func() bool {
		live, _ := e.watermarkOf(id)
		bf, _ := e.watermarkOf(key)
		return live == fire && bf == to
	})

	// The committed runs, by run id: their kind and fire.
	type run struct {
		kind string
		fire int64
	}
	runs := map[string]run{}
	rows, err := e.db.Conn.Query(e.ctx, "SELECT toString(run_id), kind, toInt64(fire) FROM hunt_runs WHERE hunt_id = ? AND status = 'succeeded'", id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var rid, kind string
		var f int64
		if err := rows.Scan(&rid, &kind, &f); err != nil {
			t.Fatal(err)
		}
		runs[rid] = run{kind, f}
	}
	rows.Close()
	if len(runs) != 2 {
		t.Fatalf("committed runs %v, want the live fire and one backfill chunk", runs)
	}
	wantKind := map[string]string{string(hunt.KindScheduled): "live", string(hunt.KindBackfill): "backfill"}
	check := func(what, raw, runID string) {
		t.Helper()
		var c comment
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			t.Fatalf("%s: log_comment %q is not JSON: %v", what, raw, err)
		}
		ru, ok := runs[runID]
		want := comment{App: "hunt-runner", HuntID: id, Fire: time.Unix(ru.fire, 0).UTC().Format(time.RFC3339), RunID: runID,
			Revision: "rev-0123abcd", Kind: wantKind[ru.kind], RunnerID: "pod-a", HuntSet: hunt.HuntSetDefault}
		if !ok || c != want {
			t.Errorf("%s: log_comment %+v, want %+v", what, c, want)
		}
	}

	// What the hunt SELECT saw, from its findings.
	frows, err := e.db.Conn.Query(e.ctx, "SELECT toString(run_id), finding FROM hunt_findings_committed WHERE hunt_id = ?", id)
	if err != nil {
		t.Fatal(err)
	}
	seenKinds := map[string]bool{}
	for frows.Next() {
		var rid, doc string
		if err := frows.Scan(&rid, &doc); err != nil {
			t.Fatal(err)
		}
		var f struct{ Lc, Seen string }
		if err := json.Unmarshal([]byte(doc), &f); err != nil {
			t.Fatalf("finding %q: %v", doc, err)
		}
		check("hunt SELECT", f.Lc, rid)
		if f.Seen != id {
			t.Errorf("the server parsed hunt_id %q out of the log_comment, want %q", f.Seen, id)
		}
		seenKinds[runs[rid].kind] = true
	}
	frows.Close()
	if len(seenKinds) != 2 {
		t.Fatalf("findings of run kinds %v, want both", seenKinds)
	}

	// The statements as the server received them: query ids and the findings inserts' comments.
	byID := map[string]ctl.Statement{}
	for _, st := range log.StatementsSince(t, mark) {
		if st.Database == e.db.Name && strings.HasPrefix(st.QueryID, attrib.QueryIDPrefix) {
			byID[st.QueryID] = st
		}
	}
	for rid := range runs {
		sel, ok := byID[attrib.QueryID(uuid.MustParse(rid), "")]
		if !ok || !strings.Contains(sel.SQL, "getSetting('log_comment')") {
			t.Errorf("no hunt SELECT with query_id %s (statements %v)", attrib.QueryID(uuid.MustParse(rid), ""), keys(byID))
		} else {
			check("hunt SELECT as received", sel.Settings["log_comment"], rid)
		}
		ins, ok := byID[attrib.QueryID(uuid.MustParse(rid), "findings-1")]
		if !ok || !strings.Contains(ins.SQL, schema.TableFindings) {
			t.Errorf("no findings insert with query_id %s", attrib.QueryID(uuid.MustParse(rid), "findings-1"))
			continue
		}
		check("findings insert", ins.Settings["log_comment"], rid)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
