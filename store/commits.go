package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Commit is one fire's commit: its run, under the lease that won the fire.
type Commit struct {
	Lease lease.Lease
	Run   Run
}

// ErrDuplicateHunt refuses a batch holding two commits of one hunt (or backfill key): a
// caller's bug, since both would be fenced against the same newest rows. Nothing is sent.
var ErrDuplicateHunt = errors.New("watermark: two commits of one hunt in a batch")

// Advance commits one run: AdvanceAll of one.
func (s *Store) Advance(ctx context.Context, l lease.Lease, run Run) error {
	return s.AdvanceAll(ctx, []Commit{{Lease: l, Run: run}})[0]
}

// AdvanceAll commits the fires of different hunts with one compare-and-set statement and one
// read-back, and gives each commit its own outcome, in order. A commit's row lands in
// hunt_watermark, moving its hunt's watermark to Run.WindowEnd, only if, when the statement
// runs,
//
//   - the newest lease of the hunt is the commit's claim, for its fire, and lives longer than
//     the statement may run (CommitBound, also its max_execution_time);
//   - the newest watermark is still where the run's window (or its recorded gap) starts —
//     or there is still none, for a first run (Lease.HasWatermark is what the claim verified) —
//     and below the new one; and
//   - the hunt has no commit row of this run yet.
//
// Each row is fenced on its own hunt's rows alone, so one fenced commit never holds back the
// others. A run commits only the window it actually read, from where progress stood when it
// won the claim, and no two commits of a hunt overlap, whatever pauses, late answers or
// expiries came between. The row is also the run's audit record (hunt_runs reads it), so a
// commit and its record cannot be separated.
//
// Whatever the insert answers, the read-back of the batch's run ids decides each commit: nil
// when its row is there (an error from an insert that landed is a success), ErrFenced when the
// insert answered and wrote no row of it, a refusal (lease.Refused) for every commit when the
// server did not execute the statement, ErrUnknown when neither the insert nor the read-back
// settled it. A batch with two commits of one hunt is refused whole (ErrDuplicateHunt).
//
// Retrying: only ErrUnknown commits need it, and the retry must be the identical batch (the
// same commits in the same order), never a regrouped one. Its deduplication token is derived
// from the run ids in order, so a retry routed to another replica after a lost answer is
// dropped by the block deduplication even before the first attempt's rows are visible there;
// a regrouped batch has a new token and could land a second row of a run on a lagging replica.
// On one replica a retry inserts nothing of what landed (the compare no longer holds, and the
// run has a row) and finds the first attempt's rows.
func (s *Store) AdvanceAll(ctx context.Context, commits []Commit) []error {
	errs := make([]error, len(commits))
	if len(commits) == 0 {
		return errs
	}
	if h, dup := duplicateHunt(commits); dup {
		for i := range errs {
			errs[i] = fmt.Errorf("%w: %s", ErrDuplicateHunt, h)
		}
		return errs
	}
	p := commitParams(commits)
	bound := CommitBound(ctx)
	wctx := writeCtx(withExecutionBound(ctx, bound), "commit:"+contentToken(p.token...))
	err := s.conn.Exec(wctx, s.commitSQL(), append(p.named, clickhouse.Named("bound_ms", bound.Milliseconds()))...)
	if err != nil && !lease.Transient(err) {
		for i, c := range commits {
			errs[i] = fmt.Errorf("watermark: advance %s to %d: %w", c.Lease.HuntID, c.Run.WindowEnd, err)
		}
		return errs
	}
	// Whatever the insert answered, the rows decide: an error may come from a statement that
	// landed (a quorum timeout after the local write, a lost answer), and a success must be
	// checked against each row's fence.
	landed, rerr := s.committed(ctx, p.hunts, p.runs)
	for i, c := range commits {
		errs[i] = commitOutcome(c, landed[runKey{c.Lease.HuntID, c.Run.RunID}], err, rerr)
	}
	return errs
}

