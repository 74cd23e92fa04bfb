package store

import "github.com/hunt-runner/hunt-runner/store/schema"

// The one "newest row" form of each table: every statement that needs a hunt's current lease,
// watermark, state or pause reads it through these, so the order that decides "newest" is
// written once per table. Each takes the name of an Array(String) parameter holding the hunts
// to read, or "" for every hunt; the argMax forms keep their order on every replica and before
// or after a merge, which FINAL (the last inserted of tied versions) does not.

// hunts is the WHERE that narrows a newest form to the hunts in param ("" for all).
func hunts(param string) string {
	if param == "" {
		return ""
	}
	return huntsIn("{" + param + ":Array(String)}")
}

// huntsIn is the WHERE that narrows a newest form to the hunts of set, an SQL set (a
// subquery, or an array parameter): on the tables' primary key (hunt_id first), so the read
// touches only those hunts' granules.
func huntsIn(set string) string { return " WHERE hunt_id IN " + set }

func qualified(database, table string) string { return schema.QuoteIdent(database) + "." + table }

// NewestLeaseSQL is a subquery giving the newest lease row of each hunt (of those in the
// Array(String) parameter named param; "" for all), as columns hunt_id, fire, owner, claim_id,
// claimed, until, and tied (1 when another claim id has a row with the same, greatest claimed:
// see lease.View.Tied). Newest is max (claimed, claim_id); argMax over that tuple measured
// faster than FINAL and than LIMIT 1 BY on chDB for this shape, and unlike FINAL it breaks ties
// on claim_id the same way on every replica (see lease/bench_test.go). tied compares the
// greatest claim id at the greatest claimed with the smallest one (argMin over (−claimed,
// claim_id)); a renewal or release row shares its claim's id, so it never ties with it.
func NewestLeaseSQL(database, param string) string {
	return `SELECT hunt_id, t.1 AS fire, t.2 AS owner, t.3 AS claim_id, t.4 AS claimed, t.5 AS until, t.3 != lo AS tied
FROM (SELECT hunt_id, argMax((fire, owner, claim_id, claimed, lease_until), (claimed, claim_id)) AS t,
             argMin(claim_id, (-toUnixTimestamp64Micro(claimed), claim_id)) AS lo
      FROM ` + qualified(database, schema.TableLease) + hunts(param) + ` GROUP BY hunt_id)`
}

// newestCommitSQL is a subquery giving the newest commit row of each hunt (of those in param),
// as columns hunt_id, watermark, claim_id, run_id, interval_seconds. Newest is the greatest
// (watermark, updated): commits only ever raise a hunt's watermark, so a late-landing or
// lagging row can never move progress back, whatever the clocks say.
func newestCommitSQL(database, param string) string {
	return `SELECT hunt_id, t.1 AS watermark, t.2 AS claim_id, t.3 AS run_id, t.4 AS interval_seconds
FROM (SELECT hunt_id, argMax((watermark, claim_id, run_id, interval_seconds), (watermark, updated)) AS t
      FROM ` + qualified(database, schema.TableWatermark) + hunts(param) + ` GROUP BY hunt_id)`
}

// newestWatermarkSQL is newestCommitSQL's watermark alone (hunt_id, watermark): the greatest,
// by the same order, which the table's projection answers without reading every commit. The
// snapshot, the due count and the backlog read it.
func newestWatermarkSQL(database, param string) string {
	return newestWatermarkWhereSQL(database, hunts(param))
}

// newestWatermarkWhereSQL is newestWatermarkSQL narrowed by where (hunts or huntsIn; "" for
// every hunt).
func newestWatermarkWhereSQL(database, where string) string {
	return `SELECT hunt_id, max(watermark) AS watermark FROM ` + qualified(database, schema.TableWatermark) + where +
		` GROUP BY hunt_id`
}

// newestStateSQL is a subquery of each hunt's newest hunt_state row (by updated, the table's
// version), of those in param, with every column of the table.
func newestStateSQL(database, param string) string {
	return `SELECT hunt_id, t.1 AS status, t.2 AS consecutive_failures, t.3 AS last_error, t.4 AS last_fire,
       t.5 AS retry_after, t.6 AS overrun_count, t.7 AS too_aggressive, t.8 AS updated
FROM (SELECT hunt_id, argMax((status, consecutive_failures, last_error, last_fire, retry_after, overrun_count, too_aggressive, updated),
             updated) AS t
      FROM ` + qualified(database, schema.TableState) + hunts(param) + ` GROUP BY hunt_id)`
}

// newestPauseSQL is a subquery of each hunt's newest hunt_pause row (by updated), pausing or
// resuming, as hunt_id, paused, paused_until, reason, paused_by, updated.
func newestPauseSQL(database string) string {
	return `SELECT hunt_id, t.1 AS paused, t.2 AS paused_until, t.3 AS reason, t.4 AS paused_by, t.5 AS updated
FROM (SELECT hunt_id, argMax((paused, paused_until, reason, paused_by, updated), updated) AS t
      FROM ` + qualified(database, schema.TablePause) + ` GROUP BY hunt_id)`
}

// pausedSQL is a subquery of the hunts paused at now (hunt_id, an SQL expression of the
// server clock): their newest hunt_pause row pauses them, until resumed or until its
// paused_until. The claim insert leaves them out, so a pause is a barrier for claims from the
// moment it is visible, not from the next snapshot.
func pausedSQL(database, now string) string {
	return `SELECT hunt_id FROM (` + newestPauseSQL(database) + `)
WHERE paused = 1 AND (toUnixTimestamp64Milli(paused_until) = 0 OR paused_until > ` + now + `)`
}

// pendingRequestSQL is a subquery of each hunt's newest pending run-now request (hunt_id,
// requested_fire): the greatest requested fire above the hunt's watermark. A request at or
// below the watermark was served by the commit that passed it. Only the requested hunts'
// watermarks are read: hunt_request is small, hunt_watermark is every hunt's.
func pendingRequestSQL(database string) string {
	request := qualified(database, schema.TableRequest)
	return `SELECT r.hunt_id AS hunt_id, max(r.requested_fire) AS requested_fire
FROM ` + request + ` AS r
LEFT JOIN (` + newestWatermarkWhereSQL(database, huntsIn("(SELECT hunt_id FROM "+request+")")) + `) AS w ON w.hunt_id = r.hunt_id
WHERE r.requested_fire > w.watermark
GROUP BY r.hunt_id`
}
