package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Delivery statuses (hunt_delivery.status).
const (
	DeliveryPending    = "pending"    // planned, not tried yet (or re-queued)
	DeliveryDelivering = "delivering" // an attempt under the claim in claim_id
	DeliveryRetry      = "retry"      // failed; tried again at next_attempt
	DeliveryDelivered  = "delivered"
	DeliveryDead       = "dead"       // gave up: permanent failure or past the horizon
	DeliverySuppressed = "suppressed" // every finding of the fire was suppressed: nothing to send
	DeliveryMuted      = "muted"      // due while muted (a mute time interval or a snooze): final, never sent
	// DeliveryEnabled marks the row recording when a sink was first enabled: hunt_id ” (no
	// hunt has that id) and fire 0, so no reader of deliveries, which all select hunts or
	// recent fires, ever sees it.
	DeliveryEnabled = "enabled"
)

// DeliveryInfix joins a hunt id and a sink name into the coordination key under which a
// (hunt, sink)'s deliveries are claimed in hunt_lease (DeliveryKey). Hunt ids cannot contain
// '#', so the key never collides with a hunt or a backfill (schema.BackfillKey), and the
// snapshot leaves it out of the hunts.
const DeliveryInfix = "#deliver-"

// DeliveryKey is the hunt_lease key of huntID's deliveries to sink: one claim holds them all,
// so one Dispatcher at a time sends a (hunt, sink)'s fires, oldest first.
func DeliveryKey(huntID, sink string) string { return huntID + DeliveryInfix + sink }

// deliveryKeySQL is DeliveryKey in SQL over a row with hunt_id and sink columns (prefixed).
func deliveryKeySQL(p string) string {
	return "concat(" + p + "hunt_id, '" + DeliveryInfix + "', " + p + "sink)"
}

const nilUUID = "00000000-0000-0000-0000-000000000000"

const deliveryCols = "hunt_id, fire, sink, run_id, idempotency_key, status, attempts, last_error, next_attempt, created, delivered, claim_id, owner, lease_until, updated"

// DeliveryID names one delivery: a (hunt, fire, sink).
type DeliveryID struct {
	HuntID string
	Fire   int64 // epoch seconds
	Sink   string
}

// Delivery is the newest hunt_delivery row of a (hunt, fire, sink).
type Delivery struct {
	DeliveryID
	RunID          uuid.UUID
	IdempotencyKey string
	Status         string
	Attempts       uint32
	LastError      string
	NextAttempt    time.Time
	Created        time.Time // when the delivery was planned: the retry horizon counts from it
	Delivered      time.Time
	ClaimID        uuid.UUID // the hunt_lease claim of the attempt that wrote the row (nil: none)
	Owner          string
	LeaseUntil     time.Time // the claim's lease when the attempt started (informational)
	Updated        time.Time
}

// newestDeliverySQL gives the newest row (by updated, then claim_id) of every (hunt, fire,
// sink) matching where, with deliveryCols as columns.
func (s *Store) newestDeliverySQL(where string) string {
	return `SELECT hunt_id, fire, sink, t.1 AS run_id, t.2 AS idempotency_key, t.3 AS status, t.4 AS attempts,
       t.5 AS last_error, t.6 AS next_attempt, t.7 AS created, t.8 AS delivered, t.9 AS claim_id, t.10 AS owner,
       t.11 AS lease_until, t.12 AS updated
FROM (SELECT hunt_id, fire, sink,
             argMax((run_id, idempotency_key, status, attempts, last_error, next_attempt, created, delivered, claim_id, owner,
                     lease_until, updated), (updated, claim_id)) AS t
      FROM ` + s.table(schema.TableDelivery) + `
      WHERE ` + where + `
      GROUP BY hunt_id, fire, sink)`
}

// idsWhere selects the deliveries bound as kh/kf/ks (idArgs).
const idsWhere = `hunt_id IN {kh:Array(String)} AND (hunt_id, toInt64(fire), sink) IN
        (SELECT c.1, c.2, c.3 FROM (SELECT arrayJoin(arrayZip({kh:Array(String)}, {kf:Array(Int64)}, {ks:Array(String)})) AS c))`

