package status

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func table(database, name string) string {
	return schema.QuoteIdent(database) + "." + schema.QuoteIdent(name)
}

type publishedEntry struct {
	hunt.Hunt // as hunt_schedule has it: id, interval, offset, enabled
	// firstPublished is the oldest hunt_schedule row still stored for the hunt. Merges keep
	// only the newest row, so after one it is the last change instead: good enough to date
	// the first owed fire of a hunt that never ran, which is all it is used for.
	firstPublished time.Time
}

// Published reads the newest hunt_schedule row of every hunt (tombstones included, as
// disabled entries), sorted by id.
func Published(ctx context.Context, conn driver.Conn, database string) ([]hunt.Hunt, error) {
	m, err := readPublished(ctx, conn, database)
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

func readPublished(ctx context.Context, conn driver.Conn, database string) (map[string]publishedEntry, error) {
	rows, err := conn.Query(ctx, "SELECT hunt_id, argMax(interval_seconds, updated), argMax(phase_offset, updated), "+
		"argMax(enabled, updated), min(updated) FROM "+table(database, schema.TableSchedule)+" GROUP BY hunt_id")
	if err != nil {
		return nil, fmt.Errorf("read hunt_schedule: %w", err)
	}
	defer rows.Close()
	out := map[string]publishedEntry{}
	for rows.Next() {
		var e publishedEntry
		var iv, off uint32
		var en uint8
		if err := rows.Scan(&e.ID, &iv, &off, &en, &e.firstPublished); err != nil {
			return nil, fmt.Errorf("read hunt_schedule: %w", err)
		}
		e.Interval, e.Offset, e.Enabled = time.Duration(iv)*time.Second, time.Duration(off)*time.Second, en == 1
		out[e.ID] = e
	}
	return out, rows.Err()
}

// runSummary is one hunt's aggregate over the run log.
type runSummary struct {
	hasLast         bool
	status, errText string
	finished, fire  time.Time
	rows            uint64

	hasSuccess  bool
	lastSuccess time.Time

	hasFailed       bool
	firstFailedFire int64

	gaps, findingsDay, droppedDay uint64
}

// RecentWindow is how far back status reads the run log: the last run, the last success, the
// first failure and the gaps are those of this window. The log is kept 90 days and runners read
// status every few ticks, so the window keeps that read proportional to a week of runs. A hunt
// whose newest success is older is shown with its watermark as the last success instead.
const RecentWindow = 7 * 24 * time.Hour

// readRunSummaries reads, per hunt, the newest attempt (gaps aside: a gap row shares its
// commit's time), the newest success, the oldest failed or lost fire, the number of gap rows,
// and the findings of the last day, in one pass over RecentWindow of hunt_runs. Backfill chunks
// are left out: they replay the past and say nothing of the hunt's live health (their progress
// is in Hunt.Backfills).
func readRunSummaries(ctx context.Context, conn driver.Conn, database string) (map[string]runSummary, error) {
	q := `SELECT hunt_id,
    countIf(status != 'gap'), argMaxIf(status, finished, status != 'gap'), argMaxIf(error, finished, status != 'gap'),
    maxIf(finished, status != 'gap'), argMaxIf(rows_written, finished, status != 'gap'), argMaxIf(fire, finished, status != 'gap'),
    countIf(status = 'succeeded'), maxIf(finished, status = 'succeeded'),
    countIf(status IN ('failed', 'lost')), toInt64(minIf(fire, status IN ('failed', 'lost'))),
    countIf(status = 'gap'),
    sumIf(rows_written, status = 'succeeded' AND finished > now64(6) - INTERVAL 1 DAY),
    sumIf(findings_dropped, status = 'succeeded' AND finished > now64(6) - INTERVAL 1 DAY)
FROM ` + table(database, schema.ViewRuns) + `
WHERE finished > now64(6) - toIntervalSecond({window:UInt32}) AND kind != 'backfill'
GROUP BY hunt_id`
	rows, err := conn.Query(ctx, q, clickhouse.Named("window", uint32(RecentWindow/time.Second)))
	if err != nil {
		return nil, fmt.Errorf("read hunt_runs: %w", err)
	}
	defer rows.Close()
	out := map[string]runSummary{}
	for rows.Next() {
		var id string
		var s runSummary
		var nLast, nSucc, nFailed uint64
		if err := rows.Scan(&id, &nLast, &s.status, &s.errText, &s.finished, &s.rows, &s.fire,
			&nSucc, &s.lastSuccess, &nFailed, &s.firstFailedFire, &s.gaps, &s.findingsDay, &s.droppedDay); err != nil {
			return nil, fmt.Errorf("read hunt_runs: %w", err)
		}
		s.hasLast, s.hasSuccess, s.hasFailed = nLast > 0, nSucc > 0, nFailed > 0
		out[id] = s
	}
	return out, rows.Err()
}

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
}

// Runs reads the newest limit rows of hunt's run log.
func Runs(ctx context.Context, conn driver.Conn, database, hunt string, limit int) ([]Run, error) {
	rows, err := conn.Query(ctx, `SELECT fire, toString(run_id), owner, status, toString(kind), window_start, window_end,
    rows_written, findings_dropped, started, finished, error
FROM `+table(database, schema.ViewRuns)+`
WHERE hunt_id = {h:String}
ORDER BY finished DESC, status DESC
LIMIT {n:UInt32}`, clickhouse.Named("h", hunt), clickhouse.Named("n", uint32(limit)))
	if err != nil {
		return nil, fmt.Errorf("read hunt_runs: %w", err)
	}
	defer rows.Close()
	out := []Run{}
	for rows.Next() {
		var r Run
		var fire, ws, we, started, finished time.Time
		if err := rows.Scan(&fire, &r.RunID, &r.Owner, &r.Status, &r.Kind, &ws, &we, &r.Rows, &r.FindingsDropped,
			&started, &finished, &r.Error); err != nil {
			return nil, fmt.Errorf("read hunt_runs: %w", err)
		}
		r.Fire, r.WindowStart, r.WindowEnd, r.Started, r.Finished = rfc(fire), rfc(ws), rfc(we), rfc(started), rfc(finished)
		r.Error = CleanError(r.Error)
		out = append(out, r)
	}
	return out, rows.Err()
}
