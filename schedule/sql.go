package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Querier is the one method schedule needs to read ClickHouse; driver.Conn satisfies it.
type Querier interface {
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

// dueForm names a way to resolve "newest row per hunt" and combine the tables. Every form gives
// the same answer (the parity test compares each one per hunt with IsDue, and with the
// benchmark's argMax baseline, which lives in the tests); DueCountSQL uses formLive, the
// fastest in BenchmarkDueSQL, and DueListSQL formFinal, which also reports the lease.
type dueForm int

const (
	// formLive reads hunt_schedule with FINAL (ReplacingMergeTree keeps the newest by updated;
	// WHERE applies after the merge, so an old enabled row under a newer tombstone is never
	// seen) and hash joins it with the per-hunt greatest watermark. Leases and
	// backoff are never resolved for every hunt: a hunt is held only if its newest lease is
	// live, and a newest live lease is itself a live row, so the few hunts with any
	// lease_until > now are the only candidates; their newest row by (claimed, claim_id) is
	// resolved exactly. Backoff is found the same way from rows with retry_after > now, as a
	// NOT IN set. Pending requests are looked up in one scalar pair of arrays.
	formLive dueForm = iota
	// formFinal reads hunt_schedule and hunt_state with FINAL, resolves the lease table per
	// hunt by ORDER BY claimed DESC, claim_id DESC LIMIT 1 BY hunt_id (FINAL alone breaks
	// claimed ties by insertion order, not claim_id), then hash joins.
	formFinal
)

// noRequest is transform's miss value in formLive: below any watermark.
const noRequest = "toInt64(-9223372036854775808)"

// newestWatermarkSQL is the newest watermark of every hunt: hunt_watermark keeps one row per
// commit and a commit only ever raises the watermark, so the newest is the greatest. A plain
// max … GROUP BY hunt_id is the shape the table's aggregate projection `latest` answers, so the
// read costs one row per hunt and part, not one per commit.
func newestWatermarkSQL(db string) string {
	return `SELECT hunt_id, toUInt8(1) AS has_wm, toInt64(max(watermark)) AS wm FROM ` + db + `.` + schema.TableWatermark + ` GROUP BY hunt_id`
}

// dueCore returns a query yielding one row per due hunt with columns
// hunt_id String, fire Int64, has_wm UInt8, wm Int64, has_lease UInt8, lu_ms Int64,
// has_req UInt8, rf Int64 — the same predicate as IsDue. formLive does not read lease rows of
// due hunts and reports has_lease 0. nowExpr is a DateTime or an integer of epoch seconds,
// evaluated once per query.
//
// Tombstones (enabled=0, interval 0) are dropped in an inner subquery before any arithmetic, so
// interval 0 never reaches intDiv; the outer `i > 0` only guards against a hand-written enabled
// row with interval 0. LEFT JOIN fills misses with 0 (join_use_nulls off): the has_* columns
// tell "no row" from a zero value, so the SQL assumes nothing about now or the data.
//
// set narrows the schedule to one hunt set; "" counts every set. The filter applies to the
// merged newest row (FINAL), like enabled, so a hunt taken over by another set is counted in
// the set that holds it now.
func dueCore(form dueForm, database, nowExpr, set string) string {
	db := schema.QuoteIdent(database)
	now := "toInt64(" + nowExpr + ")"
	if form == formLive {
		return liveDue(db, now, set)
	}
	return joinedDue(db, now, finalParts(db, set))
}

// dueParts are how a form reads the newest rows: the live schedule (hunt_id, i, p), the newest
// lease (hunt_id, has_lease, lu_ms, lf: its fire) and the newest hunt_state row (hunt_id,
// has_st, ra_ms).
type dueParts struct{ sched, lease, state string }

// finalParts reads hunt_schedule and hunt_state with FINAL and the newest lease by LIMIT 1 BY.
func finalParts(db, set string) dueParts {
	inSet := ""
	if set != "" {
		inSet = " AND hunt_set = " + quoteSet(set)
	}
	return dueParts{
		sched: `SELECT hunt_id, interval_seconds AS i, phase_offset AS p FROM ` + db + `.` + schema.TableSchedule + ` FINAL WHERE enabled = 1 AND interval_seconds > 0` + inSet,
		lease: `SELECT hunt_id, toUInt8(1) AS has_lease, toUnixTimestamp64Milli(lease_until) AS lu_ms, toInt64(fire) AS lf FROM ` + db + `.` + schema.TableLease + ` ORDER BY hunt_id, claimed DESC, claim_id DESC LIMIT 1 BY hunt_id`,
		state: `SELECT hunt_id, toUInt8(1) AS has_st, toUnixTimestamp64Milli(retry_after) AS ra_ms FROM ` + db + `.` + schema.TableState + ` FINAL`,
	}
}

// fireSQL computes a hunt's latest fire (as `fire`) from its interval i and offset p at now.
func fireSQL(now string) string {
	return fmt.Sprintf(`toInt64(i) AS iv, intDiv(%[1]s, iv) * iv + toInt64(p) %% iv AS cur,
    if(%[1]s >= cur, cur, cur - iv) AS fire`, now)
}

// pausedSQL lists the hunts paused at now: the newest hunt_pause row (FINAL: the WHERE applies
// to the merged newest row) pauses the hunt until resumed (paused_until 0) or until a
// paused_until still ahead. Pauses are a row per hunt ever paused: a NOT IN set.
func pausedSQL(db, now string) string {
	return `SELECT hunt_id FROM ` + db + `.` + schema.TablePause + ` FINAL WHERE paused = 1 AND (toUnixTimestamp64Milli(paused_until) = 0 OR toUnixTimestamp64Milli(paused_until) > ` + now + ` * 1000)`
}

// joinedDue resolves every table per hunt with p and joins them all.
func joinedDue(db, now string, p dueParts) string {
	t := func(name string) string { return db + "." + name }
	wm := newestWatermarkSQL(db)
	req := fmt.Sprintf(`SELECT hunt_id, toUInt8(1) AS has_req, toInt64(max(requested_fire)) AS rf FROM %s GROUP BY hunt_id`, t(schema.TableRequest))
	// A request is owed once its fire has come: no runner claims a fire beyond now.
	owed := fmt.Sprintf(`(has_wm = 0 OR wm < fire OR (has_req = 1 AND rf > wm AND rf <= %s))`, now)
	return fmt.Sprintf(`SELECT hunt_id, fire, has_wm, wm, has_lease, lu_ms, has_req, rf FROM (
  SELECT hunt_id, has_wm, wm, has_lease, lu_ms, lf, has_req, rf, has_st, ra_ms, %[5]s
  FROM (%[1]s) AS s
  LEFT JOIN (%[2]s) AS w USING (hunt_id)
  LEFT JOIN (%[3]s) AS l USING (hunt_id)
  LEFT JOIN (%[4]s) AS r USING (hunt_id)
  LEFT JOIN (%[8]s) AS st USING (hunt_id)
  WHERE i > 0
)
WHERE (has_lease = 0 OR lu_ms <= %[6]s * 1000 OR (has_wm = 1 AND lf <= wm))
  AND (has_st = 0 OR ra_ms <= %[6]s * 1000)
  AND %[7]s
  AND hunt_id NOT IN (%[9]s)`, p.sched, wm, p.lease, req, fireSQL(now), now, owed, p.state, pausedSQL(db, now))
}

// liveDue is formLive.
func liveDue(db, now, set string) string {
	t := func(name string) string { return db + "." + name }
	sched := finalParts(db, set).sched
	wm := newestWatermarkSQL(db)
	fire := fireSQL(now)
	// held: the hunt's newest lease is live, unless it is spent (its fire lf committed). Only
	// hunts with any live row can be held, and a newest live lease is itself such a row, so
	// the candidates are those few hunts; their newest row by (claimed, claim_id) is then
	// resolved exactly, and joined.
	held := fmt.Sprintf(`SELECT hunt_id, toUInt8(1) AS held, toInt64(argMax(fire, (claimed, claim_id))) AS lf FROM %[1]s
      WHERE hunt_id IN (SELECT hunt_id FROM %[1]s WHERE toUnixTimestamp64Milli(lease_until) > %[2]s * 1000)
      GROUP BY hunt_id
      HAVING toUnixTimestamp64Milli(argMax(lease_until, (claimed, claim_id))) > %[2]s * 1000`, t(schema.TableLease), now)
	// backoff: the hunt's newest hunt_state row has retry_after > now. Found like held: only
	// hunts with such a row are candidates, then resolved by updated. hunt_state holds at
	// most a row per hunt that ever changed health; as a NOT IN set this pass cost less
	// than as one more join (measured, see docs/schedule.md).
	backoff := fmt.Sprintf(`SELECT hunt_id FROM %[1]s
      WHERE hunt_id IN (SELECT hunt_id FROM %[1]s WHERE toUnixTimestamp64Milli(retry_after) > %[2]s * 1000)
      GROUP BY hunt_id
      HAVING toUnixTimestamp64Milli(argMax(retry_after, updated)) > %[2]s * 1000`, t(schema.TableState), now)
	// Pending requests are a few hundred rows: one scalar pair of arrays, looked up with
	// transform, costs less than a join stream. The miss value is below every watermark
	// (toInt64 of a DateTime is >= 0), so a hunt without a request is never owed by it.
	reqs := fmt.Sprintf(`(SELECT groupArray(hunt_id), groupArray(rf) FROM (SELECT hunt_id, toInt64(max(requested_fire)) AS rf FROM %s GROUP BY hunt_id))`, t(schema.TableRequest))
	return fmt.Sprintf(`WITH %[3]s AS reqs
SELECT hunt_id, fire, has_wm, wm, toUInt8(0) AS has_lease, toInt64(0) AS lu_ms, toUInt8(rf0 != %[6]s) AS has_req, if(has_req = 1, rf0, 0) AS rf FROM (
  SELECT hunt_id, has_wm, wm, held, lf, %[4]s, transform(hunt_id, reqs.1, reqs.2, %[6]s) AS rf0
  FROM (%[1]s) AS s
  LEFT JOIN (%[2]s) AS w USING (hunt_id)
  LEFT JOIN (%[5]s) AS l USING (hunt_id)
  WHERE i > 0
)
WHERE (held = 0 OR (has_wm = 1 AND lf <= wm)) AND (has_wm = 0 OR wm < fire OR (rf0 > wm AND rf0 <= %[7]s))
  AND hunt_id NOT IN (%[8]s)
  AND hunt_id NOT IN (%[9]s)`, sched, wm, reqs, fire, held, noRequest, now, backoff, pausedSQL(db, now))
}

// dueSettings is the SETTINGS clause a form needs on the outermost query. The FINAL forms pin
// optimize_move_to_prewhere_if_final = 0 (the server default) so that `enabled = 1` is always
// evaluated on the merged newest row: as a PREWHERE it could see an old enabled row under a
// newer tombstone, on a server whose profile turned that optimisation on. (chDB 26.5 was seen to
// keep `enabled = 1` out of PREWHERE under FINAL even with it on; the pin is for servers that
// do not.) join_use_nulls = 0 (the default) is pinned too: the has_*/held flags rely on LEFT
// JOIN filling a miss with 0, and a NULL there would drop the row from the WHERE.
//
// formLive hash joins: the watermark stream is an aggregation (the projection's), not a FINAL
// read in key order, so a sort-merge join would have to sort it first; hash was about 10%
// faster (paired medians 0.86–0.93 on 2 loaded cores, see docs/schedule.md). It also keeps
// split_intersecting_parts_ranges_into_layers_final off (measured ≈ 9% faster when two FINAL
// reads ran side by side; on the current shape on and off were within noise, 1.02–1.03). It
// changes how FINAL is executed, never its result.
func dueSettings(form dueForm) string {
	switch form {
	case formLive:
		return "\nSETTINGS join_algorithm = 'hash', join_use_nulls = 0, optimize_move_to_prewhere_if_final = 0, split_intersecting_parts_ranges_into_layers_final = 0"
	case formFinal:
		return "\nSETTINGS join_use_nulls = 0, optimize_move_to_prewhere_if_final = 0"
	}
	return ""
}

// DueCountSQL is the due backlog query: one row, one column `due` UInt64, the number of hunts
// due at nowExpr (`now()` in production; a literal such as `toDateTime(1789027260)` in tests).
// It is the SQL form of IsDue. database is quoted here; nowExpr is trusted SQL. The query has
// no bound parameters so that it can also be stored as a view (hunt_backlog_v1) or pasted into
// a scaler.
//
// It counts the hunts of every hunt set: KEDA scales the one runner deployment of a database
// on it. DueCountSetSQL narrows it to one set.
func DueCountSQL(database, nowExpr string) string {
	return DueCountSetSQL(database, nowExpr, "")
}

// DueCountSetSQL is DueCountSQL over hunt set set only ("" for every set). set must pass
// ValidateHuntSet.
func DueCountSetSQL(database, nowExpr, set string) string {
	return "SELECT toUInt64(count()) AS due FROM (\n" + dueCore(formLive, database, nowExpr, set) + "\n)" + dueSettings(formLive)
}

// ErrNoResult means a query that always yields one row (a count, now64()) returned none.
var ErrNoResult = errors.New("query returned no row")

// CountDue runs DueCountSQL with the server's clock. A failed query is an error, never 0.
func CountDue(ctx context.Context, q Querier, database string) (uint64, error) {
	return countDue(ctx, q, DueCountSQL(database, "now()"))
}

// CountDueSet is CountDue over hunt set set only ("" for every set).
func CountDueSet(ctx context.Context, q Querier, database, set string) (uint64, error) {
	if set != "" {
		if err := ValidateHuntSet(set); err != nil {
			return 0, err
		}
	}
	return countDue(ctx, q, DueCountSetSQL(database, "now()", set))
}

func countDue(ctx context.Context, q Querier, query string) (uint64, error) {
	var n uint64
	if err := queryOne(ctx, q, query, &n); err != nil {
		return 0, fmt.Errorf("count due hunts: %w", err)
	}
	return n, nil
}

// DueHunt is one due hunt as `hunt-runner due --explain` shows it.
type DueHunt struct {
	HuntID string `json:"hunt_id"`
	// Fire is the latest fire at the query's now.
	Fire time.Time `json:"fire"`
	// Watermark is the newest watermark; nil if the hunt never ran.
	Watermark *time.Time `json:"watermark"`
	// LeaseUntil is the end of the newest lease (expired, or live but spent); nil if the hunt
	// was never claimed.
	LeaseUntil *time.Time `json:"lease_until"`
	// RequestedFire is set when a run-now request is pending.
	RequestedFire *time.Time `json:"requested_fire,omitempty"`
}

// DueHunts lists up to limit due hunts (all if limit <= 0), most overdue first (then by id),
// at the server's clock. It uses the same predicate as CountDue.
func DueHunts(ctx context.Context, q Querier, database string, limit int) ([]DueHunt, error) {
	return DueHuntsSet(ctx, q, database, "", limit)
}

// DueHuntsSet is DueHunts over hunt set set only ("" for every set).
func DueHuntsSet(ctx context.Context, q Querier, database, set string, limit int) ([]DueHunt, error) {
	if set != "" {
		if err := ValidateHuntSet(set); err != nil {
			return nil, err
		}
	}
	return dueHunts(ctx, q, dueListSQL(database, "now()", set, limit))
}

// DueListSQL is the query behind DueHunts.
func DueListSQL(database, nowExpr string, limit int) string {
	return dueListSQL(database, nowExpr, "", limit)
}

func dueListSQL(database, nowExpr, set string, limit int) string {
	s := dueCore(formFinal, database, nowExpr, set) + "\nORDER BY fire, hunt_id"
	if limit > 0 {
		s += fmt.Sprintf("\nLIMIT %d", limit)
	}
	return s + dueSettings(formFinal)
}

func dueHunts(ctx context.Context, q Querier, query string) ([]DueHunt, error) {
	rows, err := q.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("list due hunts: %w", err)
	}
	defer rows.Close()
	var out []DueHunt
	for rows.Next() {
		var (
			h                       DueHunt
			hasWM, hasLease, hasReq uint8
			wm, luMs, rf            int64
		)
		var fire int64
		if err := rows.Scan(&h.HuntID, &fire, &hasWM, &wm, &hasLease, &luMs, &hasReq, &rf); err != nil {
			return nil, fmt.Errorf("list due hunts: %w", err)
		}
		st := State{Watermark: wm, HasWatermark: hasWM == 1, LeaseUntilMs: luMs, HasLease: hasLease == 1, RequestedFire: rf, HasRequest: hasReq == 1}
		h.Fire = time.Unix(fire, 0).UTC()
		if st.HasWatermark {
			t := time.Unix(wm, 0).UTC()
			h.Watermark = &t
		}
		if st.HasLease {
			t := time.UnixMilli(luMs).UTC()
			h.LeaseUntil = &t
		}
		if st.RequestPending() {
			t := time.Unix(rf, 0).UTC()
			h.RequestedFire = &t
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list due hunts: %w", err)
	}
	return out, nil
}
