package store

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// CheckedBatchDefault is how many hunt hashes one RecordChecked statement carries: the
// parameters travel in the request's URL over HTTP, which servers bound (1 MiB by default).
const CheckedBatchDefault = 1000

// CheckedHunts is the set of hunt revisions (Hunt.Hash) recorded in hunt_check as accepted by
// the server's containment check under scope (configsrc.CheckScope). It implements
// configsrc.CheckCache with RecordChecked.
func (s *Store) CheckedHunts(ctx context.Context, scope string) (map[string]bool, error) {
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT hunt_hash FROM "+s.table(schema.TableCheck)+" WHERE scope = {scope:String}",
		clickhouse.Named("scope", scope))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", schema.TableCheck, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return nil, fmt.Errorf("read %s: %w", schema.TableCheck, err)
		}
		out[h] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", schema.TableCheck, err)
	}
	return out, nil
}

// RecordChecked records hashes as accepted under scope, CheckedBatchDefault to a statement.
// A retried statement is the same block (its token is its content), and a row written twice
// is the same fact, so any retry is harmless.
func (s *Store) RecordChecked(ctx context.Context, scope string, hashes []string) error {
	q := "INSERT INTO " + s.table(schema.TableCheck) + " (scope, hunt_hash, checked) SELECT {scope:String}, arrayJoin({h:Array(String)}), now64(3)"
	for start := 0; start < len(hashes); start += CheckedBatchDefault {
		chunk := hashes[start:min(start+CheckedBatchDefault, len(hashes))]
		if err := s.conn.Exec(insertCtx(ctx, "check", scope, chunk), q, clickhouse.Named("scope", scope), clickhouse.Named("h", chunk)); err != nil {
			return fmt.Errorf("record %s: %w", schema.TableCheck, err)
		}
	}
	return nil
}