func idArgs(ids []DeliveryID) []any {
	kh, kf, ks, lk := make([]string, len(ids)), make([]int64, len(ids)), make([]string, len(ids)), make([]string, len(ids))
	for i, k := range ids {
		kh[i], kf[i], ks[i], lk[i] = k.HuntID, k.Fire, k.Sink, DeliveryKey(k.HuntID, k.Sink)
	}
	return []any{clickhouse.Named("kh", kh), clickhouse.Named("kf", kf), clickhouse.Named("ks", ks), clickhouse.Named("lk", lk)}
}

// scanDelivery reads deliveryCols (fire as Int64).
func scanDelivery(rows interface{ Scan(...any) error }, d *Delivery) error {
	return rows.Scan(&d.HuntID, &d.Fire, &d.Sink, &d.RunID, &d.IdempotencyKey, &d.Status, &d.Attempts, &d.LastError,
		&d.NextAttempt, &d.Created, &d.Delivered, &d.ClaimID, &d.Owner, &d.LeaseUntil, &d.Updated)
}

const selectDelivery = `SELECT hunt_id, toInt64(fire), sink, run_id, idempotency_key, toString(status), attempts, last_error,
       next_attempt, created, delivered, claim_id, owner, lease_until, updated`

// deliveryWriteCtx makes a delivery write synchronous (an async insert is invisible until
// flushed and its errors are lost), pins the join default the statements rely on (an
// unmatched row reads zeros), bounds how long it may run on the server, and gives it a
// deduplication token from parts.
func deliveryWriteCtx(ctx context.Context, bound time.Duration, parts ...any) context.Context {
	wctx := insertCtx(ctx, parts...)
	if bound > 0 {
		wctx = clickhouse.Context(wctx, clickhouse.WithSettings(clickhouse.Settings{"max_execution_time": bound.Seconds()}))
	}
	return wctx
}

// CommittedFire is one committed (hunt, fire) with findings that some owed sink has not
// finished, with the newest delivery state of each sink that has a row.
type CommittedFire struct {
	HuntID      string
	Fire        int64
	RunID       uuid.UUID
	WindowStart int64
	Committed   time.Time // the commit's server time (hunt_watermark.updated)
	Rows        uint64
	Sinks       map[string]SinkState
}

// SinkState is a sink's newest delivery row of a fire, as PendingDeliveries reads it.
type SinkState struct {
	Status             string
	NextAttempt, Lease time.Time
}

// Claimable reports whether a delivery in state st may be attempted at now (server clock):
// pending or retry and due, or delivering with its recorded lease over (its sender died). The
// claim protocol decides whether it is actually free; this is PendingDeliveries' filter in Go.
func (st SinkState) Claimable(now time.Time) bool {
	return (st.Status == DeliveryDelivering || ((st.Status == DeliveryPending || st.Status == DeliveryRetry) && !st.NextAttempt.After(now))) &&
		!st.Lease.After(now)
}

// Owed is what a sink is owed of one hunt: fires at or after FireFrom committed at or after
// CommittedFrom.
type Owed struct {
	Sink                    string
	FireFrom, CommittedFrom time.Time
}

// Covers reports whether f is owed (PendingDeliveries' filter in Go).
func (o Owed) Covers(f CommittedFire) bool {
	return !time.Unix(f.Fire, 0).Before(o.FireFrom) && !f.Committed.Before(o.CommittedFrom)
}

