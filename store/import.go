package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// ImportBatchDefault is how many hunts one import statement carries (Import, RaiseOverruns,
// ImportProgress): enough that 100,000 hunts migrate in a few dozen statements, few enough
// that the parameters, which travel in the request's URL over HTTP, stay under the server's
// bound (http_max_uri_size, 1 MiB by default) even at the longest ids: 4,000 × (a 128-byte id,
// a run id and a watermark, URL-escaped) is about 800 KB.
const ImportBatchDefault = 4000

// ImportRow is one imported commit: the hunt's watermark becomes Watermark, recorded under Run,
// which is deterministic per import so that a retried statement is the same block.
type ImportRow struct {
	HuntID    string
	Watermark int64
	Run       uuid.UUID
}

// Import writes imported commits, ImportBatchDefault to a statement: each hunt's watermark
// becomes its row's, unless the hunt already has a watermark at or past it when the statement
// runs (a runner that committed since the import was planned keeps its progress). It returns
// the hunts whose row landed, read back by run id, so an ambiguous answer (landed but errored)
// is settled by the read and a retry of the whole import writes nothing twice.
func (s *Store) Import(ctx context.Context, rows []ImportRow, owner string) (landed map[string]bool, err error) {
	// The guard compares with the greatest watermark rather than the newest: the same answer,
	// since commits only raise it, without a newest form. join_use_nulls = 0 (writeCtx) makes
	// a hunt without commits join m = 0, below every importable watermark (the plan refuses 0
	// and less).
	q := `INSERT INTO ` + s.table(schema.TableWatermark) + ` (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start,
    run_rows, run_started, gap_start, gap_end, findings_dropped, kind)
SELECT k.h, toDateTime(k.w, 'UTC'), toUUID('00000000-0000-0000-0000-000000000000'), now64(6),
    toUUID(k.run), {owner:String}, toDateTime(k.w, 'UTC'), 0, now64(6),
    toDateTime(0, 'UTC'), toDateTime(0, 'UTC'), 0, {kind:String}
FROM (SELECT r.1 AS h, r.2 AS w, r.3 AS run FROM (SELECT arrayJoin(arrayZip({h:Array(String)}, {w:Array(Int64)}, {run:Array(String)})) AS r)) AS k
LEFT JOIN (SELECT hunt_id, toInt64(max(watermark)) AS m FROM ` + s.table(schema.TableWatermark) + `
    WHERE hunt_id IN {h:Array(String)} GROUP BY hunt_id) AS c ON c.hunt_id = k.h
WHERE c.m < k.w`
	landed = make(map[string]bool, len(rows))
	for start := 0; start < len(rows); start += ImportBatchDefault {
		chunk := rows[start:min(start+ImportBatchDefault, len(rows))]
		ids, wms, runs := make([]string, len(chunk)), make([]int64, len(chunk)), make([]string, len(chunk))
		for i, r := range chunk {
			ids[i], wms[i], runs[i] = r.HuntID, r.Watermark, r.Run.String()
		}
		args := []any{clickhouse.Named("h", ids), clickhouse.Named("w", wms), clickhouse.Named("run", runs)}
		if err := s.conn.Exec(insertCtx(ctx, "import", runs), q, append(args, clickhouse.Named("owner", owner),
			clickhouse.Named("kind", hunt.KindImported.String()))...); err != nil {
			return landed, fmt.Errorf("watermark: import %d hunts from %s: %w", len(chunk), chunk[0].HuntID, err)
		}
		back, err := s.conn.Query(ctx, "SELECT DISTINCT hunt_id FROM "+s.table(schema.TableWatermark)+
			" WHERE hunt_id IN {h:Array(String)} AND run_id IN (SELECT toUUID(arrayJoin({run:Array(String)})))", args[0], args[2])
		if err := scanStrings(back, err, func(id string) { landed[id] = true }); err != nil {
			return landed, fmt.Errorf("watermark: import read-back from %s: %w", chunk[0].HuntID, err)
		}
	}
	return landed, nil
}

