package store

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// ForeignPublishers reads which of ids another hunt set than set publishes live (its newest
// hunt_schedule row is enabled with an interval, as schedule.Row.Live says), and that set, by
// id. It reads the rows of ids only. A hunt id belongs to the set whose publication of it is
// live; an id no set publishes, or that its set retired, is in no one's way.
func (s *Store) ForeignPublishers(ctx context.Context, set string, ids []string) (map[string]string, error) {
	// TODO(#24): fold with the one newest hunt_schedule form once it exists in store.
	q := "SELECT hunt_id, hunt_set FROM (SELECT hunt_id, argMax(hunt_set, updated) AS hunt_set, " +
		"argMax(enabled = 1 AND interval_seconds > 0, updated) AS live FROM " + schema.QuoteIdent(s.database) + "." + schema.TableSchedule +
		" WHERE hunt_id IN {ids:Array(String)} GROUP BY hunt_id) WHERE live AND hunt_set != {set:String}"
	return scanByHunt[string](s.conn.Query(ctx, q, clickhouse.Named("ids", ids), clickhouse.Named("set", set)))
}