// PendingDeliveries reads committed runs since since (epoch seconds) of the hunts in want
// (hunt → what its sinks are owed) that have findings and something to do now: an owed sink
// without a row yet, or a delivery claimable on the server clock (SinkState.Claimable); oldest
// fire first, and the server clock. Deliveries waiting for their backoff, and fires no sink is
// owed (history before a sink was enabled), are left out, so many of them cannot crowd newer
// fires past limit.
func (s *Store) PendingDeliveries(ctx context.Context, want map[string][]Owed, since int64, limit int) ([]CommittedFire, time.Time, error) {
	ids := make([]string, 0, len(want))
	sinks := make([][]string, 0, len(want))
	fireFrom := make([][]int64, 0, len(want))
	commitFrom := make([][]int64, 0, len(want))
	for id, os := range want {
		ids = append(ids, id)
		var ss []string
		var ff, cf []int64
		for _, o := range os {
			ss, ff, cf = append(ss, o.Sink), append(ff, o.FireFrom.Unix()), append(cf, o.CommittedFrom.UnixMicro())
		}
		sinks, fireFrom, commitFrom = append(sinks, ss), append(fireFrom, ff), append(commitFrom, cf)
	}
	q := `SELECT c.hunt_id, toInt64(c.fire), c.run_id, toInt64(c.run_start), c.committed, c.run_rows, now64(3),
       d.sinks, d.statuses, d.nexts, d.leases
FROM (SELECT hunt_id, watermark AS fire, argMax(run_id, updated) AS run_id, argMax(run_start, updated) AS run_start,
             argMax(run_rows, updated) AS run_rows, max(updated) AS committed
      FROM ` + s.table(schema.TableWatermark) + `
      WHERE hunt_id IN {ids:Array(String)} AND watermark >= toDateTime({since:Int64}, 'UTC')
      GROUP BY hunt_id, watermark) AS c
LEFT JOIN (SELECT hunt_id, fire, groupArray(sink) AS sinks, groupArray(toString(status)) AS statuses,
                  groupArray(next_attempt) AS nexts, groupArray(lease_until) AS leases
           FROM (` + s.newestDeliverySQL("hunt_id IN {ids:Array(String)} AND fire >= toDateTime({since:Int64}, 'UTC')") + `)
           GROUP BY hunt_id, fire) AS d ON d.hunt_id = c.hunt_id AND d.fire = c.fire
WHERE c.run_rows > 0 AND c.run_id != toUUID('` + nilUUID + `')
  AND (NOT hasAll(d.sinks, arrayFilter((sk, ff, cf) -> toInt64(c.fire) >= ff AND toUnixTimestamp64Micro(c.committed) >= cf,
                                       {want:Array(Array(String))}[indexOf({ids:Array(String)}, c.hunt_id)],
                                       {ff:Array(Array(Int64))}[indexOf({ids:Array(String)}, c.hunt_id)],
                                       {cf:Array(Array(Int64))}[indexOf({ids:Array(String)}, c.hunt_id)]))
       OR arrayExists((st, nx, ls) -> ls <= now64(3) AND (st = '` + DeliveryDelivering + `'
                                      OR (st IN ('` + DeliveryPending + `', '` + DeliveryRetry + `') AND nx <= now64(3))),
                      d.statuses, d.nexts, d.leases))
ORDER BY c.fire, c.hunt_id
LIMIT {limit:UInt32}`
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	rows, err := s.conn.Query(ctx, q, clickhouse.Named("ids", ids), clickhouse.Named("want", sinks),
		clickhouse.Named("ff", fireFrom), clickhouse.Named("cf", commitFrom),
		clickhouse.Named("since", since), clickhouse.Named("limit", uint32(limit)))
	if err != nil {
		return nil, time.Time{}, err
	}
	defer rows.Close()
	var out []CommittedFire
	var now time.Time
	for rows.Next() {
		var (
			f                 CommittedFire
			names, statuses   []string
			nexts, leaseUntil []time.Time
		)
		if err := rows.Scan(&f.HuntID, &f.Fire, &f.RunID, &f.WindowStart, &f.Committed, &f.Rows, &now, &names, &statuses, &nexts, &leaseUntil); err != nil {
			return nil, time.Time{}, err
		}
		f.Sinks = make(map[string]SinkState, len(names))
		for i, n := range names {
			f.Sinks[n] = SinkState{Status: statuses[i], NextAttempt: nexts[i], Lease: leaseUntil[i]}
		}
		out = append(out, f)
	}
	return out, now, rows.Err()
}