// Overruns is a hunt's overrun count and too_aggressive flag as an import carries them over.
type Overruns struct {
	HuntID        string
	Count         uint64
	TooAggressive bool
}

// RaiseOverruns raises each hunt's overrun count and too_aggressive flag to at least the given
// values, keeping the rest of its newest state row, ImportBatchDefault hunts to a statement; it
// writes a hunt only while they are lower, so repeating it writes nothing.
func (s *Store) RaiseOverruns(ctx context.Context, raises []Overruns) error {
	q := `INSERT INTO ` + s.table(schema.TableState) + ` (hunt_id, status, consecutive_failures, last_error, last_fire, updated,
    retry_after, overrun_count, too_aggressive)
SELECT k.h, s.status, s.consecutive_failures, s.last_error, s.last_fire, now64(6), s.retry_after,
    greatest(s.overrun_count, k.n), greatest(s.too_aggressive, k.a)
FROM (SELECT r.1 AS h, r.2 AS n, r.3 AS a FROM (SELECT arrayJoin(arrayZip({h:Array(String)}, {n:Array(UInt64)}, {a:Array(UInt8)})) AS r)) AS k
LEFT JOIN (SELECT hunt_id, argMax(status, updated) AS status, argMax(consecutive_failures, updated) AS consecutive_failures,
        argMax(last_error, updated) AS last_error, argMax(last_fire, updated) AS last_fire,
        argMax(retry_after, updated) AS retry_after, argMax(overrun_count, updated) AS overrun_count,
        argMax(too_aggressive, updated) AS too_aggressive
    FROM ` + s.table(schema.TableState) + ` WHERE hunt_id IN {h:Array(String)} GROUP BY hunt_id) AS s ON s.hunt_id = k.h
WHERE s.overrun_count < k.n OR s.too_aggressive < k.a`
	// TODO(#24): fold the LEFT JOIN's newest state with newestStateSQL (newest.go).
	for start := 0; start < len(raises); start += ImportBatchDefault {
		chunk := raises[start:min(start+ImportBatchDefault, len(raises))]
		ids, ns, aggr := make([]string, len(chunk)), make([]uint64, len(chunk)), make([]uint32, len(chunk)) // not []uint8, which binds as bytes
		for i, r := range chunk {
			ids[i], ns[i] = r.HuntID, r.Count
			if r.TooAggressive {
				aggr[i] = 1
			}
		}
		if err := s.conn.Exec(writeCtx(ctx, ""), q, clickhouse.Named("h", ids), clickhouse.Named("n", ns), clickhouse.Named("a", aggr)); err != nil {
			return fmt.Errorf("watermark: raise overruns of %d hunts from %s: %w", len(chunk), chunk[0].HuntID, err)
		}
	}
	return nil
}

// scanStrings reads a one-column result of strings.
func scanStrings(rows driver.Rows, err error, each func(string)) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return err
		}
		each(v)
	}
	return rows.Err()
}

// scanByHunt reads a two-column result, a key (a hunt id) and its value, into a map.
func scanByHunt[V any](rows driver.Rows, err error) (map[string]V, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]V{}
	for rows.Next() {
		var id string
		var v V
		if err := rows.Scan(&id, &v); err != nil {
			return nil, err
		}
		out[id] = v
	}
	return out, rows.Err()
}

// The reads of `import-legacy` (package legacy plans from them): which tables there are, the
// earlier runner's progress in its own database, and the progress hunt-runner has. The earlier
// runner's tables are named as ours (hunt_watermark, hunt_state) in another database.

// ErrImportSchema means a database lacks what an import reads or writes.
var ErrImportSchema = errors.New("schema")

