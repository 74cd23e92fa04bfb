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

// Advance commits run with a compare-and-set: one row lands in hunt_watermark, moving the
// hunt's watermark to run.WindowEnd, only if, when the statement runs,
//
//   - the newest lease of the hunt is l's claim, for l's fire, and lives longer than the
//     statement may run (CommitBound, also its max_execution_time);
//   - the newest watermark is still where the run's window (or its recorded gap) starts —
//     or there is still none, for a first run (l.HasWatermark is what the claim verified) —
//     and below the new one; and
//   - the hunt has no commit row of this run yet.
//
// So a run commits only the window it actually read, from where progress stood when it won the
// claim, and no two commits of a hunt overlap, whatever pauses, late answers or expiries came
// between. The row is also the run's audit record (hunt_runs reads it), so a commit and its
// record cannot be separated.
//
// Whatever the insert answers, Advance reads back by run id before deciding: nil when the row
// is there (an error from an insert that landed is a success), ErrFenced when the insert
// answered and wrote nothing, a refusal (lease.Refused) when the server did not execute it,
// ErrUnknown when neither the insert nor the read-back settled it. A retry after a lost answer
// inserts nothing (the compare no longer holds, and the run has a row) and finds the row of the
// first attempt; its deduplication token is the run id, so a retry routed to another replica
// is dropped by the block deduplication too.
func (s *Store) Advance(ctx context.Context, l lease.Lease, run Run) error {
	watermark := run.WindowEnd
	q := `INSERT INTO ` + s.table(schema.TableWatermark) + ` (hunt_id, watermark, claim_id, updated,
    run_id, run_owner, run_start, run_rows, run_started, gap_start, gap_end, findings_dropped, kind, interval_seconds, revision, exception_hits)
SELECT l.hunt_id, toDateTime({wm:Int64}, 'UTC'), l.claim_id, now64(6),
    toUUID({run:String}), {owner:String}, toDateTime({ws:Int64}, 'UTC'), {rows:UInt64},
    fromUnixTimestamp64Micro({started:Int64}, 'UTC'), toDateTime({gs:Int64}, 'UTC'), toDateTime({ge:Int64}, 'UTC'),
    {dropped:UInt64}, {kind:String}, {interval:UInt32}, {revision:String},
    mapFromArrays({hit_ids:Array(String)}, {hit_counts:Array(UInt64)})
FROM (` + NewestLeaseSQL(s.database, "ids") + `) AS l
LEFT JOIN (` + newestCommitSQL(s.database, "ids") + `) AS w ON w.hunt_id = l.hunt_id
WHERE l.claim_id = toUUID({claim:String}) AND toInt64(l.fire) = {fire:Int64}
  AND l.until > now64(3) + toIntervalMillisecond({bound_ms:Int64})
  AND (w.hunt_id != '') = {has_prev:Bool} AND (NOT {has_prev:Bool} OR toInt64(w.watermark) = {prev:Int64})
  AND {wm:Int64} > {prev:Int64}
  AND toUUID({run:String}) NOT IN (SELECT run_id FROM ` + s.table(schema.TableWatermark) + ` WHERE hunt_id = {h:String})`
	kind := cmp.Or(run.Kind, hunt.KindScheduled)
	// The run continues from where its window (or the gap before it) starts; that must still
	// be the newest watermark, so the committed windows of a hunt tile.
	prev := run.WindowStart
	if run.GapEnd > run.GapStart {
		prev = run.GapStart
	}
	hitIDs, hitCounts := hitArrays(run.ExceptionHits)
	bound := CommitBound(ctx)
	wctx := writeCtx(withExecutionBound(ctx, bound), "commit:"+run.RunID.String())
	err := s.conn.Exec(wctx, q,
		clickhouse.Named("ids", []string{l.HuntID}),
		clickhouse.Named("h", l.HuntID),
		clickhouse.Named("bound_ms", bound.Milliseconds()),
		clickhouse.Named("wm", watermark),
		clickhouse.Named("claim", l.ClaimID.String()),
		clickhouse.Named("fire", l.Fire),
		clickhouse.Named("has_prev", l.HasWatermark),
		clickhouse.Named("prev", prev),
		clickhouse.Named("run", run.RunID.String()),
		clickhouse.Named("owner", run.Owner),
		clickhouse.Named("ws", run.WindowStart),
		clickhouse.Named("rows", run.RowsWritten),
		clickhouse.Named("started", run.Started.UnixMicro()),
		clickhouse.Named("gs", run.GapStart),
		clickhouse.Named("ge", run.GapEnd),
		clickhouse.Named("dropped", run.FindingsDropped),
		clickhouse.Named("kind", kind.String()),
		clickhouse.Named("interval", run.Interval),
		clickhouse.Named("revision", run.Revision),
		clickhouse.Named("hit_ids", hitIDs), clickhouse.Named("hit_counts", hitCounts),
	)
	if err != nil && !lease.Transient(err) {
		return fmt.Errorf("watermark: advance %s to %d: %w", l.HuntID, watermark, err)
	}
	// Whatever the insert answered, its row decides: an error may come from a statement that
	// landed (a quorum timeout after the local write, a lost answer), and a success must be
	// checked against the fence.
	ok, rerr := s.Committed(ctx, l.HuntID, run.RunID)
	switch {
	case ok:
		return nil
	case rerr != nil && err != nil:
		return fmt.Errorf("%w: advance %s to %d: %w (read-back: %v)", ErrUnknown, l.HuntID, watermark, err, rerr)
	case rerr != nil:
		return fmt.Errorf("%w: advance %s read-back: %w", ErrUnknown, l.HuntID, rerr)
	case err != nil && lease.Refused(err):
		return fmt.Errorf("watermark: advance %s to %d: refused before executing: %w", l.HuntID, watermark, err)
	case err != nil:
		return fmt.Errorf("%w: advance %s to %d: not visible after: %w", ErrUnknown, l.HuntID, watermark, err)
	}
	return fmt.Errorf("%w: hunt %s fire %d claim %s: not committed (lease no longer ours or too close to its end, or the watermark moved from %d)",
		ErrFenced, l.HuntID, l.Fire, l.ClaimID, prev)
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
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM "+s.table(schema.TableWatermark)+
		" WHERE hunt_id = {h:String} AND run_id = toUUID({run:String})",
		clickhouse.Named("h", huntID), clickhouse.Named("run", run.String())).Scan(&n)
	return n > 0, err
}
