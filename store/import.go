package store

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Import writes an imported commit: the hunt's watermark becomes wm, unless the hunt already
// has a watermark at or past it when the row is written (a runner that committed since the
// import was planned keeps its progress). It reports whether the row landed, read back by
// run, which is deterministic per import so a retried insert is the same block.
func (s *Store) Import(ctx context.Context, huntID string, wm int64, run uuid.UUID, owner string) (bool, error) {
	q := `INSERT INTO ` + s.table(schema.TableWatermark) + ` (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start,
    run_rows, run_started, gap_start, gap_end, findings_dropped, kind)
SELECT {h:String}, toDateTime({wm:Int64}, 'UTC'), toUUID('00000000-0000-0000-0000-000000000000'), now64(6),
    toUUID({run:String}), {owner:String}, toDateTime({wm:Int64}, 'UTC'), 0, now64(6),
    toDateTime(0, 'UTC'), toDateTime(0, 'UTC'), 0, {kind:String}
WHERE (SELECT count() FROM ` + s.table(schema.TableWatermark) + ` WHERE hunt_id = {h:String} AND watermark >= toDateTime({wm:Int64}, 'UTC')) = 0`
	wctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"async_insert": 0, "insert_deduplication_token": "import:" + run.String()}))
	if err := s.conn.Exec(wctx, q, clickhouse.Named("h", huntID), clickhouse.Named("wm", wm),
		clickhouse.Named("run", run.String()), clickhouse.Named("owner", owner), clickhouse.Named("kind", hunt.KindImported.String())); err != nil {
		return false, fmt.Errorf("watermark: import %s: %w", huntID, err)
	}
	ok, err := s.Committed(ctx, huntID, run)
	if err != nil {
		return false, fmt.Errorf("watermark: import %s read-back: %w", huntID, err)
	}
	return ok, nil
}

// RaiseOverruns raises a hunt's overrun count and too_aggressive flag to at least the given
// values, keeping the rest of its newest state row; it writes only while they are lower, so
// repeating it writes nothing.
func (s *Store) RaiseOverruns(ctx context.Context, huntID string, overruns uint64, tooAggressive bool) error {
	q := `INSERT INTO ` + s.table(schema.TableState) + ` (hunt_id, status, consecutive_failures, last_error, last_fire, updated,
    retry_after, overrun_count, too_aggressive)
SELECT k.h, s.status, s.consecutive_failures, s.last_error, s.last_fire, now64(6), s.retry_after,
    greatest(s.overrun_count, {n:UInt64}), greatest(s.too_aggressive, {aggr:UInt8})
FROM (SELECT {h:String} AS h) AS k
LEFT JOIN (SELECT hunt_id, argMax(status, updated) AS status, argMax(consecutive_failures, updated) AS consecutive_failures,
        argMax(last_error, updated) AS last_error, argMax(last_fire, updated) AS last_fire,
        argMax(retry_after, updated) AS retry_after, argMax(overrun_count, updated) AS overrun_count,
        argMax(too_aggressive, updated) AS too_aggressive
    FROM ` + s.table(schema.TableState) + ` WHERE hunt_id = {h:String} GROUP BY hunt_id) AS s ON s.hunt_id = k.h
WHERE s.overrun_count < {n:UInt64} OR s.too_aggressive < {aggr:UInt8}`
	aggr := uint8(0)
	if tooAggressive {
		aggr = 1
	}
	wctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"async_insert": 0, "join_use_nulls": 0}))
	if err := s.conn.Exec(wctx, q, clickhouse.Named("h", huntID), clickhouse.Named("n", overruns), clickhouse.Named("aggr", aggr)); err != nil {
		return fmt.Errorf("watermark: raise overruns of %s: %w", huntID, err)
	}
	return nil
}