// CheckImportSchema checks that hunt-runner's schema can record an import (hunt_watermark,
// hunt_state, and a hunt_runs view that knows imported rows) and that the earlier runner's
// hunt_watermark is in database from; it reports whether the earlier hunt_state is there too.
// A missing piece is ErrImportSchema, with what to do about it.
func (s *Store) CheckImportSchema(ctx context.Context, from string) (hasState bool, err error) {
	rows, err := s.conn.Query(ctx, `SELECT database, name, create_table_query FROM system.tables
WHERE (database = {new:String} AND name IN ('`+schema.TableWatermark+`', '`+schema.TableState+`', '`+schema.ViewRuns+`'))
   OR (database = {old:String} AND name IN ('`+schema.TableWatermark+`', '`+schema.TableState+`'))`,
		clickhouse.Named("new", s.database), clickhouse.Named("old", from))
	if err != nil {
		return false, fmt.Errorf("read system.tables: %w", err)
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var db, name, create string
		if err := rows.Scan(&db, &name, &create); err != nil {
			return false, fmt.Errorf("read system.tables: %w", err)
		}
		have[db+"."+name] = create
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read system.tables: %w", err)
	}
	if _, ok := have[from+"."+schema.TableWatermark]; !ok {
		return false, fmt.Errorf("%w: database %q has no hunt_watermark table; --from-database names the earlier runner's database (DFE_CLICKHOUSE_DATA_DATABASE, default dfe)", ErrImportSchema, from)
	}
	for _, t := range []string{schema.TableWatermark, schema.TableState, schema.ViewRuns} {
		if _, ok := have[s.database+"."+t]; !ok {
			return false, fmt.Errorf("%w: hunt-runner's database %q has no %s; run `hunt-runner schema` first", ErrImportSchema, s.database, t)
		}
	}
	// An older hunt_runs would show imported rows as succeeded runs; views hold no data, so
	// recreating it loses nothing.
	if !strings.Contains(have[s.database+"."+schema.ViewRuns], "'"+hunt.KindImported.String()+"'") {
		return false, fmt.Errorf("%w: the hunt_runs view in %q predates imports (it would list them as succeeded runs); recreate it: DROP VIEW %s.hunt_runs, then `hunt-runner schema`",
			ErrImportSchema, s.database, schema.QuoteIdent(s.database))
	}
	_, hasState = have[from+"."+schema.TableState]
	return hasState, nil
}

// ServerClock reads the server's clock, to the second.
func (s *Store) ServerClock(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.conn.QueryRow(ctx, "SELECT now()").Scan(&now)
	return now, err
}

// LegacyState is the earlier runner's newest hunt_state of one hunt.
type LegacyState struct {
	OverrunCount  uint64
	TooAggressive bool
}

// LegacyWatermarks reads the earlier runner's newest watermark per hunt from database from:
// its tables are ReplacingMergeTree(updated), read by the newest updated, as it read them.
func (s *Store) LegacyWatermarks(ctx context.Context, from string) (map[string]int64, error) {
	db := schema.QuoteIdent(from)
	out, err := scanByHunt[int64](s.conn.Query(ctx, "SELECT hunt_id, toInt64(argMax(watermark, updated)) FROM "+db+"."+schema.TableWatermark+" GROUP BY hunt_id"))
	if err != nil {
		return nil, fmt.Errorf("read %s.%s: %w", db, schema.TableWatermark, err)
	}
	return out, nil
}

// LegacyStates reads the earlier runner's newest hunt_state per hunt from database from.
func (s *Store) LegacyStates(ctx context.Context, from string) (map[string]LegacyState, error) {
	db := schema.QuoteIdent(from)
	rows, err := s.conn.Query(ctx, "SELECT hunt_id, toInt64(argMax(overrun_count, updated)), toUInt8(argMax(too_aggressive, updated) != 0) FROM "+
		db+"."+schema.TableState+" GROUP BY hunt_id")
	if err != nil {
		return nil, fmt.Errorf("read %s.%s: %w", db, schema.TableState, err)
	}
	defer rows.Close()
	out := map[string]LegacyState{}
	for rows.Next() {
		var id string
		var n int64
		var aggr uint8
		if err := rows.Scan(&id, &n, &aggr); err != nil {
			return nil, fmt.Errorf("read %s.%s: %w", db, schema.TableState, err)
		}
		out[id] = LegacyState{OverrunCount: uint64(max(n, 0)), TooAggressive: aggr != 0}
	}
	return out, rows.Err()
}