// commitSQL is the compare-and-set of a batch: the commits, one row each from the zipped
// parameter arrays (c), joined to the newest lease and the newest watermark of exactly their
// hunts. A run id is fresh for each run (the runner's uuid.New), so "no row of this run yet"
// needs no pairing with its hunt: the cheaper plain NOT IN is the same set. The watermark side
// is the per-hunt max, which the table's projection answers without
// reading a hunt's every commit (it is newestCommitSQL's watermark: the newest row's is the
// greatest).
func (s *Store) commitSQL() string {
	return `INSERT INTO ` + s.table(schema.TableWatermark) + ` (hunt_id, watermark, claim_id, updated,
    run_id, run_owner, run_start, run_rows, run_started, gap_start, gap_end, findings_dropped, kind, interval_seconds, revision, exception_hits, overran)
SELECT c.hunt_id, toDateTime(c.wm, 'UTC'), l.claim_id, now64(6),
    c.run_id, c.owner, toDateTime(c.ws, 'UTC'), c.rows,
    fromUnixTimestamp64Micro(c.started, 'UTC'), toDateTime(c.gs, 'UTC'), toDateTime(c.ge, 'UTC'),
    c.dropped, c.kind, c.interval_seconds, c.revision, mapFromArrays(c.hit_ids, c.hit_counts), c.overran
FROM (SELECT arrayJoin(arrayEnumerate({ids:Array(String)})) AS i,
        {ids:Array(String)}[i] AS hunt_id, toUUID({claims:Array(String)}[i]) AS claim, {fires:Array(Int64)}[i] AS fire,
        {has_prev:Array(Bool)}[i] AS has_prev, {prevs:Array(Int64)}[i] AS prev, {wms:Array(Int64)}[i] AS wm,
        toUUID({runs:Array(String)}[i]) AS run_id, {owners:Array(String)}[i] AS owner, {ws:Array(Int64)}[i] AS ws,
        {rows:Array(UInt64)}[i] AS rows, {started:Array(Int64)}[i] AS started, {gs:Array(Int64)}[i] AS gs,
        {ge:Array(Int64)}[i] AS ge, {dropped:Array(UInt64)}[i] AS dropped, {kinds:Array(String)}[i] AS kind,
        {intervals:Array(UInt32)}[i] AS interval_seconds, {revisions:Array(String)}[i] AS revision,
        {hit_ids:Array(Array(String))}[i] AS hit_ids, {hit_counts:Array(Array(UInt64))}[i] AS hit_counts,
        toUInt8({overran:Array(Bool)}[i]) AS overran) AS c
JOIN (` + NewestLeaseSQL(s.database, "ids") + `) AS l ON l.hunt_id = c.hunt_id
LEFT JOIN (` + newestWatermarkSQL(s.database, "ids") + `) AS w ON w.hunt_id = c.hunt_id
WHERE l.claim_id = c.claim AND toInt64(l.fire) = c.fire
  AND l.until > now64(3) + toIntervalMillisecond({bound_ms:Int64})
  AND (w.hunt_id != '') = c.has_prev AND (NOT c.has_prev OR toInt64(w.watermark) = c.prev)
  AND c.wm > c.prev
  AND c.run_id NOT IN (SELECT run_id FROM ` + s.table(schema.TableWatermark) + ` WHERE hunt_id IN {ids:Array(String)})`
}

// batchParams are a batch's commits as the statement's parameter arrays, one element per
// commit in order.
type batchParams struct {
	named       []any
	hunts, runs []string
	token       []any // the run ids, in order: the batch's deduplication token
}

func commitParams(commits []Commit) batchParams {
	n := len(commits)
	var (
		hunts, claims, runs, owners, kinds, revisions = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		fires, prevs, wms, ws, started, gs, ge        = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		rows, dropped                                 = make([]uint64, n), make([]uint64, n)
		hasPrev, overran                              = make([]bool, n), make([]bool, n)
		intervals                                     = make([]uint32, n)
		hitIDs, hitCounts                             = make([][]string, n), make([][]uint64, n)
		token                                         = make([]any, n)
	)
	for i, c := range commits {
		l, run := c.Lease, c.Run
		hunts[i], claims[i], fires[i], hasPrev[i] = l.HuntID, l.ClaimID.String(), l.Fire, l.HasWatermark
		// The run continues from where its window (or the gap before it) starts; that must
		// still be the newest watermark, so the committed windows of a hunt tile.
		prevs[i] = commitPrev(run)
		wms[i], runs[i], owners[i], ws[i] = run.WindowEnd, run.RunID.String(), run.Owner, run.WindowStart
		rows[i], started[i], gs[i], ge[i], dropped[i] = run.RowsWritten, run.Started.UnixMicro(), run.GapStart, run.GapEnd, run.FindingsDropped
		kinds[i], intervals[i], revisions[i] = cmp.Or(run.Kind, hunt.KindScheduled).String(), uint32(run.Interval), run.Revision
		hitIDs[i], hitCounts[i] = hitArrays(run.ExceptionHits)
		overran[i] = run.Overran
		token[i] = runs[i]
	}
	return batchParams{hunts: hunts, runs: runs, token: token, named: []any{
		clickhouse.Named("ids", hunts), clickhouse.Named("claims", claims), clickhouse.Named("fires", fires),
		clickhouse.Named("has_prev", hasPrev), clickhouse.Named("prevs", prevs), clickhouse.Named("wms", wms),
		clickhouse.Named("runs", runs), clickhouse.Named("owners", owners), clickhouse.Named("ws", ws),
		clickhouse.Named("rows", rows), clickhouse.Named("started", started), clickhouse.Named("gs", gs),
		clickhouse.Named("ge", ge), clickhouse.Named("dropped", dropped), clickhouse.Named("kinds", kinds),
		clickhouse.Named("intervals", intervals), clickhouse.Named("revisions", revisions),
		clickhouse.Named("hit_ids", hitIDs), clickhouse.Named("hit_counts", hitCounts), clickhouse.Named("overran", overran),
	}}
}

