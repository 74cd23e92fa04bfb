package status

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// Web serves the read-only HTTP API and the status page on the runner's --listen:
//
//	GET /api/v1/hunts         {"hunts":[APIHunt…], "hunt_files": HuntFiles}
//	GET /api/v1/hunts/{id}    APIHunt plus "runs" (the newest RecentRuns rows of hunt_runs)
//	GET /api/v1/runners       RunnersReport
//	GET /                     the page: one row per hunt
//	GET /hunts/{id}           one hunt and its recent runs
//	GET /runners              the runners, as a page
//
// Every request reads ClickHouse afresh; nothing here writes (pause and backfill stay on the
// CLI, which holds the privileges to write).
type Web struct {
	Store Reader
	// Database is the coordination database, as the page names it.
	Database string
	// Entries is the runner's loaded hunt set; nil, or returning nil, uses the published
	// schedule.
	Entries func() []hunt.Hunt
	// Files is the health of the runner's hunt files (banner, API "hunt_files", state
	// "stale"); nil, or returning false, shows none.
	Files func() (HuntFiles, bool)
	// Token, when set, is the bearer token every page and API request must carry.
	Token string
	// RecentRuns is how many runs a hunt's API answer and page show (default 20).
	RecentRuns int
	// RunnersWindow is how far back /api/v1/runners looks for claims and runs (default 15m).
	RunnersWindow time.Duration
	// ClickHouseWebURL, when set, is a ClickHouse web client (its /play page) the hunt page
	// links the latest findings' query to, the query base64 in the URL's fragment as /play
	// reads it. It must carry no credentials: the client asks for them.
	ClickHouseWebURL string
	// CommitURL, when set, is a prefix the page appends a git commit id to, linking a
	// finding's revision to its commit (https://github.com/org/hunts/commit/).
	CommitURL string
	// Timeout bounds the reads of one request (default 10s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// APIHunt is one hunt in the API, in the shape issue 15 fixed.
type APIHunt struct {
	ID                  string   `json:"id"`
	IntervalSeconds     int64    `json:"interval_seconds"`
	PhaseOffset         int64    `json:"phase_offset"`
	NextFire            *string  `json:"next_fire"`
	Watermark           *string  `json:"watermark"`
	BehindSeconds       int64    `json:"behind_seconds"`
	Paused              bool     `json:"paused"`
	LastRun             *LastRun `json:"last_run"`
	ConsecutiveFailures uint32   `json:"consecutive_failures"`
	State               string   `json:"state"`
	Stale               bool     `json:"stale"`
	FileProblem         *string  `json:"file_problem"`
}

// LastRun is a hunt's newest finished attempt.
type LastRun struct {
	Status   string `json:"status"`
	Finished string `json:"finished"`
	Rows     uint64 `json:"rows"`
	Error    string `json:"error"`
}

// APIHuntDetail is GET /api/v1/hunts/{id}.
type APIHuntDetail struct {
	APIHunt
	// From the hunt file (absent when the runner has not loaded it).
	Severity    string            `json:"severity,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Description string            `json:"description,omitempty"`
	Query       string            `json:"query,omitempty"`
	Pause       *Pause            `json:"pause,omitempty"`
	Snooze      *Snooze           `json:"snooze,omitempty"`
	// Exceptions are the hunt's exceptions with their recent hits (Hunt.Exceptions).
	Exceptions []Exception `json:"exceptions,omitempty"`
	Runs       []Run       `json:"runs"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ToAPI is h in the API's shape.
func ToAPI(h Hunt) APIHunt {
	a := APIHunt{ID: h.HuntID, IntervalSeconds: h.IntervalSeconds, PhaseOffset: h.OffsetSeconds,
		NextFire: optional(h.NextFire), Watermark: optional(h.Watermark), BehindSeconds: h.BehindSeconds,
		Paused: h.Paused, ConsecutiveFailures: h.ConsecutiveFailures, State: h.State, Stale: h.Stale,
		FileProblem: optional(h.FileProblem)}
	if h.LastRunStatus != "" {
		a.LastRun = &LastRun{Status: h.LastRunStatus, Finished: h.LastRunTime, Rows: h.LastRunRows, Error: h.LastRunError}
	}
	return a
}

// Handler is the route table.
func (w *Web) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/hunts", w.apiHunts)
	mux.HandleFunc("GET /api/v1/hunts/{id}", w.apiHunt)
	mux.HandleFunc("GET /api/v1/runners", w.apiRunners)
	mux.HandleFunc("GET /{$}", w.pageIndex)
	mux.HandleFunc("GET /hunts/{id}", w.pageHunt)
	mux.HandleFunc("GET /runners", w.pageRunners)
	if w.Token != "" {
		return requireToken(w.Token, mux)
	}
	return mux
}

func (w *Web) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	t := w.Timeout
	if t <= 0 {
		t = 10 * time.Second
	}
	return context.WithTimeout(r.Context(), t)
}

