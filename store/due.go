package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// The due backlog in SQL: the same predicate as schedule.IsDue (schedule's package doc states
// it), so that `hunt-runner due`, the KEDA shim and the backlog view can count it with no
// runner alive. The parity test (due_parity_test.go) compares every form with IsDue per hunt on
// the engine; BenchmarkDueSQL times them.

// dueForm names a way to resolve "newest row per hunt" and combine the tables. Every form gives
// the same answer (the parity test compares each one per hunt with IsDue, and with the
// benchmark's argMax baseline, which lives in the tests); DueCountSQL uses formLive, the
// fastest in BenchmarkDueSQL, and DueListSQL formNewest, which also reports the lease.
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
	// formNewest reads hunt_schedule with FINAL and every other table through its one newest
	// form (newest.go), resolved for every hunt, then hash joins.
	formNewest
)

// noRequest is transform's miss value in formLive: below any watermark.
const noRequest = "toInt64(-9223372036854775808)"

// dueWatermarkSQL is newestWatermarkSQL with the flag that tells a watermark from no row: the
// greatest watermark is the newest, and a plain max … GROUP BY is the shape the table's
// aggregate projection `latest` answers, so the read costs one row per hunt and part.
func dueWatermarkSQL(database string) string {
	return `SELECT hunt_id, toUInt8(1) AS has_wm, toInt64(watermark) AS wm FROM (` + newestWatermarkSQL(database, "") + `)`
}

// dueCore returns a query yielding one row per due hunt with columns
// hunt_id String, fire Int64, has_wm UInt8, wm Int64, has_lease UInt8, lu_ms Int64,
// has_req UInt8, rf Int64 — the same predicate as schedule.IsDue. formLive does not read lease
// rows of due hunts and reports has_lease 0. nowExpr is a DateTime or an integer of epoch
// seconds, evaluated once per query.
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
	now := "toInt64(" + nowExpr + ")"
	if form == formLive {
		return liveDue(database, now, set)
	}
	return joinedDue(database, now, newestParts(database, set))
}

// dueParts are how a form reads the newest rows: the live schedule (hunt_id, i, p), the newest
// lease (hunt_id, has_lease, lu_ms, lf: its fire) and the newest hunt_state row (hunt_id,
// has_st, ra_ms).
type dueParts struct{ sched, lease, state string }

// liveScheduleSQL is the live schedule of set ("" for all): hunt_schedule's newest row per
// hunt by FINAL, enabled with an interval. It stays FINAL rather than an argMax form: it is
// the one table every form reads in full, FINAL is what BenchmarkDueSQL measured against the
// argMax baseline (the earlier runner's shape, its sched part), and the WHERE applies to the
// merged row (see dueSettings), so a tombstone hides every older enabled row.
func liveScheduleSQL(database, set string) string {
	inSet := ""
	if set != "" {
		inSet = " AND hunt_set = " + quoteSet(set)
	}
	return `SELECT hunt_id, interval_seconds AS i, phase_offset AS p FROM ` + qualified(database, schema.TableSchedule) + ` FINAL WHERE enabled = 1 AND interval_seconds > 0` + inSet
}

// newestParts reads the lease and hunt_state through their newest forms.
func newestParts(database, set string) dueParts {
	return dueParts{
		sched: liveScheduleSQL(database, set),
		lease: `SELECT hunt_id, toUInt8(1) AS has_lease, toUnixTimestamp64Milli(until) AS lu_ms, toInt64(fire) AS lf FROM (` + NewestLeaseSQL(database, "") + `)`,
		state: `SELECT hunt_id, toUInt8(1) AS has_st, toUnixTimestamp64Milli(retry_after) AS ra_ms FROM (` + newestStateSQL(database, "") + `)`,
	}
}

// fireSQL computes a hunt's latest fire (as `fire`) from its interval i and offset p at now.
func fireSQL(now string) string {
	return fmt.Sprintf(`toInt64(i) AS iv, intDiv(%[1]s, iv) * iv + toInt64(p) %% iv AS cur,
    if(%[1]s >= cur, cur, cur - iv) AS fire`, now)
}

