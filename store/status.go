package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// The reads of the status report (package status renders them): the published schedule, the
// run log's per-hunt summary and rows, the runners' heartbeats and what the lease and run log
// say of each owner. Each is one statement; none writes.

// PublishedHunt is the newest hunt_schedule row of one hunt, tombstones included.
type PublishedHunt struct {
	HuntID           string
	Interval, Offset int64 // seconds
	Enabled          bool
	// FirstPublished is the oldest hunt_schedule row still stored for the hunt. Merges keep
	// only the newest row, so after one it is the last change instead: good enough to date
	// the first owed fire of a hunt that never ran, which is all status uses it for.
	FirstPublished time.Time
}

// PublishedHunts reads the newest hunt_schedule row of every hunt of every hunt set.
func (s *Store) PublishedHunts(ctx context.Context) ([]PublishedHunt, error) {
	// TODO(#24): fold with the one newest hunt_schedule form once it exists in store.
	rows, err := s.conn.Query(ctx, "SELECT hunt_id, argMax(interval_seconds, updated), argMax(phase_offset, updated), "+
		"argMax(enabled, updated), min(updated) FROM "+s.table(schema.TableSchedule)+" GROUP BY hunt_id")
	if err != nil {
		return nil, fmt.Errorf("read hunt_schedule: %w", err)
	}
	defer rows.Close()
	var out []PublishedHunt
	for rows.Next() {
		var p PublishedHunt
		var iv, off uint32
		var en uint8
		if err := rows.Scan(&p.HuntID, &iv, &off, &en, &p.FirstPublished); err != nil {
			return nil, fmt.Errorf("read hunt_schedule: %w", err)
		}
		p.Interval, p.Offset, p.Enabled = int64(iv), int64(off), en == 1
		out = append(out, p)
	}
	return out, rows.Err()
}

// RunSummary is one hunt's aggregate over the recent run log (RunSummaries).
type RunSummary struct {
	// The newest attempt, gap rows aside (a gap row shares its commit's time).
	HasLast  bool
	Status   string
	Error    string
	Finished time.Time
	Rows     uint64
	Fire     time.Time

	HasSuccess  bool
	LastSuccess time.Time // finished

	HasFailed       bool
	FirstFailedFire int64 // the oldest failed, lost or over_budget fire (an attempt that did not commit)

	Gaps uint64 // gap rows
	// FindingsLastDay and DroppedLastDay sum rows_written and findings_dropped of the runs
	// that succeeded within the last day of the server's clock.
	FindingsLastDay, DroppedLastDay uint64
	// ExceptionHits sums, per exception id, the rows live exceptions removed from the runs
	// that succeeded within the window read.
	ExceptionHits map[string]uint64
}

// RunSummaries reads, per hunt, the newest attempt, the newest success, the oldest failed or
// lost fire, the number of gap rows, and the findings of the last day, in one pass over the
// hunt_runs rows that finished within `within` of the server's now. Backfill chunks are left
// out: they replay the past and say nothing of the hunt's live health.
func (s *Store) RunSummaries(ctx context.Context, within time.Duration) (map[string]RunSummary, error) {
	q := `SELECT hunt_id,
    countIf(status != 'gap'), argMaxIf(status, finished, status != 'gap'), argMaxIf(error, finished, status != 'gap'),
    maxIf(finished, status != 'gap'), argMaxIf(rows_written, finished, status != 'gap'), argMaxIf(fire, finished, status != 'gap'),
    countIf(status = 'succeeded'), maxIf(finished, status = 'succeeded'),
    countIf(status IN ('failed', 'lost', 'over_budget')), toInt64(minIf(fire, status IN ('failed', 'lost', 'over_budget'))),
    countIf(status = 'gap'),
    sumIf(rows_written, status = 'succeeded' AND finished > now64(6) - INTERVAL 1 DAY),
    sumIf(findings_dropped, status = 'succeeded' AND finished > now64(6) - INTERVAL 1 DAY),
    sumMapIf(exception_hits, status = 'succeeded')
FROM ` + s.table(schema.ViewRuns) + `
WHERE finished > now64(6) - toIntervalSecond({window:UInt32}) AND kind != 'backfill'
GROUP BY hunt_id`
	rows, err := s.conn.Query(ctx, q, clickhouse.Named("window", uint32(within/time.Second)))
	if err != nil {
		return nil, fmt.Errorf("read hunt_runs: %w", err)
	}
	defer rows.Close()
	out := map[string]RunSummary{}
	for rows.Next() {
		var id string
		var r RunSummary
		var nLast, nSucc, nFailed uint64
		if err := rows.Scan(&id, &nLast, &r.Status, &r.Error, &r.Finished, &r.Rows, &r.Fire,
			&nSucc, &r.LastSuccess, &nFailed, &r.FirstFailedFire, &r.Gaps, &r.FindingsLastDay, &r.DroppedLastDay, &r.ExceptionHits); err != nil {
			return nil, fmt.Errorf("read hunt_runs: %w", err)
		}
		r.HasLast, r.HasSuccess, r.HasFailed = nLast > 0, nSucc > 0, nFailed > 0
		out[id] = r
	}
	return out, rows.Err()
}

// RunRecord is one row of the run log people read (the hunt_runs view: commits and the
// attempts that did not commit).
type RunRecord struct {
	Fire            time.Time
	RunID           string
	Owner           string
	Status          string
	Kind            string
	WindowStart     time.Time
	WindowEnd       time.Time
	Rows            uint64
	FindingsDropped uint64
	Started         time.Time
	Finished        time.Time
	Error           string // as stored: the server's text, which can quote row values
	Revision        string // the hunt's revision that ran ("" before revisions were recorded)
}