func (w *Web) log() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger
}

func (w *Web) report(ctx context.Context) (Report, error) {
	var entries []hunt.Hunt
	if w.Entries != nil {
		entries = w.Entries()
	}
	rep, err := Read(ctx, w.Store, entries)
	if err == nil && w.Files != nil {
		if f, ok := w.Files(); ok {
			rep.MarkFiles(f)
		}
	}
	return rep, err
}

func (w *Web) runnersWindow() time.Duration {
	if w.RunnersWindow <= 0 {
		return 15 * time.Minute
	}
	return w.RunnersWindow
}

func (w *Web) recentRuns() int {
	if w.RecentRuns <= 0 {
		return 20
	}
	return w.RecentRuns
}

// errNotFound answers 404 for an unknown hunt.
var errNotFound = errors.New("no such hunt")

// hunt reads the report and the recent runs of one hunt.
func (w *Web) hunt(ctx context.Context, id string) (Report, Hunt, []Run, error) {
	rep, err := w.report(ctx)
	if err != nil {
		return rep, Hunt{}, nil, err
	}
	h, ok := rep.Get(id)
	if !ok {
		return rep, Hunt{}, nil, errNotFound
	}
	runs, err := Runs(ctx, w.Store, id, w.recentRuns())
	return rep, h, runs, err
}

func (w *Web) apiHunts(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := w.ctx(r)
	defer cancel()
	rep, err := w.report(ctx)
	if err != nil {
		w.fail(rw, r, err)
		return
	}
	out := struct {
		Hunts     []APIHunt  `json:"hunts"`
		HuntFiles *HuntFiles `json:"hunt_files,omitempty"`
	}{Hunts: make([]APIHunt, 0, len(rep.Hunts)), HuntFiles: rep.HuntFiles}
	for _, h := range rep.Hunts {
		out.Hunts = append(out.Hunts, ToAPI(h))
	}
	writeJSON(rw, http.StatusOK, out)
}

func (w *Web) apiHunt(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := w.ctx(r)
	defer cancel()
	_, h, runs, err := w.hunt(ctx, r.PathValue("id"))
	if err != nil {
		w.fail(rw, r, err)
		return
	}
	writeJSON(rw, http.StatusOK, APIHuntDetail{APIHunt: ToAPI(h), Severity: h.Severity, Labels: h.Labels, Exceptions: h.Exceptions,
		Description: h.Description, Query: h.Query, Pause: h.Pause, Snooze: h.Snooze, Runs: runs})
}

func (w *Web) apiRunners(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := w.ctx(r)
	defer cancel()
	rep, err := Runners(ctx, w.Store, w.runnersWindow())
	if err != nil {
		w.fail(rw, r, err)
		return
	}
	writeJSON(rw, http.StatusOK, rep)
}

// fail answers 404 for an unknown hunt and 503 when ClickHouse could not be read.
func (w *Web) fail(rw http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusServiceUnavailable
	if errors.Is(err, errNotFound) {
		code = http.StatusNotFound
	} else {
		w.log().Warn("status request failed", "path", r.URL.Path, "error", err)
	}
	writeJSON(rw, code, map[string]string{"error": err.Error()})
}

func writeJSON(rw http.ResponseWriter, code int, body any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(code)
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	_ = enc.Encode(body)
}
