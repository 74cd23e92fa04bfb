package status

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

//go:embed page.html.tmpl
var pageSource string

var pageTemplates = template.Must(template.New("page").Funcs(template.FuncMap{
	"ago":   ago,
	"until": until,
	"dur":   humanDuration,
	"clip":  clip,
	"mul2":  func(n int64) int64 { return 2 * n },
	"short": func(now time.Time, s string) string { return shortTime(now, s) },
}).Parse(pageSource))

// row is one hunt on the page with what the template needs precomputed.
type row struct {
	Hunt
	Rank int
	Now  time.Time
}

type indexPage struct {
	Now      time.Time
	Database string
	Hunts    []row
	Counts   []stateCount
	Files    *HuntFiles
	Upcoming []row // the next fires, soonest first (paused and disabled hunts have none)
}

// upcomingFires is how many next fires the index lists.
const upcomingFires = 10

type runnersPage struct {
	Now      time.Time
	Database string
	R        RunnersReport
}

type stateCount struct {
	State string
	N     int
}

type huntPage struct {
	Now      time.Time
	Database string
	H        row
	Runs     []Run
	Files    *HuntFiles
	// Findings are the hunt's latest committed findings; FindingsURL opens their query in
	// the ClickHouse web client ("" without Web.ClickHouseWebURL).
	Findings    []findingRow
	FindingsURL string
}

// latestFindings is how many committed findings a hunt's page lists.
const latestFindings = 20

// findingRow is one finding on a hunt's page.
type findingRow struct {
	Fire, Title, Severity, Finding string
	Digest, Commit, CommitURL      string // the revision: digest, git commit and its page
}

func (w *Web) findingRows(fs []store.LatestFinding) []findingRow {
	out := make([]findingRow, 0, len(fs))
	for _, f := range fs {
		digest, commit := hunt.SplitRevision(f.Revision)
		r := findingRow{Fire: rfc(f.Fire), Title: f.Title, Severity: f.Severity, Finding: f.Finding, Digest: digest, Commit: commit}
		if commit != "" && w.CommitURL != "" {
			r.CommitURL = w.CommitURL + url.PathEscape(commit)
		}
		out = append(out, r)
	}
	return out
}

// findingsURL is the ClickHouse web client's URL with the query of a hunt's latest findings.
func (w *Web) findingsURL(huntID string) string {
	if w.ClickHouseWebURL == "" {
		return ""
	}
	base, _, _ := strings.Cut(w.ClickHouseWebURL, "#")
	q := store.LatestFindingsQuery(w.Database, huntID, latestFindings)
	return base + "#" + base64.StdEncoding.EncodeToString([]byte(q))
}

// stateOrder orders the page: what needs a person comes first. stateRank is its index.
var (
	stateOrder = []string{StateFailing, StateOverBudget, StateNoData, StateStale, StateUnpublished, StateNeverRun, StateBehind,
		StateRunning, StatePaused, StateOK, StateDisabled}
	stateRank = func() map[string]int {
		m := map[string]int{}
		for i, s := range stateOrder {
			m[s] = i
		}
		return m
	}()
)

func rows(rep Report) []row {
	out := make([]row, 0, len(rep.Hunts))
	for _, h := range rep.Hunts {
		out = append(out, row{Hunt: h, Rank: stateRank[h.State], Now: rep.now})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Rank != out[j].Rank {
			return out[i].Rank < out[j].Rank
		}
		return out[i].HuntID < out[j].HuntID
	})
	return out
}