// RunRecords reads the newest limit rows of huntID's run log, newest first.
func (s *Store) RunRecords(ctx context.Context, huntID string, limit int) ([]RunRecord, error) {
	rows, err := s.conn.Query(ctx, `SELECT fire, toString(run_id), owner, status, toString(kind), window_start, window_end,
    rows_written, findings_dropped, started, finished, error, revision
FROM `+s.table(schema.ViewRuns)+`
WHERE hunt_id = {h:String}
ORDER BY finished DESC, status DESC
LIMIT {n:UInt32}`, clickhouse.Named("h", huntID), clickhouse.Named("n", uint32(limit)))
	if err != nil {
		return nil, fmt.Errorf("read hunt_runs: %w", err)
	}
	defer rows.Close()
	var out []RunRecord
	for rows.Next() {
		var r RunRecord
		if err := rows.Scan(&r.Fire, &r.RunID, &r.Owner, &r.Status, &r.Kind, &r.WindowStart, &r.WindowEnd, &r.Rows,
			&r.FindingsDropped, &r.Started, &r.Finished, &r.Error, &r.Revision); err != nil {
			return nil, fmt.Errorf("read hunt_runs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// HeartbeatRow is one runner's newest hunt_runner_heartbeat row, as read.
type HeartbeatRow struct {
	Owner, Version, HuntSet, SetHash string
	Hunts                            uint32
	LastTick                         time.Time // the server's clock at the beat
	Started                          time.Time // the runner's clock at its start
	HuntFiles                        string    // its hunt files' problems, JSON (Heartbeat.HuntFiles)
}

// Heartbeats reads the newest heartbeat of every runner in the table, by owner, and the
// server's now (zero when there is no row). A database whose schema predates the table has
// none.
func (s *Store) Heartbeats(ctx context.Context) ([]HeartbeatRow, time.Time, error) {
	rows, err := s.conn.Query(ctx, `SELECT owner, argMax(version, last_tick), argMax(hunt_set, last_tick),
    argMax(set_hash, last_tick), argMax(hunts, last_tick), max(last_tick), argMax(started, last_tick), argMax(hunt_files, last_tick), any(now64(3))
FROM `+s.table(schema.TableHeartbeat)+`
GROUP BY owner ORDER BY owner`)
	if err != nil {
		var ex *clickhouse.Exception
		if errors.As(err, &ex) && ex.Code == 60 { // UNKNOWN_TABLE: `hunt-runner schema` not run since
			return nil, time.Time{}, nil
		}
		return nil, time.Time{}, fmt.Errorf("read %s: %w", schema.TableHeartbeat, err)
	}
	defer rows.Close()
	var out []HeartbeatRow
	var now time.Time
	for rows.Next() {
		var b HeartbeatRow
		if err := rows.Scan(&b.Owner, &b.Version, &b.HuntSet, &b.SetHash, &b.Hunts, &b.LastTick, &b.Started, &b.HuntFiles, &now); err != nil {
			return nil, time.Time{}, fmt.Errorf("read %s: %w", schema.TableHeartbeat, err)
		}
		out = append(out, b)
	}
	return out, now, rows.Err()
}

// OwnerActivity is what the lease and the run log say of one owner within a window.
type OwnerActivity struct {
	Owner    string
	LastSeen time.Time // its newest claim or finished attempt
	Runs     uint64    // its finished attempts, commits included, gap rows not
}

// OwnerActivities reads, by owner, the owners that claimed a fire (hunt_lease) or finished an
// attempt (hunt_runs) within `within` of the server's now.
func (s *Store) OwnerActivities(ctx context.Context, within time.Duration) ([]OwnerActivity, error) {
	rows, err := s.conn.Query(ctx, `SELECT owner, max(seen), sum(run) FROM (
    SELECT owner, claimed AS seen, 0 AS run FROM `+s.table(schema.TableLease)+`
    WHERE claimed > now64(6) - toIntervalSecond({w:UInt32})
    UNION ALL
    SELECT owner, finished AS seen, 1 AS run FROM `+s.table(schema.ViewRuns)+`
    WHERE finished > now64(6) - toIntervalSecond({w:UInt32}) AND status != 'gap' AND owner != ''
) GROUP BY owner ORDER BY owner`, clickhouse.Named("w", uint32(within/time.Second)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []OwnerActivity
	for rows.Next() {
		var a OwnerActivity
		if err := rows.Scan(&a.Owner, &a.LastSeen, &a.Runs); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// OverrunCounts reads, per hunt, how many of its retained commit rows overran (Run.Overran):
// a fire's one commit row carries its overrun, so a fire counts once however many pods or
// retries touched it. A hunt's total is this plus the count its hunt_state row carries from an
// import or an earlier release (HuntState.OverrunCount). Rows rolled up past the commits
// retention count no more.
func (s *Store) OverrunCounts(ctx context.Context) (map[string]uint64, error) {
	out, err := scanByHunt[uint64](s.conn.Query(ctx, "SELECT hunt_id, count() FROM "+s.table(schema.TableWatermark)+
		" WHERE overran = 1 GROUP BY hunt_id"))
	if err != nil {
		return nil, fmt.Errorf("read overruns: %w", err)
	}
	return out, nil
}
