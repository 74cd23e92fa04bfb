package runner

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/notify"
)

// Done when (#27): every committed finding carries its title, severity, dedup key, runbook,
// MITRE ids and revision as findings --json reads them (notify.Findings), and a changed query
// shows a new revision on the next fire, in the findings and in the run history.
func TestFindingsExplainThemselvesAndCarryTheirRevision(t *testing.T) {
	e := newEnv(t)
	const commit = "9fceb02d0ae598e95dc970b74767f19372d61af8"
	query := "SELECT host, n, if(n % 700 = 0, 'critical', 'urgent') AS sev FROM events " +
		"WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} AND n % 100 = 0"
	h := hunt.Hunt{ID: "logins", Interval: 600 * time.Second, Offset: sec(e.mid(600)), Severity: "low", Enabled: true,
		Query: query, Title: "login from {{host}} n={{n}}", Dedup: "{{host}}", SeverityFrom: "sev",
		Runbook: "https://wiki.example.com/rb/logins", Mitre: []string{"T1110.003", "TA0006"}}
	var set atomic.Pointer[hunt.Set]
	set.Store(hunt.NewSet([]hunt.Hunt{h}, "test", commit))
	clock := atomic.Int64{}
	clock.Store(e.now)
	r := e.runner("pod-a", nil, func(o *Options) {
		o.ScheduleClock = func(time.Time) time.Time { return time.Unix(clock.Load(), 0) }
	})
	r.source = func() *hunt.Set { return set.Load() }
	e.tickAndWait(r)
	first, _ := set.Load().Get("logins")
	fire1 := e.latest(h)
	if wm, _ := e.watermarkOf("logins"); wm != fire1 {
		t.Fatalf("watermark %d, want the fire %d committed", wm, fire1)
	}

	// The query changes; the next fire runs the new definition.
	h.Query = query + " AND n >= 0"
	set.Store(hunt.NewSet([]hunt.Hunt{h}, "test", commit))
	second, _ := set.Load().Get("logins")
	if first.Revision() == second.Revision() {
		t.Fatal("a changed query kept the revision")
	}
	clock.Add(600)
	e.tickAndWait(r)
	if wm, _ := e.watermarkOf("logins"); wm != fire1+600 {
		t.Fatalf("watermark %d, want the next fire %d committed", wm, fire1+600)
	}

	fs, err := notify.Findings(e.ctx, e.db.Conn, e.db.Name, "logins", time.Unix(fire1-3600, 0), 1000)
	if err != nil {
		t.Fatal(err)
	}
	byFire := map[int64]int{}
	for _, f := range fs {
		fire := f.Fire.Unix()
		byFire[fire]++
		want := first.Revision()
		if fire == fire1+600 {
			want = second.Revision()
		}
		if f.Revision != want || !strings.HasSuffix(want, "@"+commit) {
			t.Errorf("fire %d: revision %q, want %q", fire, f.Revision, want)
		}
		var doc struct {
			Host string `json:"host"`
			N    int    `json:"n"`
			Sev  string `json:"sev"`
		}
		if err := json.Unmarshal(f.Finding, &doc); err != nil {
			t.Fatal(err)
		}
		if want := "login from " + doc.Host + " n=" + strconv.Itoa(doc.N); f.Title != want {
			t.Errorf("title %q, want %q", f.Title, want)
		}
		wantSev := "low" // "urgent" is no severity: the hunt's
		if doc.Sev == "critical" {
			wantSev = "critical"
		}
		if f.Severity != wantSev || f.DedupKey != doc.Host || f.Runbook != h.Runbook || !slices.Equal(f.Mitre, h.Mitre) {
			t.Errorf("finding %s: severity %q (want %q), dedup %q, runbook %q, mitre %v", f.Finding, f.Severity, wantSev, f.DedupKey, f.Runbook, f.Mitre)
		}
	}
	if byFire[fire1] == 0 || byFire[fire1+600] == 0 {
		t.Fatalf("findings per fire %v: both fires must have some", byFire)
	}
	// The run history shows the change of revision.
	var revs []string
	rows, err := e.db.Conn.Query(e.ctx, "SELECT revision FROM hunt_runs WHERE hunt_id = 'logins' AND status = 'succeeded' ORDER BY fire")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		revs = append(revs, s)
	}
	if !slices.Equal(revs, []string{first.Revision(), second.Revision()}) {
		t.Fatalf("run history revisions %v, want %s then %s", revs, first.Revision(), second.Revision())
	}
}