// commitPrev is where run's commit continues from: its window's start, or its gap's.
func commitPrev(run Run) int64 {
	if run.GapEnd > run.GapStart {
		return run.GapStart
	}
	return run.WindowStart
}

// duplicateHunt reports a hunt with two commits in commits.
func duplicateHunt(commits []Commit) (string, bool) {
	seen := make(map[string]bool, len(commits))
	for _, c := range commits {
		if seen[c.Lease.HuntID] {
			return c.Lease.HuntID, true
		}
		seen[c.Lease.HuntID] = true
	}
	return "", false
}

// commitOutcome is one commit's outcome from the insert's answer (err) and the read-back's
// (landed, rerr).
func commitOutcome(c Commit, landed bool, err, rerr error) error {
	l, wm := c.Lease, c.Run.WindowEnd
	switch {
	case landed:
		return nil
	case rerr != nil && err != nil:
		return fmt.Errorf("%w: advance %s to %d: %w (read-back: %v)", ErrUnknown, l.HuntID, wm, err, rerr)
	case rerr != nil:
		return fmt.Errorf("%w: advance %s read-back: %w", ErrUnknown, l.HuntID, rerr)
	case err != nil && lease.Refused(err):
		return fmt.Errorf("watermark: advance %s to %d: refused before executing: %w", l.HuntID, wm, err)
	case err != nil:
		return fmt.Errorf("%w: advance %s to %d: not visible after: %w", ErrUnknown, l.HuntID, wm, err)
	}
	return fmt.Errorf("%w: hunt %s fire %d claim %s: not committed (lease no longer ours or too close to its end, or the watermark moved from %d)",
		ErrFenced, l.HuntID, l.Fire, l.ClaimID, commitPrev(c.Run))
}

// ErrUnknown marks a commit whose outcome is not known yet: the insert failed in a way that
// may have applied it (or may still apply it), and its read-back did not settle it. Retrying
// Advance with the same run is safe once the first attempt can no longer be running
// (CommitBound after its send): the retry finds the row, or is the only one to write it.
var ErrUnknown = errors.New("watermark: commit outcome unknown")

// DefaultCommitBound is the server-side execution bound of a commit whose context has no
// deadline: the runner's longest (half its 10 s attempt timeout).
const DefaultCommitBound = 5 * time.Second

// CommitBound is how long Advance lets its insert run on the server (max_execution_time):
// half of what is left of ctx's deadline (the other half is the read-back's), else
// DefaultCommitBound. The compare-and-set also requires
// the lease to outlive it on the server's clock, so a commit that passes its fence lands
// before the lease ends and can never land beside the next holder's (docs/claim-protocol.md).
func CommitBound(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl)/2, time.Millisecond)
	}
	return DefaultCommitBound
}

// Committed reports whether run committed (its row is in hunt_watermark).
func (s *Store) Committed(ctx context.Context, huntID string, run uuid.UUID) (bool, error) {
	landed, err := s.committed(ctx, []string{huntID}, []string{run.String()})
	return landed[runKey{huntID, run}], err
}

// runKey is one commit's row in hunt_watermark.
type runKey struct {
	hunt string
	run  uuid.UUID
}

// committed reads which of the runs (runs[i] of hunts[i]) have their commit row.
func (s *Store) committed(ctx context.Context, hunts, runs []string) (map[runKey]bool, error) {
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT hunt_id, run_id FROM "+s.table(schema.TableWatermark)+
		" WHERE hunt_id IN {ids:Array(String)} AND run_id IN {runs:Array(UUID)}",
		clickhouse.Named("ids", hunts), clickhouse.Named("runs", runs))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	landed := make(map[runKey]bool, len(runs))
	for rows.Next() {
		var k runKey
		if err := rows.Scan(&k.hunt, &k.run); err != nil {
			return nil, err
		}
		landed[k] = true
	}
	return landed, rows.Err()
}
