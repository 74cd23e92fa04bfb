package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Run is one hunt_run row (one finished attempt).
type Run struct {
	HuntID      string
	Fire        int64
	RunID       uuid.UUID
	Owner       string
	Status      hunt.RunStatus
	WindowStart int64
	WindowEnd   int64
	RowsWritten uint64
	Started     time.Time
	Finished    time.Time
	Error       string
	// GapStart, GapEnd: a range this run skipped (outage longer than max_catchup); Advance
	// records it as a gap row when GapEnd > GapStart. RecordRun ignores them.
	GapStart, GapEnd int64
	// FindingsDropped counts result rows past the hunt's max_findings, not stored.
	FindingsDropped uint64
	Kind            hunt.Kind // hunt.KindScheduled (default), KindRequest, KindBackfill
	// Interval is the hunt's interval in seconds when the run committed
	// (hunt_watermark.interval_seconds): the next run's catch-up cap uses it.
	Interval int64
	// Revision is the hunt's revision that ran (hunt.Hunt.Revision); the run history shows a
	// change of it.
	Revision string
	// ExceptionHits counts, per exception id, the result rows a live exception removed.
	ExceptionHits map[string]uint64
	// Overran marks a live run whose hunt's next fire was already due when its commit was
	// sent (hunt_watermark.overran; Overruns counts them).
	Overran bool
}

// hitArrays are the keys and values of a run's exception hits, bound as two arrays (the
// statements build the map with mapFromArrays), sorted so a retried row is the same bytes.
func hitArrays(h map[string]uint64) ([]string, []uint64) {
	ids := make([]string, 0, len(h))
	for id := range h {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	counts := make([]uint64, len(ids))
	for i, id := range ids {
		counts[i] = h[id]
	}
	return ids, counts
}

// RecordRun appends a hunt_run row.
func (s *Store) RecordRun(ctx context.Context, r Run) error {
	switch r.Status {
	case hunt.RunFailed, hunt.RunLost, hunt.RunOverBudget:
	default:
		// Succeeded and gap rows are commits: only Advance writes them, in hunt_watermark.
		return fmt.Errorf("watermark: run status %q is not one of failed, lost, over_budget (commits go through Advance)", r.Status)
	}
	if r.RunID == uuid.Nil {
		r.RunID = uuid.New()
	}
	r.Kind = cmp.Or(r.Kind, hunt.KindScheduled)
	q := `INSERT INTO ` + s.table(schema.TableRun) + ` (hunt_id, fire, run_id, owner, status, window_start, window_end,
       rows_written, started, finished, error, findings_dropped, kind, revision, exception_hits)
SELECT {h:String}, toDateTime({fire:Int64}, 'UTC'), toUUID({run:String}), {owner:String}, {status:String},
       toDateTime({ws:Int64}, 'UTC'), toDateTime({we:Int64}, 'UTC'), {rows:UInt64},
       fromUnixTimestamp64Micro({started:Int64}, 'UTC'), fromUnixTimestamp64Micro({finished:Int64}, 'UTC'), {err:String},
       {dropped:UInt64}, {kind:String}, {revision:String},
       mapFromArrays({hit_ids:Array(String)}, {hit_counts:Array(UInt64)})`
	// The run id is the deduplication token: a retry of this row on a replicated table after a
	// lost answer is dropped by the block deduplication.
	ictx := writeCtx(ctx, "run:"+r.RunID.String()+":"+r.Status.String())
	hitIDs, hitCounts := hitArrays(r.ExceptionHits)
	err := s.conn.Exec(ictx, q,
		clickhouse.Named("h", r.HuntID), clickhouse.Named("fire", r.Fire), clickhouse.Named("run", r.RunID.String()),
		clickhouse.Named("owner", r.Owner), clickhouse.Named("status", r.Status.String()),
		clickhouse.Named("ws", r.WindowStart), clickhouse.Named("we", r.WindowEnd), clickhouse.Named("rows", r.RowsWritten),
		clickhouse.Named("started", r.Started.UnixMicro()), clickhouse.Named("finished", r.Finished.UnixMicro()),
		clickhouse.Named("err", boundError(r.Error)), clickhouse.Named("dropped", r.FindingsDropped), clickhouse.Named("kind", r.Kind.String()),
		clickhouse.Named("revision", r.Revision),
		clickhouse.Named("hit_ids", hitIDs), clickhouse.Named("hit_counts", hitCounts),
	)
	if err != nil {
		return fmt.Errorf("watermark: record run %s fire %d: %w", r.HuntID, r.Fire, err)
	}
	return nil
}

// Recorded reports whether RecordRun's row for r is in hunt_run (looked up by run id and
// status), so a retry after a lost answer does not write it twice.
func (s *Store) Recorded(ctx context.Context, r Run) (bool, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM "+s.table(schema.TableRun)+
		" WHERE hunt_id = {h:String} AND run_id = toUUID({run:String}) AND status = {status:String}",
		clickhouse.Named("h", r.HuntID), clickhouse.Named("run", r.RunID.String()), clickhouse.Named("status", r.Status.String())).Scan(&n)
	return n > 0, err
}

// Request queues a run-now request for huntID at fire (epoch seconds).
func (s *Store) Request(ctx context.Context, huntID string, fire int64, by string) error {
	if huntID == "" {
		return errors.New("watermark: request: empty hunt id")
	}
	q := `INSERT INTO ` + s.table(schema.TableRequest) + ` (hunt_id, requested_fire, request_id, requested_by, requested)
SELECT {h:String}, toDateTime({fire:Int64}, 'UTC'), generateUUIDv4(), {by:String}, now64(6)`
	err := s.conn.Exec(insertCtx(ctx, "request", huntID, fire, by), q,
		clickhouse.Named("h", huntID), clickhouse.Named("fire", fire), clickhouse.Named("by", by))
	if err != nil {
		return fmt.Errorf("watermark: request %s at %d: %w", huntID, fire, err)
	}
	return nil
}
