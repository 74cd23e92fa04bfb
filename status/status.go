// Package status answers "how is every hunt doing?" for people: the `hunt-runner status`
// command, and the runner's read-only HTTP API and status page. It only reads, and only
// through the store (Reader; store.Store implements it), writing no SQL of its own: the
// coordination snapshot, the published schedule, the run log of the hunt_runs view (succeeded
// and gap rows are commits in hunt_watermark, failed and lost attempts are hunt_run rows) and
// the runners' heartbeats. It renders them. The runner's loop does not depend on it.
package status

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// Hunt is one hunt's status. Times are RFC 3339 UTC; absent values are omitted from JSON.
type Hunt struct {
	HuntID string `json:"hunt_id"`
	// Severity, Labels, Description and Query come from the hunt file (absent when status
	// reads only the published schedule).
	Severity    string            `json:"severity,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Description string            `json:"description,omitempty"`
	Query       string            `json:"query,omitempty"`
	// Revision is the live definition's revision (hunt.Hunt.Revision: digest, @commit for a
	// git source), the one stored with its next runs and findings.
	Revision        string `json:"revision,omitempty"`
	IntervalSeconds int64  `json:"interval_seconds"`
	OffsetSeconds   int64  `json:"offset_seconds"`
	Enabled         bool   `json:"enabled"`
	// Unpublished: runners have state for the hunt, or the hunt files define it, but
	// hunt_schedule has no row for it (materialise has not published it): KEDA's backlog
	// does not count it.
	Unpublished bool `json:"unpublished,omitempty"`
	// State is one word for a person: see the State* constants.
	State string `json:"state"`
	// StateDetail says why, for no_data (which sources are silent) and over_budget.
	StateDetail   string `json:"state_detail,omitempty"`
	LatestFire    string `json:"latest_fire,omitempty"`
	NextFire      string `json:"next_fire,omitempty"`
	Watermark     string `json:"watermark,omitempty"`
	BehindSeconds int64  `json:"behind_seconds"`
	Due           bool   `json:"due"`
	Paused        bool   `json:"paused"`
	Pause         *Pause `json:"pause,omitempty"`
	// Snooze is set while the hunt's notifications are snoozed (it still runs).
	Snooze *Snooze `json:"snooze,omitempty"`
	// Backfills are the hunt's backfills still to run, with their progress.
	Backfills []Backfill `json:"backfills,omitempty"`

	LeaseOwner    string `json:"lease_owner,omitempty"`
	LeaseFire     string `json:"lease_fire,omitempty"`
	LeaseUntil    string `json:"lease_until,omitempty"`
	LeaseLive     bool   `json:"lease_live"`
	RequestedFire string `json:"requested_fire,omitempty"`

	LastRunStatus string `json:"last_run_status,omitempty"`
	LastRunFire   string `json:"last_run_fire,omitempty"`
	LastRunTime   string `json:"last_run_time,omitempty"`
	LastRunRows   uint64 `json:"last_run_rows"`
	LastRunError  string `json:"last_run_error,omitempty"`
	LastSuccess   string `json:"last_success,omitempty"`

	ConsecutiveFailures uint32 `json:"consecutive_failures"`
	// FindingsLastDay sums the findings of the runs that committed in the last 24 hours.
	FindingsLastDay uint64 `json:"findings_last_day"`
	// FindingsDroppedLastDay sums the rows past max_findings of those runs.
	FindingsDroppedLastDay uint64 `json:"findings_dropped_last_day"`
	Gaps                   uint64 `json:"gaps"` // gap rows (skipped ranges) recorded within RecentWindow
	OverrunCount           uint64 `json:"overrun_count"`
	TooAggressive          bool   `json:"too_aggressive"`

	// Exceptions are the hunt's exceptions (from the hunt files), each with its hits over
	// RecentWindow.
	Exceptions []Exception `json:"exceptions,omitempty"`

	// Stale: the hunt runs an older definition than its file, because the file now has a
	// problem (FileProblem); the edit is not live. See Report.MarkFiles.
	Stale       bool   `json:"stale,omitempty"`
	FileProblem string `json:"file_problem,omitempty"`
}

// Exception is one of a hunt's exceptions as status shows it.
type Exception struct {
	ID     string `json:"id"`
	List   string `json:"list,omitempty"` // the shared list it comes from
	Owner  string `json:"owner"`
	Reason string `json:"reason"`
	Until  string `json:"until,omitempty"` // absent: permanent
	// Expired: until has passed; the exception no longer applies.
	Expired bool `json:"expired,omitempty"`
	// Hits sums the finding rows it removed from the runs that committed within RecentWindow.
	Hits uint64 `json:"hits"`
}

func exceptionsOf(e hunt.Hunt, hits map[string]uint64, now time.Time) []Exception {
	var out []Exception
	for _, x := range e.Exceptions {
		se := Exception{ID: x.ID, List: x.List, Owner: x.Owner, Reason: x.Reason, Hits: hits[x.ID], Expired: !x.LiveAt(now)}
		if !x.Until.IsZero() {
			se.Until = rfc(x.Until)
		}
		out = append(out, se)
	}
	return out
}

// States of Hunt.State, in the order the page ranks them (worst first).
const (
	StateFailing     = "failing"     // the newest attempt failed (consecutive_failures > 0)
	StateOverBudget  = "over_budget" // the newest run was stopped by its read budget
	StateNoData      = "no_data"     // the newest run committed while a declared source was silent
	StateStale       = "stale"       // its file has a problem; runners keep the last good definition
	StateUnpublished = "unpublished" // runners know it, hunt_schedule does not
	StateNeverRun    = "never-run"   // enabled, owed, and no attempt has finished yet
	StateBehind      = "behind"      // owes a fire older than two intervals
	StateRunning     = "running"     // a live lease holds it
	StatePaused      = "paused"
	StateOK          = "ok"
	StateDisabled    = "disabled" // disabled in the hunt files, or tombstoned by materialise
)

// Report is the whole status answer: {"now": …, "hunts": […], "runners": […]}.
type Report struct {
	Now   string `json:"now"`
	Hunts []Hunt `json:"hunts"`
	// Runners are the live runners (LiveRule says which), by owner.
	Runners     []Runner `json:"runners"`
	RunnersLive string   `json:"runners_live"`
	// HuntFiles is set when the hunt files were read (a runner's, or `status --hunts-dir`).
	HuntFiles *HuntFiles `json:"hunt_files,omitempty"`
	now       time.Time
}

// Time is the report's clock (ClickHouse's now at the snapshot).
func (r Report) Time() time.Time { return r.now }

// Get returns the hunt with id.
func (r Report) Get(id string) (Hunt, bool) {
	for _, h := range r.Hunts {
		if h.HuntID == id {
			return h, true
		}
	}
	return Hunt{}, false
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }
func rfcSec(s int64) string  { return rfc(time.Unix(s, 0)) }

// Read reports every hunt of entries, plus every hunt the coordination tables know that is
// neither in entries nor retired by materialise (marked unpublished), sorted by id. With nil
// entries the published schedule is the list. It costs five queries: the snapshot (which
// carries pauses and pending backfills), the published schedule, one aggregate over
// hunt_runs, the snoozes and the runners' heartbeats.
func Read(ctx context.Context, st Reader, entries []hunt.Hunt) (Report, error) {
	snap, err := st.Snapshot(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("status: %w", err)
	}
	published, err := readPublished(ctx, st)
	if err != nil {
		return Report{}, fmt.Errorf("status: %w", err)
	}
	if entries == nil {
		entries = make([]hunt.Hunt, 0, len(published))
		for _, p := range published {
			entries = append(entries, p.Hunt)
		}
	}
	runs, err := st.RunSummaries(ctx, RecentWindow)
	if err != nil {
		return Report{}, fmt.Errorf("status: %w", err)
	}
	overruns, err := st.OverrunCounts(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("status: %w", err)
	}
	pauses := pausesOf(snap)
	snoozes, err := st.Snoozes(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("status: %w", err)
	}
	runners, err := LiveRunners(ctx, st, LiveWithin)
	if err != nil {
		return Report{}, fmt.Errorf("status: %w", err)
	}

	out := Report{Now: snap.Now.UTC().Format(time.RFC3339Nano), Hunts: make([]Hunt, 0, len(entries)),
		Runners: runners, RunnersLive: LiveRule, now: snap.Now}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		seen[e.ID] = true
		p, ok := published[e.ID]
		// A disabled hunt is meant to be absent from (or tombstoned in) hunt_schedule.
		out.Hunts = append(out.Hunts, build(snap, e, !ok && e.Enabled, p, runs[e.ID], overruns[e.ID], pauses[e.ID]))
	}
	// Hunts runners ran but nobody published (or that the given files no longer define):
	// shown so that work nobody scheduled on purpose is visible. Retired hunts stay hidden.
	extra := map[string]bool{}
	for id := range snap.Hunts {
		extra[id] = true
	}
	for id := range runs {
		extra[id] = true
	}
	for id := range extra {
		if seen[id] {
			continue
		}
		if p, ok := published[id]; ok && !p.Enabled {
			continue
		}
		p, ok := published[id]
		e := p.Hunt
		if !ok {
			e = hunt.Hunt{ID: id}
		}
		out.Hunts = append(out.Hunts, build(snap, e, !ok, p, runs[id], overruns[id], pauses[id]))
	}
	sort.Slice(out.Hunts, func(i, j int) bool { return out.Hunts[i].HuntID < out.Hunts[j].HuntID })
	out.markSnoozes(snoozes)
	return out, nil
}

// build is one hunt's row from what was read.
func build(snap store.Snapshot, e hunt.Hunt, unpublished bool, pub publishedEntry, lr store.RunSummary, overruns uint64, pause *Pause) Hunt {
	st := snap.Hunts[e.ID]
	now := snap.Now.Unix()
	hs := Hunt{HuntID: e.ID, Severity: e.Severity, Labels: e.Labels, Description: e.Description, Query: e.Query,
		Revision: e.Revision(), IntervalSeconds: e.IntervalSeconds(), OffsetSeconds: e.OffsetSeconds(), Enabled: e.Enabled,
		Unpublished: unpublished, ConsecutiveFailures: st.ConsecutiveFailures, OverrunCount: st.OverrunCount + overruns,
		TooAggressive: st.TooAggressive, Gaps: lr.Gaps, FindingsLastDay: lr.FindingsLastDay,
		FindingsDroppedLastDay: lr.DroppedLastDay, Paused: pause != nil, Pause: pause, Backfills: backfillsOf(snap, e.ID),
		Exceptions: exceptionsOf(e, lr.ExceptionHits, snap.Now)}
	if st.HasWatermark {
		hs.Watermark = rfcSec(st.Watermark)
	}
	if st.HasLease {
		hs.LeaseOwner, hs.LeaseFire, hs.LeaseUntil = st.LeaseOwner, rfcSec(st.LeaseFire), rfc(st.LeaseUntil)
		hs.LeaseLive = st.LeaseHeld(snap.Now)
	}
	if st.HasRequest {
		hs.RequestedFire = rfcSec(st.RequestedFire)
	}
	if iv, off := e.IntervalSeconds(), e.OffsetSeconds(); e.Enabled && iv > 0 {
		latest := schedule.LatestFire(now, iv, off)
		hs.LatestFire, hs.NextFire = rfcSec(latest), rfcSec(latest+iv)
		row := schedule.Row{HuntID: e.ID, IntervalSeconds: uint32(iv), PhaseOffset: uint32(off), Enabled: true}
		ss := st.ScheduleState()
		ss.Paused = false // shown as its own state; Due below leaves paused hunts out
		ss.FirstOwed, ss.HasFirstOwed = firstOwed(&e, pub, lr)
		hs.Due = !hs.Paused && schedule.IsDue(now, row, ss)
		hs.BehindSeconds = schedule.Behind(now, row, ss)
	}
	if lr.HasLast {
		hs.LastRunStatus, hs.LastRunError, hs.LastRunRows = lr.Status, CleanError(lr.Error), lr.Rows
		hs.LastRunTime, hs.LastRunFire = rfc(lr.Finished), rfc(lr.Fire)
	}
	switch {
	case lr.HasSuccess:
		hs.LastSuccess = rfc(lr.LastSuccess)
	case st.HasWatermark:
		// No commit within RecentWindow: the watermark is the newest committed fire, and its
		// run finished after it.
		hs.LastSuccess = rfcSec(st.Watermark)
	}
	if hs.Paused {
		hs.NextFire = "" // a paused hunt fires at no time until resumed
	}
	hs.State = stateOf(hs, lr, st.Status)
	if hs.State == StateNoData || hs.State == StateOverBudget {
		hs.StateDetail = CleanError(st.LastError)
	}
	return hs
}

// firstOwed is the oldest fire a hunt that never committed is known to owe: its first failed
// or lost attempt, or the first fire after it was first published, whichever is older. So a
// hunt failing since it was published counts as behind from then, not from its latest fire.
func firstOwed(e *hunt.Hunt, pub publishedEntry, lr store.RunSummary) (int64, bool) {
	var fire int64
	ok := false
	if lr.HasFailed {
		fire, ok = lr.FirstFailedFire, true
	}
	if !pub.firstPublished.IsZero() && pub.firstPublished.Unix() > 0 {
		f := schedule.NextFire(pub.firstPublished.Unix()-1, e.IntervalSeconds(), e.OffsetSeconds())
		if !ok || f < fire {
			fire, ok = f, true
		}
	}
	return fire, ok
}

// stateOf ranks what a person most needs to know about the hunt into one word.
// health is the hunt_state status of its newest run: no_data and over_budget hold until a run
// succeeds again.
func stateOf(h Hunt, lr store.RunSummary, health hunt.RunStatus) string {
	switch {
	case !h.Enabled && !h.Unpublished:
		return StateDisabled
	case h.Paused:
		return StatePaused
	case h.ConsecutiveFailures > 0 || (lr.HasLast && lr.Status == hunt.RunFailed.String()):
		return StateFailing
	case health == hunt.RunOverBudget:
		return StateOverBudget
	case health == hunt.RunNoData:
		return StateNoData
	case h.Unpublished:
		return StateUnpublished
	case h.Watermark == "" && !lr.HasLast && h.BehindSeconds > 0:
		return StateNeverRun
	case h.IntervalSeconds > 0 && h.BehindSeconds > 2*h.IntervalSeconds:
		return StateBehind
	case h.LeaseLive:
		return StateRunning
	}
	return StateOK
}