// duePausedSQL is pausedSQL at now, an integer of epoch seconds.
func duePausedSQL(database, now string) string {
	return pausedSQL(database, "toDateTime("+now+", 'UTC')")
}

// joinedDue resolves every table per hunt with p and joins them all.
func joinedDue(database, now string, p dueParts) string {
	req := fmt.Sprintf(`SELECT hunt_id, toUInt8(1) AS has_req, toInt64(max(requested_fire)) AS rf FROM %s GROUP BY hunt_id`, qualified(database, schema.TableRequest))
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
  AND hunt_id NOT IN (%[9]s)`, p.sched, dueWatermarkSQL(database), p.lease, req, fireSQL(now), now, owed, p.state, duePausedSQL(database, now))
}

// liveDue is formLive. Its lease and backoff reads are deliberately not the newest forms of
// newest.go: those resolve the newest row of every hunt, which is the cost this form exists to
// avoid on the count that KEDA polls. They first narrow to the hunts with a row still ahead of
// now (a newest live row is such a row, so no held hunt is missed) and resolve the newest row
// of those few only, by the same order as the newest forms ((claimed, claim_id) for leases,
// updated for hunt_state); the parity test holds them to formNewest's answer.
func liveDue(database, now, set string) string {
	fire := fireSQL(now)
	// held: the hunt's newest lease is live, unless it is spent (its fire lf committed).
	held := fmt.Sprintf(`SELECT hunt_id, toUInt8(1) AS held, toInt64(argMax(fire, (claimed, claim_id))) AS lf FROM %[1]s
      WHERE hunt_id IN (SELECT hunt_id FROM %[1]s WHERE toUnixTimestamp64Milli(lease_until) > %[2]s * 1000)
      GROUP BY hunt_id
      HAVING toUnixTimestamp64Milli(argMax(lease_until, (claimed, claim_id))) > %[2]s * 1000`, qualified(database, schema.TableLease), now)
	// backoff: the hunt's newest hunt_state row has retry_after > now. hunt_state holds at
	// most a row per hunt that ever changed health; as a NOT IN set this pass cost less
	// than as one more join (measured, see docs/schedule.md).
	backoff := fmt.Sprintf(`SELECT hunt_id FROM %[1]s
      WHERE hunt_id IN (SELECT hunt_id FROM %[1]s WHERE toUnixTimestamp64Milli(retry_after) > %[2]s * 1000)
      GROUP BY hunt_id
      HAVING toUnixTimestamp64Milli(argMax(retry_after, updated)) > %[2]s * 1000`, qualified(database, schema.TableState), now)
	// Pending requests are a few hundred rows: one scalar pair of arrays, looked up with
	// transform, costs less than a join stream. The miss value is below every watermark
	// (toInt64 of a DateTime is >= 0), so a hunt without a request is never owed by it.
	reqs := fmt.Sprintf(`(SELECT groupArray(hunt_id), groupArray(rf) FROM (SELECT hunt_id, toInt64(max(requested_fire)) AS rf FROM %s GROUP BY hunt_id))`, qualified(database, schema.TableRequest))
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
  AND hunt_id NOT IN (%[9]s)`, liveScheduleSQL(database, set), dueWatermarkSQL(database), reqs, fire, held, noRequest, now, backoff, duePausedSQL(database, now))
}

// dueSettings is the SETTINGS clause a form needs on the outermost query. Both forms pin
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
	case formNewest:
		return "\nSETTINGS join_use_nulls = 0, optimize_move_to_prewhere_if_final = 0"
	}
	return ""
}

// quoteSet is the SQL literal of a set name that passed schedule.ValidateHuntSet, whose
// alphabet keeps it out of reach of quoting: the due query embeds the name as a literal, since
// it must stay parameter-free to be stored as a view or pasted into a scaler.
func quoteSet(set string) string { return "'" + set + "'" }

