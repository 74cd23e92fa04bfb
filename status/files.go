package status

import (
	"encoding/json"
	"time"

	"github.com/hunt-runner/hunt-runner/store"
)

// HuntFiles is the health of the hunt files a runner holds (or `status` loaded): every problem,
// offline or found by the server's check, and the hunts kept at their last good definition
// because their file broke. The page shows it as a banner, the API as "hunt_files"; with
// problems or stale hunts nothing about the files is healthy, whatever the runs say.
type HuntFiles struct {
	Invalid  int           `json:"invalid"`
	Problems []FileProblem `json:"problems"`
	Stale    []StaleHunt   `json:"stale"`
	// ReportedBy and ReportedAt name the runner whose heartbeat reported these files, when
	// `status` had no hunt source of its own.
	ReportedBy string `json:"reported_by,omitempty"`
	ReportedAt string `json:"reported_at,omitempty"`
}

// HeartbeatFileProblems bounds how many problems and stale hunts a heartbeat carries: the
// counts stay exact, and `hunt-runner validate` prints every problem.
const HeartbeatFileProblems = 50

// HeartbeatJSON is f as a runner's heartbeat carries it: at most HeartbeatFileProblems
// problems and stale hunts, the counts exact; "" when nothing is wrong.
func (f HuntFiles) HeartbeatJSON() string {
	if !f.Broken() {
		return ""
	}
	if len(f.Problems) > HeartbeatFileProblems {
		f.Problems = f.Problems[:HeartbeatFileProblems]
	}
	if len(f.Stale) > HeartbeatFileProblems {
		f.Stale = f.Stale[:HeartbeatFileProblems]
	}
	b, err := json.Marshal(f)
	if err != nil {
		return ""
	}
	return string(b)
}

// ReportedFiles picks, among live runners' heartbeats of huntSet, the newest that reports
// hunt-file problems, and decodes it; ok is false when none does (or none is live).
func ReportedFiles(beats []store.HeartbeatRow, now time.Time, huntSet string) (f HuntFiles, ok bool) {
	var newest *store.HeartbeatRow
	for i, b := range beats {
		if b.HuntSet != huntSet || now.Sub(b.LastTick) > LiveWithin {
			continue
		}
		if newest == nil || b.LastTick.After(newest.LastTick) {
			newest = &beats[i]
		}
	}
	if newest == nil || newest.HuntFiles == "" || json.Unmarshal([]byte(newest.HuntFiles), &f) != nil {
		return HuntFiles{}, false
	}
	f.ReportedBy, f.ReportedAt = newest.Owner, newest.LastTick.UTC().Format(time.RFC3339)
	return f, true
}

// FileProblem is one problem of a hunt file, at its line and column.
type FileProblem struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
	HuntID  string `json:"hunt_id,omitempty"`
}

// StaleHunt is a hunt that runs its last good definition: the edit of its file is not live.
type StaleHunt struct {
	HuntID  string `json:"hunt_id"`
	Problem string `json:"problem"`
}

// Broken says whether there is anything to show a banner for.
func (f *HuntFiles) Broken() bool { return f != nil && (f.Invalid > 0 || len(f.Stale) > 0) }

// MarkFiles records f in the report and marks the hunts it concerns: a stale hunt (kept at its
// last good definition), and a published hunt whose file has a problem naming it, which runners
// keep at the published definition or do not run, are state "stale" unless something worse
// (failing, paused, disabled) already holds.
func (r *Report) MarkFiles(f HuntFiles) {
	r.HuntFiles = &f
	why := map[string]string{}
	for _, p := range f.Problems {
		if p.HuntID != "" && why[p.HuntID] == "" {
			why[p.HuntID] = p.File + ": " + p.Message
		}
	}
	stale := map[string]bool{}
	for _, s := range f.Stale {
		stale[s.HuntID], why[s.HuntID] = true, s.Problem
	}
	for i := range r.Hunts {
		h := &r.Hunts[i]
		w, ok := why[h.HuntID]
		if !ok {
			continue
		}
		h.FileProblem = w
		h.Stale = stale[h.HuntID] || (h.Enabled && !h.Unpublished)
		if h.Stale {
			switch h.State {
			case StateFailing, StatePaused, StateDisabled:
			default:
				h.State = StateStale
			}
		}
	}
}
