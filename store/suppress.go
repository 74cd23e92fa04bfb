package store

import (
	"context"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// SuppressedKeys returns which of keys an earlier fire of the hunt notified within
// [fire − window, fire) (hunt_suppress). The fire's own rows never count, so every sink and
// every retry of the fire computes the same set.
func (s *Store) SuppressedKeys(ctx context.Context, huntID string, fire int64, window time.Duration, keys []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := s.conn.Query(ctx, `SELECT DISTINCT suppress_key FROM `+s.table(schema.TableSuppress)+`
WHERE hunt_id = {h:String} AND suppress_key IN {keys:Array(String)}
  AND fire >= toDateTime({from:Int64}, 'UTC') AND fire < toDateTime({f:Int64}, 'UTC')`,
		clickhouse.Named("h", huntID), clickhouse.Named("keys", keys),
		clickhouse.Named("from", fire-int64(window/time.Second)), clickhouse.Named("f", fire))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out[k] = true
	}
	return out, rows.Err()
}

// RecordSuppress notes keys as notified by the hunt's fire. Rows are keyed by (hunt, key,
// fire), so writing them again (a retry, a second planner) changes nothing.
func (s *Store) RecordSuppress(ctx context.Context, huntID string, fire int64, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return s.conn.Exec(insertCtx(ctx, "suppress", huntID, fire, keys), `INSERT INTO `+s.table(schema.TableSuppress)+` (hunt_id, suppress_key, fire, recorded)
SELECT {h:String}, arrayJoin({keys:Array(String)}), toDateTime({f:Int64}, 'UTC'), now64(6)`,
		clickhouse.Named("h", huntID), clickhouse.Named("keys", keys), clickhouse.Named("f", fire))
}