// DueCountSQL is the due backlog query: one row, one column `due` UInt64, the number of hunts
// due at nowExpr (`now()` in production; a literal such as `toDateTime(1789027260)` in tests).
// It is the SQL form of schedule.IsDue. database is quoted here; nowExpr is trusted SQL. The
// query has no bound parameters so that it can also be stored as a view (hunt_backlog_v1) or
// pasted into a scaler.
//
// It counts the hunts of every hunt set: KEDA scales the one runner deployment of a database
// on it. DueCountSetSQL narrows it to one set.
func DueCountSQL(database, nowExpr string) string {
	return DueCountSetSQL(database, nowExpr, "")
}

// DueCountSetSQL is DueCountSQL over hunt set set only ("" for every set). set must pass
// schedule.ValidateHuntSet.
func DueCountSetSQL(database, nowExpr, set string) string {
	return "SELECT toUInt64(count()) AS due FROM (\n" + dueCore(formLive, database, nowExpr, set) + "\n)" + dueSettings(formLive)
}

// ErrNoResult means a query that always yields one row (a count) returned none.
var ErrNoResult = errors.New("query returned no row")

// CountDue runs DueCountSetSQL over hunt set set ("" for every set) with the server's clock.
// A failed query is an error, never 0.
func (s *Store) CountDue(ctx context.Context, set string) (uint64, error) {
	if set != "" {
		if err := schedule.ValidateHuntSet(set); err != nil {
			return 0, err
		}
	}
	return s.countDue(ctx, DueCountSetSQL(s.database, "now()", set))
}

func (s *Store) countDue(ctx context.Context, query string) (uint64, error) {
	rows, err := s.conn.Query(ctx, query)
	if err != nil {
		return 0, fmt.Errorf("count due hunts: %w", err)
	}
	defer rows.Close()
	var n uint64
	if !rows.Next() {
		err = cmpErr(rows.Err(), ErrNoResult)
	} else if err = rows.Scan(&n); err == nil {
		err = rows.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("count due hunts: %w", err)
	}
	return n, nil
}

// cmpErr is err, or fallback when err is nil.
func cmpErr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
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

// DueHunts lists up to limit due hunts (all if limit <= 0) of hunt set set ("" for every set),
// most overdue first (then by id), at the server's clock. It uses the same predicate as
// CountDue.
func (s *Store) DueHunts(ctx context.Context, set string, limit int) ([]DueHunt, error) {
	if set != "" {
		if err := schedule.ValidateHuntSet(set); err != nil {
			return nil, err
		}
	}
	return s.dueHunts(ctx, dueListSQL(s.database, "now()", set, limit))
}

// DueListSQL is the query behind DueHunts, over every hunt set.
func DueListSQL(database, nowExpr string, limit int) string {
	return dueListSQL(database, nowExpr, "", limit)
}

func dueListSQL(database, nowExpr, set string, limit int) string {
	q := dueCore(formNewest, database, nowExpr, set) + "\nORDER BY fire, hunt_id"
	if limit > 0 {
		q += fmt.Sprintf("\nLIMIT %d", limit)
	}
	return q + dueSettings(formNewest)
}

func (s *Store) dueHunts(ctx context.Context, query string) ([]DueHunt, error) {
	rows, err := s.conn.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("list due hunts: %w", err)
	}
	defer rows.Close()
	var out []DueHunt
	for rows.Next() {
		var (
			h                       DueHunt
			hasWM, hasLease, hasReq uint8
			fire, wm, luMs, rf      int64
		)
		if err := rows.Scan(&h.HuntID, &fire, &hasWM, &wm, &hasLease, &luMs, &hasReq, &rf); err != nil {
			return nil, fmt.Errorf("list due hunts: %w", err)
		}
		st := schedule.State{Watermark: wm, HasWatermark: hasWM == 1, LeaseUntilMs: luMs, HasLease: hasLease == 1, RequestedFire: rf, HasRequest: hasReq == 1}
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