// EnableSinks records, for each sink that has none, when it was first enabled, and returns
// that time per sink, read back after any write. A write that failed or is not visible yet
// leaves its sink out, and the caller sends nothing to it.
//
// First enabled is now (server clock), unless the sink already has deliveries: then it was
// enabled when its first one was planned (a sink in use before enablement was recorded, as
// after an upgrade, keeps what it was owed). Concurrent first enablements each insert a row;
// the earliest created is the answer, and a reader that sees the newest row not carrying it
// inserts a copy that does, so that merges (which keep the newest row of the key) keep the
// earliest time. The rows are also refreshed weekly, so the 30-day TTL of hunt_delivery never
// expires a sink's enablement.
func (s *Store) EnableSinks(ctx context.Context, sinks []string, owner string) (map[string]time.Time, error) {
	out, need, err := s.enablement(ctx, sinks)
	if err != nil || len(need) == 0 {
		return out, err
	}
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT '', toDateTime(0, 'UTC'), w.s, toUUID('` + nilUUID + `'), '', '` + DeliveryEnabled + `', 0, '', toDateTime64(0, 3, 'UTC'),
       if(e.present = 1, e.c, if(h.present = 1, least(h.first, now64(6)), now64(6))), toDateTime64(0, 6, 'UTC'),
       toUUID('` + nilUUID + `'), {owner:String}, toDateTime64(0, 3, 'UTC'), now64(6)
FROM (SELECT arrayJoin({sinks:Array(String)}) AS s) AS w
LEFT JOIN (` + s.markersSQL() + `) AS e ON e.sink = w.s
LEFT JOIN (SELECT sink, min(created) AS first, 1 AS present FROM ` + s.table(schema.TableDelivery) + `
           WHERE hunt_id != '' AND sink IN {sinks:Array(String)} GROUP BY sink) AS h ON h.sink = w.s`
	// A fresh token: the row's content is computed on the server, and a later refresh must not
	// be dropped as a duplicate of this one.
	if err := s.conn.Exec(insertCtx(ctx, "enable", uuid.NewString()), q, clickhouse.Named("sinks", need), clickhouse.Named("owner", owner)); err != nil {
		return nil, err
	}
	out, _, err = s.enablement(ctx, sinks)
	return out, err
}

// markersSQL reads the enablement rows of the sinks bound as {sinks}: the earliest created
// (c), the created of the newest row (nc) and when the newest was written (u).
func (s *Store) markersSQL() string {
	return `SELECT sink, min(created) AS c, argMax(created, updated) AS nc, max(updated) AS u, 1 AS present
FROM ` + s.table(schema.TableDelivery) + `
WHERE hunt_id = '' AND fire = toDateTime(0, 'UTC') AND status = '` + DeliveryEnabled + `' AND sink IN {sinks:Array(String)}
GROUP BY sink`
}

// enablement reads when each sink was first enabled, and which sinks need a row written:
// none yet, the newest not carrying the earliest time, or not refreshed for a week.
func (s *Store) enablement(ctx context.Context, sinks []string) (map[string]time.Time, []string, error) {
	rows, err := s.conn.Query(ctx, `SELECT sink, c, toBool(nc != c OR u < now64(6) - INTERVAL 7 DAY) FROM (`+s.markersSQL()+`)`,
		clickhouse.Named("sinks", sinks))
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	out := map[string]time.Time{}
	var need []string
	for rows.Next() {
		var name string
		var c time.Time
		var stale bool
		if err := rows.Scan(&name, &c, &stale); err != nil {
			return nil, nil, err
		}
		out[name] = c
		if stale {
			need = append(need, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	for _, name := range sinks {
		if _, ok := out[name]; !ok {
			need = append(need, name)
		}
	}
	return out, need, nil
}

// DeliveryPlan is the first row of each of Sinks for one committed fire.
type DeliveryPlan struct {
	HuntID string
	Fire   int64
	RunID  uuid.UUID
	Sinks  []string
	Keys   []string // the idempotency key of each sink's delivery
	Status string   // DeliveryPending or DeliverySuppressed
	Owner  string
}

// PlanDeliveries writes a first row for each sink of p that has none yet. The NOT IN is
// evaluated by the server as the rows are written, so a planner that read "no row" before a
// peer planned and started an attempt does not insert a pending row above the peer's.
func (s *Store) PlanDeliveries(ctx context.Context, p DeliveryPlan) error {
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT {h:String}, toDateTime({f:Int64}, 'UTC'), c.1, toUUID({r:String}), c.2, {st:String}, 0, '', now64(3), now64(6),
       toDateTime64(0, 6, 'UTC'), toUUID('` + nilUUID + `'), {owner:String}, toDateTime64(0, 3, 'UTC'), now64(6)
FROM (SELECT arrayJoin(arrayZip({sinks:Array(String)}, {keys:Array(String)})) AS c)
WHERE c.1 NOT IN (SELECT sink FROM ` + s.table(schema.TableDelivery) + `
                  WHERE hunt_id = {h:String} AND fire = toDateTime({f:Int64}, 'UTC'))`
	return s.conn.Exec(insertCtx(ctx, "plan", p.HuntID, p.Fire, p.Sinks, p.Status), q, clickhouse.Named("h", p.HuntID), clickhouse.Named("f", p.Fire),
		clickhouse.Named("r", p.RunID.String()), clickhouse.Named("st", p.Status), clickhouse.Named("owner", p.Owner),
		clickhouse.Named("sinks", p.Sinks), clickhouse.Named("keys", p.Keys))
}