// ImportProgress is what hunt-runner holds of one hunt when an import is planned.
type ImportProgress struct {
	HasWatermark bool
	Watermark    int64   // the newest (greatest) watermark
	Imported     []int64 // the watermarks of earlier imports' rows

	// The newest lease, when it is live (lease_until past the server's now64(3)); whether it
	// is spent (its fire committed) is the caller's to judge against Watermark.
	HasLiveLease bool
	LeaseOwner   string
	LeaseFire    int64
	LeaseUntilMs int64

	HasState      bool
	OverrunCount  uint64
	TooAggressive bool
}

// ImportProgress reads, for each hunt of ids, its watermarks, its newest lease if live, and its
// newest state's overrun count and too_aggressive flag: three reads of the rows of ids only.
// The ids are read ImportBatchDefault at a time.
func (s *Store) ImportProgress(ctx context.Context, ids []string) (map[string]ImportProgress, error) {
	out := make(map[string]ImportProgress, len(ids))
	for start := 0; start < len(ids); start += ImportBatchDefault {
		if err := s.importProgress(ctx, ids[start:min(start+ImportBatchDefault, len(ids))], out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) importProgress(ctx context.Context, ids []string, out map[string]ImportProgress) error {
	db := schema.QuoteIdent(s.database)
	// TODO(#24): fold with newestWatermarkSQL (newest.go); the imported rows' watermarks are
	// read in the same pass.
	rows, err := s.conn.Query(ctx, "SELECT hunt_id, toInt64(max(watermark)), groupArrayIf(toInt64(watermark), kind = {kind:String}) FROM "+
		db+"."+schema.TableWatermark+" WHERE hunt_id IN {ids:Array(String)} GROUP BY hunt_id",
		clickhouse.Named("kind", hunt.KindImported.String()), clickhouse.Named("ids", ids))
	if err != nil {
		return fmt.Errorf("read %s.%s: %w", db, schema.TableWatermark, err)
	}
	for rows.Next() {
		var id string
		var p ImportProgress
		if err := rows.Scan(&id, &p.Watermark, &p.Imported); err != nil {
			rows.Close()
			return fmt.Errorf("read %s.%s: %w", db, schema.TableWatermark, err)
		}
		p.HasWatermark = true
		out[id] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s.%s: %w", db, schema.TableWatermark, err)
	}
	rows, err = s.conn.Query(ctx, "SELECT hunt_id, owner, toInt64(fire), toUnixTimestamp64Milli(until) FROM ("+
		NewestLeaseSQL(s.database, "ids")+") WHERE until > now64(3)", clickhouse.Named("ids", ids))
	if err != nil {
		return fmt.Errorf("read %s.%s: %w", db, schema.TableLease, err)
	}
	for rows.Next() {
		var id string
		var l ImportProgress
		if err := rows.Scan(&id, &l.LeaseOwner, &l.LeaseFire, &l.LeaseUntilMs); err != nil {
			rows.Close()
			return fmt.Errorf("read %s.%s: %w", db, schema.TableLease, err)
		}
		p := out[id]
		p.HasLiveLease, p.LeaseOwner, p.LeaseFire, p.LeaseUntilMs = true, l.LeaseOwner, l.LeaseFire, l.LeaseUntilMs
		out[id] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s.%s: %w", db, schema.TableLease, err)
	}
	// TODO(#24): fold with newestStateSQL (newest.go).
	rows, err = s.conn.Query(ctx, "SELECT hunt_id, toUInt64(argMax(overrun_count, updated)), argMax(too_aggressive, updated) != 0 FROM "+
		db+"."+schema.TableState+" WHERE hunt_id IN {ids:Array(String)} GROUP BY hunt_id", clickhouse.Named("ids", ids))
	if err != nil {
		return fmt.Errorf("read %s.%s: %w", db, schema.TableState, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n uint64
		var aggr bool
		if err := rows.Scan(&id, &n, &aggr); err != nil {
			return fmt.Errorf("read %s.%s: %w", db, schema.TableState, err)
		}
		p := out[id]
		p.HasState, p.OverrunCount, p.TooAggressive = true, n, aggr
		out[id] = p
	}
	return rows.Err()
}
