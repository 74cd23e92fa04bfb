package status

import (
	"context"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

// Reader is what status reads: the coordination snapshot and the status reads of the store
// (store.Store implements it, one statement a method).
type Reader interface {
	Snapshot(ctx context.Context) (store.Snapshot, error)
	PublishedHunts(ctx context.Context) ([]store.PublishedHunt, error)
	RunSummaries(ctx context.Context, within time.Duration) (map[string]store.RunSummary, error)
	OverrunCounts(ctx context.Context) (map[string]uint64, error)
	RunRecords(ctx context.Context, huntID string, limit int) ([]store.RunRecord, error)
	OwnerActivities(ctx context.Context, within time.Duration) ([]store.OwnerActivity, error)
	LatestFindings(ctx context.Context, huntID string, limit int) ([]store.LatestFinding, error)
	Snoozes(ctx context.Context) (map[string]store.Snooze, error)
	HeartbeatReader
}

// HeartbeatReader reads the runners' newest heartbeats and the server's now
// (store.Store.Heartbeats).
type HeartbeatReader interface {
	Heartbeats(ctx context.Context) ([]store.HeartbeatRow, time.Time, error)
}

// Published reads the newest hunt_schedule row of every hunt (tombstones included, as
// disabled entries), sorted by id.
func Published(ctx context.Context, st Reader) ([]hunt.Hunt, error) {
	m, err := readPublished(ctx, st)
	if err != nil {
		return nil, err
	}
	out := make([]hunt.Hunt, 0, len(m))
	for _, p := range m {
		out = append(out, p.Hunt)
	}
	sortEntries(out)
	return out, nil
}

type publishedEntry struct {
	hunt.Hunt                // as hunt_schedule has it: id, interval, offset, enabled
	firstPublished time.Time // store.PublishedHunt.FirstPublished
}

func readPublished(ctx context.Context, st Reader) (map[string]publishedEntry, error) {
	ps, err := st.PublishedHunts(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]publishedEntry, len(ps))
	for _, p := range ps {
		out[p.HuntID] = publishedEntry{Hunt: hunt.Hunt{ID: p.HuntID, Interval: time.Duration(p.Interval) * time.Second,
			Offset: time.Duration(p.Offset) * time.Second, Enabled: p.Enabled}, firstPublished: p.FirstPublished}
	}
	return out, nil
}

// RecentWindow is how far back status reads the run log: the last run, the last success, the
// first failure and the gaps are those of this window. The log is kept 90 days and runners read
// status every few ticks, so the window keeps that read proportional to a week of runs. A hunt
// whose newest success is older is shown with its watermark as the last success instead.
const RecentWindow = 7 * 24 * time.Hour

// Run is one row of the run log (hunt_runs), newest first in Runs.
type Run struct {
	Fire            string `json:"fire"`
	RunID           string `json:"run_id"`
	Owner           string `json:"owner"`
	Status          string `json:"status"`
	Kind            string `json:"kind"`
	WindowStart     string `json:"window_start"`
	WindowEnd       string `json:"window_end"`
	Rows            uint64 `json:"rows"`
	FindingsDropped uint64 `json:"findings_dropped"`
	Started         string `json:"started"`
	Finished        string `json:"finished"`
	Error           string `json:"error"`
	// Revision is the hunt's revision that ran; RevisionChanged marks the run whose revision
	// differs from the run before it (the next older row), where the definition changed.
	Revision        string `json:"revision,omitempty"`
	RevisionChanged bool   `json:"revision_changed,omitempty"`
}

// Runs reads the newest limit rows of hunt's run log.
func Runs(ctx context.Context, st Reader, hunt string, limit int) ([]Run, error) {
	rs, err := st.RunRecords(ctx, hunt, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Run, 0, len(rs))
	for _, r := range rs {
		out = append(out, Run{Fire: rfc(r.Fire), RunID: r.RunID, Owner: r.Owner, Status: r.Status, Kind: r.Kind,
			WindowStart: rfc(r.WindowStart), WindowEnd: rfc(r.WindowEnd), Rows: r.Rows, FindingsDropped: r.FindingsDropped,
			Started: rfc(r.Started), Finished: rfc(r.Finished), Error: CleanError(r.Error), Revision: r.Revision})
	}
	for i := range out[:max(len(out)-1, 0)] {
		older := out[i+1].Revision
		out[i].RevisionChanged = out[i].Revision != "" && older != "" && out[i].Revision != older
	}
	return out, nil
}