// Deliveries reads the newest rows of ids (those that have one).
func (s *Store) Deliveries(ctx context.Context, ids []DeliveryID) ([]Delivery, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.conn.Query(ctx, selectDelivery+` FROM (`+s.newestDeliverySQL(idsWhere)+`)`, idArgs(ids)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var d Delivery
		if err := scanDelivery(rows, &d); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// leaseFence is the WHERE of a delivery write fenced on the claim protocol: the newest
// hunt_lease row of the delivery's key (l) carries one of the claim ids bound as {claims} and
// outlives the statement's bound on the server's clock, so a row it writes lands before the
// lease ends, never beside the next holder's.
const leaseFence = `has(arrayMap(x -> toUUID(x), {claims:Array(String)}), l.claim_id)
  AND l.until > now64(3) + toIntervalMillisecond({bound_ms:Int64})`

// StartDeliveries writes, for each of ids still open (pending or retry and due, or delivering:
// a dead sender's attempt), a delivering row that counts the attempt and carries the claim of
// the lease in leases that holds the id's DeliveryKey, all in one statement fenced on those
// leases (leaseFence), then reads back and returns the rows that are now their claim's
// delivering rows: those, and only those, may be sent. Whatever the insert answered, the
// read-back decides; an insert error that says it did not run (or failed definitely) is
// returned. The write may run on the server for CommitBound(ctx).
func (s *Store) StartDeliveries(ctx context.Context, leases []lease.Lease, ids []DeliveryID) ([]Delivery, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	claimOf := make(map[string]uuid.UUID, len(leases))
	claims := make([]string, len(leases))
	for i, l := range leases {
		claimOf[l.HuntID], claims[i] = l.ClaimID, l.ClaimID.String()
	}
	bound := CommitBound(ctx)
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT d.hunt_id, d.fire, d.sink, d.run_id, d.idempotency_key, '` + DeliveryDelivering + `', d.attempts + 1, d.last_error,
       d.next_attempt, d.created, d.delivered, l.claim_id, l.owner, l.until, now64(6)
FROM (` + s.newestDeliverySQL(idsWhere) + `) AS d
INNER JOIN (` + NewestLeaseSQL(s.database, "lk") + `) AS l ON l.hunt_id = ` + deliveryKeySQL("d.") + `
WHERE ` + leaseFence + `
  AND (d.status = '` + DeliveryDelivering + `' OR (d.status IN ('` + DeliveryPending + `', '` + DeliveryRetry + `') AND d.next_attempt <= now64(3)))`
	args := append(idArgs(ids), clickhouse.Named("claims", claims), clickhouse.Named("bound_ms", bound.Milliseconds()))
	werr := s.conn.Exec(deliveryWriteCtx(ctx, bound, "start", claims, ids), q, args...)
	if werr != nil && !lease.Transient(werr) {
		return nil, fmt.Errorf("store: start deliveries: %w", werr)
	}
	got, err := s.Deliveries(ctx, ids)
	if err != nil {
		if werr != nil {
			return nil, fmt.Errorf("store: start deliveries: %w (read-back: %v)", werr, err)
		}
		return nil, fmt.Errorf("store: start deliveries read-back: %w", err)
	}
	var out []Delivery
	for _, d := range got {
		if d.Status == DeliveryDelivering && d.ClaimID == claimOf[DeliveryKey(d.HuntID, d.Sink)] {
			out = append(out, d)
		}
	}
	return out, nil
}

// DeliveryOutcome is what an attempt writes when it ends.
type DeliveryOutcome struct {
	Status    string // DeliveryDelivered, DeliveryRetry, DeliveryDead or DeliverySuppressed
	LastError string
	Backoff   time.Duration // DeliveryRetry: next_attempt is the server's now plus this
}

// FinishDelivery writes d's outcome, fenced twice: on l (leaseFence) and on d's newest row
// still being this claim's delivering row. It then reads back by claim id and status: nil means
// the outcome is recorded; ErrFenced that it is not (the claim was lost, or the lease was too
// close to its end): the delivery is then attempted again by the next holder, with the same
// key. Any other error leaves it unknown, and the caller must count it as not recorded.
// The write may run on the server for CommitBound(ctx).
func (s *Store) FinishDelivery(ctx context.Context, l lease.Lease, d Delivery, o DeliveryOutcome) error {
	bound := CommitBound(ctx)
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT d.hunt_id, d.fire, d.sink, d.run_id, d.idempotency_key, {st:String}, d.attempts, {err:String},
       now64(3) + toIntervalMillisecond({backoff_ms:Int64}), d.created,
       if({st:String} = '` + DeliveryDelivered + `', now64(6), d.delivered), d.claim_id, d.owner, now64(3), now64(6)
FROM (` + s.newestDeliverySQL(idsWhere) + `) AS d
INNER JOIN (` + NewestLeaseSQL(s.database, "lk") + `) AS l ON l.hunt_id = ` + deliveryKeySQL("d.") + `
WHERE ` + leaseFence + `
  AND d.claim_id = l.claim_id AND d.status = '` + DeliveryDelivering + `'`
	args := append(idArgs([]DeliveryID{d.DeliveryID}), clickhouse.Named("claims", []string{l.ClaimID.String()}),
		clickhouse.Named("bound_ms", bound.Milliseconds()), clickhouse.Named("st", o.Status),
		clickhouse.Named("err", boundError(o.LastError)), clickhouse.Named("backoff_ms", o.Backoff.Milliseconds()))
	werr := s.conn.Exec(deliveryWriteCtx(ctx, bound, "finish", l.ClaimID, d.DeliveryID, o.Status), q, args...)
	if werr != nil && !lease.Transient(werr) {
		return fmt.Errorf("store: finish delivery %s/%d/%s: %w", d.HuntID, d.Fire, d.Sink, werr)
	}
	var n uint64
	err := s.conn.QueryRow(ctx, `SELECT count() FROM `+s.table(schema.TableDelivery)+`
WHERE hunt_id = {h:String} AND fire = toDateTime({f:Int64}, 'UTC') AND sink = {s:String}
  AND claim_id = toUUID({claim:String}) AND status = {st:String}`,
		clickhouse.Named("h", d.HuntID), clickhouse.Named("f", d.Fire), clickhouse.Named("s", d.Sink),
		clickhouse.Named("claim", l.ClaimID.String()), clickhouse.Named("st", o.Status)).Scan(&n)
	switch {
	case err == nil && n > 0:
		return nil
	case err != nil && werr != nil:
		return fmt.Errorf("store: finish delivery %s/%d/%s: %w (read-back: %v)", d.HuntID, d.Fire, d.Sink, werr, err)
	case err != nil:
		return fmt.Errorf("store: finish delivery %s/%d/%s read-back: %w", d.HuntID, d.Fire, d.Sink, err)
	case werr != nil:
		return fmt.Errorf("store: finish delivery %s/%d/%s: not visible after: %w", d.HuntID, d.Fire, d.Sink, werr)
	}
	return fmt.Errorf("%w: delivery %s/%d/%s claim %s: outcome not written (lease no longer ours or too close to its end)",
		ErrFenced, d.HuntID, d.Fire, d.Sink, l.ClaimID)
}

// DeliveryCounts are the deliveries by newest status.
type DeliveryCounts struct {
	Pending    uint64 `json:"pending"` // pending, delivering or retry
	Delivered  uint64 `json:"delivered"`
	Dead       uint64 `json:"dead"`
	Suppressed uint64 `json:"suppressed"`
	Muted      uint64 `json:"muted"` // due while muted (time interval or snooze); never sent
}

// CountDeliveries counts the deliveries of fires since since (epoch seconds) by newest status.
func (s *Store) CountDeliveries(ctx context.Context, since int64) (DeliveryCounts, error) {
	var c DeliveryCounts
	err := s.conn.QueryRow(ctx, `SELECT countIf(status IN ('`+DeliveryPending+`', '`+DeliveryDelivering+`', '`+DeliveryRetry+`')),
       countIf(status = '`+DeliveryDelivered+`'), countIf(status = '`+DeliveryDead+`'), countIf(status = '`+DeliverySuppressed+`'),
       countIf(status = '`+DeliveryMuted+`')
FROM (`+s.newestDeliverySQL("fire >= toDateTime({since:Int64}, 'UTC')")+`)`, clickhouse.Named("since", since)).
		Scan(&c.Pending, &c.Delivered, &c.Dead, &c.Suppressed, &c.Muted)
	return c, err
}

// OpenDeliveries reads every delivery of fires since since (epoch seconds) that is not
// delivered or suppressed, newest fire first (at most 1000), and the server clock.
func (s *Store) OpenDeliveries(ctx context.Context, since int64) ([]Delivery, time.Time, error) {
	var now time.Time
	if err := s.conn.QueryRow(ctx, "SELECT now64(3)").Scan(&now); err != nil {
		return nil, now, err
	}
	rows, err := s.conn.Query(ctx, selectDelivery+`
FROM (`+s.newestDeliverySQL("fire >= toDateTime({since:Int64}, 'UTC')")+`)
WHERE status NOT IN ('`+DeliveryDelivered+`', '`+DeliverySuppressed+`')
ORDER BY fire DESC, hunt_id, sink LIMIT 1000`, clickhouse.Named("since", since))
	if err != nil {
		return nil, now, err
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var d Delivery
		if err := scanDelivery(rows, &d); err != nil {
			return nil, now, err
		}
		out = append(out, d)
	}
	return out, now, rows.Err()
}

// DeadFilter selects dead letters to re-queue; empty fields match everything.
type DeadFilter struct {
	HuntID string
	Sink   string
	Fire   time.Time // zero: any fire
	Since  time.Time // only fires at or after
}

// RequeueDead re-queues the dead letters f matches: a pending row with the same idempotency
// key, due now, whose retry horizon starts again. It returns how many it re-queued.
func (s *Store) RequeueDead(ctx context.Context, f DeadFilter, owner string) (int, error) {
	where := `fire >= toDateTime({since:Int64}, 'UTC')`
	args := []any{clickhouse.Named("since", f.Since.Unix()), clickhouse.Named("owner", owner)}
	if f.HuntID != "" {
		where += ` AND hunt_id = {h:String}`
		args = append(args, clickhouse.Named("h", f.HuntID))
	}
	if f.Sink != "" {
		where += ` AND sink = {s:String}`
		args = append(args, clickhouse.Named("s", f.Sink))
	}
	if !f.Fire.IsZero() {
		where += ` AND fire = toDateTime({f:Int64}, 'UTC')`
		args = append(args, clickhouse.Named("f", f.Fire.Unix()))
	}
	var n uint64
	if err := s.conn.QueryRow(ctx, `SELECT count() FROM (`+s.newestDeliverySQL(where)+`) WHERE status = '`+DeliveryDead+`'`, args...).Scan(&n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	// The status check runs on the server as the rows are written: a delivery a peer re-queued
	// and started meanwhile is not dead any more and is left alone.
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT hunt_id, fire, sink, run_id, idempotency_key, '` + DeliveryPending + `', attempts, concat('re-queued after: ', last_error), now64(3),
       now64(6), delivered, toUUID('` + nilUUID + `'), {owner:String}, toDateTime64(0, 3, 'UTC'), now64(6)
FROM (` + s.newestDeliverySQL(where) + `)
WHERE status = '` + DeliveryDead + `'`
	if err := s.conn.Exec(insertCtx(ctx, "requeue", uuid.NewString()), q, args...); err != nil {
		return 0, err
	}
	return int(n), nil
}

// FireFinding is one committed finding of a fire, as a notification carries it.
type FireFinding struct {
	ID   uint64
	JSON string
	// What the hunt's explain keys made of the row (hunt.Explained); "" on older rows.
	Title, Severity, DedupKey string
}

// FireFindings reads the findings of a fire's committed run, once each, ordered by finding_id.
func (s *Store) FireFindings(ctx context.Context, huntID string, fire int64, runID uuid.UUID) ([]FireFinding, error) {
	rows, err := s.conn.Query(ctx, `SELECT finding_id, finding, title, severity, dedup_key FROM `+s.table(schema.TableFindings)+`
WHERE hunt_id = {h:String} AND fire = toDateTime({f:Int64}, 'UTC') AND run_id = toUUID({r:String})
ORDER BY finding_id LIMIT 1 BY finding_id`,
		clickhouse.Named("h", huntID), clickhouse.Named("f", fire), clickhouse.Named("r", runID.String()))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []FireFinding
	for rows.Next() {
		var f FireFinding
		if err := rows.Scan(&f.ID, &f.JSON, &f.Title, &f.Severity, &f.DedupKey); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// CommittedFindingsSQL selects the committed findings of fires since {since:Int64} (epoch
// seconds), optionally of one hunt ({hunt:String}, ” for all), newest fire first. A finding is
// committed when hunt_watermark holds its (hunt_id, fire, run_id): rows of attempts that never
// committed are left out, and a retried insert's duplicates are read once (LIMIT 1 BY). A
// backfill chunk commits under schema.BackfillKey; its findings are the hunt's.
// docs/findings.md shows the same statement for Grafana.
func CommittedFindingsSQL(database string) string {
	db := schema.QuoteIdent(database)
	return `SELECT f.hunt_id, f.fire, f.finding_id, f.finding, f.severity, f.labels, f.found,
    f.title, f.dedup_key, f.runbook, f.mitre, f.revision
FROM ` + db + `.` + schema.QuoteIdent(schema.TableFindings) + ` AS f
WHERE f.fire >= toDateTime({since:Int64}, 'UTC') AND ({hunt:String} = '' OR f.hunt_id = {hunt:String})
  AND (f.hunt_id, f.fire, f.run_id) IN (
        SELECT splitByChar('#', hunt_id)[1], watermark, run_id FROM ` + db + `.` + schema.QuoteIdent(schema.TableWatermark) + `
        WHERE watermark >= toDateTime({since:Int64}, 'UTC'))
ORDER BY f.fire DESC, f.hunt_id, f.finding_id
LIMIT 1 BY f.hunt_id, f.fire, f.finding_id
LIMIT {limit:UInt32}`
}

// CommittedFinding is one committed finding (`hunt-runner findings`).
type CommittedFinding struct {
	HuntID    string            `json:"hunt_id"`
	Fire      time.Time         `json:"fire"`
	FindingID uint64            `json:"finding_id"`
	Finding   json.RawMessage   `json:"finding"`
	Severity  string            `json:"severity"`
	Labels    map[string]string `json:"labels"`
	Found     time.Time         `json:"found"`
	// What the hunt's explain keys made of the row ("" and [] when it sets none, and on rows
	// stored before they existed), and the hunt's revision that found it (hunt.Hunt.Revision).
	Title    string   `json:"title"`
	DedupKey string   `json:"dedup_key"`
	Runbook  string   `json:"runbook"`
	Mitre    []string `json:"mitre"`
	Revision string   `json:"revision"`
}

// CommittedFindings reads committed findings of fires at or after since, newest first, at
// most limit, of huntID ("" for all). A finding that is not valid JSON is returned as a JSON
// string.
func (s *Store) CommittedFindings(ctx context.Context, huntID string, since time.Time, limit int) ([]CommittedFinding, error) {
	rows, err := s.conn.Query(ctx, CommittedFindingsSQL(s.database), clickhouse.Named("since", since.Unix()),
		clickhouse.Named("hunt", huntID), clickhouse.Named("limit", uint32(limit)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []CommittedFinding{}
	for rows.Next() {
		var f CommittedFinding
		var raw string
		if err := rows.Scan(&f.HuntID, &f.Fire, &f.FindingID, &raw, &f.Severity, &f.Labels, &f.Found,
			&f.Title, &f.DedupKey, &f.Runbook, &f.Mitre, &f.Revision); err != nil {
			return nil, err
		}
		if !json.Valid([]byte(raw)) {
			b, _ := json.Marshal(raw)
			raw = string(b)
		}
		f.Finding = json.RawMessage(raw)
		out = append(out, f)
	}
	return out, rows.Err()
}