func (w *Web) pageIndex(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := w.ctx(r)
	defer cancel()
	rep, err := w.report(ctx)
	if err != nil {
		w.failPage(rw, r, err)
		return
	}
	p := indexPage{Now: rep.now, Database: w.Database, Hunts: rows(rep), Files: rep.HuntFiles}
	for _, r := range p.Hunts {
		if r.NextFire != "" {
			p.Upcoming = append(p.Upcoming, r)
		}
	}
	sort.SliceStable(p.Upcoming, func(i, j int) bool { return p.Upcoming[i].NextFire < p.Upcoming[j].NextFire })
	p.Upcoming = p.Upcoming[:min(len(p.Upcoming), upcomingFires)]
	counts := map[string]int{}
	for _, h := range rep.Hunts {
		counts[h.State]++
	}
	for _, s := range stateOrder {
		if counts[s] > 0 {
			p.Counts = append(p.Counts, stateCount{s, counts[s]})
		}
	}
	w.render(rw, r, "index", p)
}

func (w *Web) pageHunt(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := w.ctx(r)
	defer cancel()
	rep, h, runs, err := w.hunt(ctx, r.PathValue("id"))
	if err != nil {
		w.failPage(rw, r, err)
		return
	}
	fs, err := w.Store.LatestFindings(ctx, h.HuntID, latestFindings)
	if err != nil {
		w.failPage(rw, r, err)
		return
	}
	w.render(rw, r, "hunt", huntPage{Now: rep.now, Database: w.Database,
		H: row{Hunt: h, Rank: stateRank[h.State], Now: rep.now}, Runs: runs, Files: rep.HuntFiles,
		Findings: w.findingRows(fs), FindingsURL: w.findingsURL(h.HuntID)})
}

func (w *Web) pageRunners(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := w.ctx(r)
	defer cancel()
	rep, err := Runners(ctx, w.Store, w.runnersWindow())
	if err != nil {
		w.failPage(rw, r, err)
		return
	}
	now, _ := parse(rep.Now)
	w.render(rw, r, "runners", runnersPage{Now: now, Database: w.Database, R: rep})
}

func (w *Web) render(rw http.ResponseWriter, r *http.Request, name string, data any) {
	var b bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&b, name, data); err != nil {
		w.failPage(rw, r, err)
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	_, _ = b.WriteTo(rw)
}

func (w *Web) failPage(rw http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusServiceUnavailable
	if errors.Is(err, errNotFound) {
		code = http.StatusNotFound
	} else if !errors.Is(err, context.Canceled) {
		w.log().Warn("status page failed", "path", r.URL.Path, "error", err)
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.WriteHeader(code)
	_ = pageTemplates.ExecuteTemplate(rw, "error", map[string]any{"Code": code, "Error": err.Error(), "Path": r.URL.Path})
}

// humanDuration prints seconds as the two largest units: 45s, 3m20s, 2h5m, 3d4h.
func humanDuration(sec int64) string {
	if sec < 0 {
		sec = -sec
	}
	units := []struct {
		n    int64
		name string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}}
	for i, u := range units {
		if sec >= u.n || u.n == 1 {
			s := fmt.Sprintf("%d%s", sec/u.n, u.name)
			if i+1 < len(units) {
				if rest := sec % u.n / units[i+1].n; rest > 0 {
					s += fmt.Sprintf("%d%s", rest, units[i+1].name)
				}
			}
			return s
		}
	}
	return "0s"
}

func parse(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil && s != ""
}

// ago is "3m ago" for an RFC 3339 time before now.
func ago(now time.Time, s string) string {
	t, ok := parse(s)
	if !ok {
		return ""
	}
	return humanDuration(int64(now.Sub(t)/time.Second)) + " ago"
}

// until is "in 3m" for a time after now ("now" when it has come).
func until(now time.Time, s string) string {
	t, ok := parse(s)
	if !ok {
		return ""
	}
	d := int64(t.Sub(now) / time.Second)
	if d <= 0 {
		return "now"
	}
	return "in " + humanDuration(d)
}

// shortTime drops the date when it is now's date.
func shortTime(now time.Time, s string) string {
	t, ok := parse(s)
	if !ok {
		return ""
	}
	t = t.UTC()
	if t.Format(time.DateOnly) == now.UTC().Format(time.DateOnly) {
		return t.Format("15:04:05") + "Z"
	}
	return t.Format("2006-01-02 15:04") + "Z"
}

func clip(n int, s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
