package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/store/schema"
	"github.com/tidwall/gjson"
)

// Delivery statuses (hunt_delivery.status).
const (
	StatusPending    = "pending"    // planned, not tried yet (or re-queued)
	StatusDelivering = "delivering" // claimed; lease_until bounds the claim
	StatusRetry      = "retry"      // failed; tried again at next_attempt
	StatusDelivered  = "delivered"
	StatusDead       = "dead"       // gave up: permanent failure or past the horizon
	StatusSuppressed = "suppressed" // every finding of the fire was suppressed: nothing to send
)

const nilUUID = "00000000-0000-0000-0000-000000000000"

const deliveryCols = "hunt_id, fire, sink, run_id, idempotency_key, status, attempts, last_error, next_attempt, created, delivered, claim_id, owner, lease_until, updated"

// store holds the SQL of the delivery and suppression tables; only this package writes them.
type deliveryStore struct {
	conn driver.Conn
	db   string
}

func (s deliveryStore) table(name string) string {
	return schema.QuoteIdent(s.db) + "." + schema.QuoteIdent(name)
}

// newestSQL gives the newest row of every (hunt, fire, sink) matching where, and tied: another
// claim id has a row at the same greatest updated. As for hunt_lease, a merge keeps the last
// inserted of tied rows whatever its claim id, so no claimer may count a tie as won.
func (s deliveryStore) newestSQL(where string) string {
	return `SELECT hunt_id, fire, sink, t.1 AS run_id, t.2 AS idempotency_key, t.3 AS status, t.4 AS attempts,
       t.5 AS last_error, t.6 AS next_attempt, t.7 AS created, t.8 AS delivered, t.9 AS claim_id, t.10 AS owner,
       t.11 AS lease_until, t.12 AS updated, t.9 != lo AS tied
FROM (SELECT hunt_id, fire, sink,
             argMax((run_id, idempotency_key, status, attempts, last_error, next_attempt, created, delivered, claim_id, owner,
                     lease_until, updated), (updated, claim_id)) AS t,
             argMin(claim_id, (-toUnixTimestamp64Micro(updated), claim_id)) AS lo
      FROM ` + s.table(schema.TableDelivery) + `
      WHERE ` + where + `
      GROUP BY hunt_id, fire, sink)`
}

// keysWhere selects the (hunt, fire, sink) keys bound as kh/kf/ks.
const keysWhere = `hunt_id IN {kh:Array(String)} AND (hunt_id, toInt64(fire), sink) IN
        (SELECT c.1, c.2, c.3 FROM (SELECT arrayJoin(arrayZip({kh:Array(String)}, {kf:Array(Int64)}, {ks:Array(String)})) AS c))`

type key struct {
	HuntID string
	Fire   int64
	Sink   string
}

func keyArgs(keys []key) []any {
	kh, kf, ks := make([]string, len(keys)), make([]int64, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		kh[i], kf[i], ks[i] = k.HuntID, k.Fire, k.Sink
	}
	return []any{clickhouse.Named("kh", kh), clickhouse.Named("kf", kf), clickhouse.Named("ks", ks)}
}

// writeCtx makes a write synchronous (an async insert is invisible until flushed and its
// errors are lost) and pins the join default the queries rely on.
func writeCtx(ctx context.Context) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"async_insert": 0, "join_use_nulls": 0}))
}

// work is one committed (hunt, fire) with findings that some routed sink has not finished.
type work struct {
	HuntID      string
	Fire        int64
	RunID       uuid.UUID
	WindowStart int64
	Committed   time.Time // the commit's server time (hunt_watermark.updated)
	Rows        uint64
	Sinks       map[string]sinkState // newest row per sink that has one
}

type sinkState struct {
	Status             string
	NextAttempt, Lease time.Time
}

// owed is what a sink is owed of one hunt: fires at or after FireFrom committed at or after
// CommittedFrom (Dispatcher.owedTo).
type owed struct {
	Sink                    string
	FireFrom, CommittedFrom time.Time
}

func (o owed) covers(w work) bool {
	return !time.Unix(w.Fire, 0).Before(o.FireFrom) && !w.Committed.Before(o.CommittedFrom)
}

// pending reads committed runs since since (epoch seconds) of the hunts in want (hunt → what
// its sinks are owed) that have findings and something to do now: an owed sink without a row
// yet, or a delivery that is claimable on the server clock; oldest fire first, and the server
// clock. Deliveries waiting for their backoff, and fires no sink is owed (history before a
// sink was enabled), are left out, so many of them cannot crowd newer fires past limit.
func (s deliveryStore) pending(ctx context.Context, want map[string][]owed, since int64, limit int) ([]work, time.Time, error) {
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
LEFT JOIN (SELECT hunt_id, fire, groupArray(sink) AS sinks, groupArray(status) AS statuses,
                  groupArray(next_attempt) AS nexts, groupArray(lease_until) AS leases
           FROM (` + s.newestSQL("hunt_id IN {ids:Array(String)} AND fire >= toDateTime({since:Int64}, 'UTC')") + `)
           GROUP BY hunt_id, fire) AS d ON d.hunt_id = c.hunt_id AND d.fire = c.fire
WHERE c.run_rows > 0 AND c.run_id != toUUID('` + nilUUID + `')
  AND (NOT hasAll(d.sinks, arrayFilter((sk, ff, cf) -> toInt64(c.fire) >= ff AND toUnixTimestamp64Micro(c.committed) >= cf,
                                       {want:Array(Array(String))}[indexOf({ids:Array(String)}, c.hunt_id)],
                                       {ff:Array(Array(Int64))}[indexOf({ids:Array(String)}, c.hunt_id)],
                                       {cf:Array(Array(Int64))}[indexOf({ids:Array(String)}, c.hunt_id)]))
       OR arrayExists((st, nx, ls) -> ls <= now64(3) AND (st = 'delivering' OR (st IN ('pending', 'retry') AND nx <= now64(3))),
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
	var out []work
	var now time.Time
	for rows.Next() {
		var (
			w                 work
			names, statuses   []string
			nexts, leaseUntil []time.Time
		)
		if err := rows.Scan(&w.HuntID, &w.Fire, &w.RunID, &w.WindowStart, &w.Committed, &w.Rows, &now, &names, &statuses, &nexts, &leaseUntil); err != nil {
			return nil, time.Time{}, err
		}
		w.Sinks = make(map[string]sinkState, len(names))
		for i, n := range names {
			w.Sinks[n] = sinkState{Status: statuses[i], NextAttempt: nexts[i], Lease: leaseUntil[i]}
		}
		out = append(out, w)
	}
	return out, now, rows.Err()
}

// StatusEnabled marks the row recording when a sink was first enabled: hunt_id ” (no hunt
// has that id) and fire 0, so no reader of deliveries, which all select hunts or recent fires,
// ever sees it.
const StatusEnabled = "enabled"

// enable records, for each sink that has none, when it was first enabled, and returns that
// time per sink, read back after any write. A write that failed or is not visible yet leaves
// its sink out, and the caller sends nothing to it.
//
// First enabled is now (server clock), unless the sink already has deliveries: then it was
// enabled when its first one was planned (a sink in use before enablement was recorded, as
// after an upgrade, keeps what it was owed). Concurrent first enablements each insert a row;
// the earliest created is the answer, and a reader that sees the newest row not carrying it
// inserts a copy that does, so that merges (which keep the newest row of the key) keep the
// earliest time. The rows are also refreshed weekly, so the 30-day TTL of hunt_delivery never
// expires a sink's enablement.
func (s deliveryStore) enable(ctx context.Context, sinks []string, owner string) (map[string]time.Time, error) {
	out, need, err := s.enablement(ctx, sinks)
	if err != nil || len(need) == 0 {
		return out, err
	}
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT '', toDateTime(0, 'UTC'), w.s, toUUID('` + nilUUID + `'), '', '` + StatusEnabled + `', 0, '', toDateTime64(0, 3, 'UTC'),
       if(e.present = 1, e.c, if(h.present = 1, least(h.first, now64(6)), now64(6))), toDateTime64(0, 6, 'UTC'),
       toUUID('` + nilUUID + `'), {owner:String}, toDateTime64(0, 3, 'UTC'), now64(6)
FROM (SELECT arrayJoin({sinks:Array(String)}) AS s) AS w
LEFT JOIN (` + s.markersSQL() + `) AS e ON e.sink = w.s
LEFT JOIN (SELECT sink, min(created) AS first, 1 AS present FROM ` + s.table(schema.TableDelivery) + `
           WHERE hunt_id != '' AND sink IN {sinks:Array(String)} GROUP BY sink) AS h ON h.sink = w.s`
	if err := s.conn.Exec(writeCtx(ctx), q, clickhouse.Named("sinks", need), clickhouse.Named("owner", owner)); err != nil {
		return nil, err
	}
	out, _, err = s.enablement(ctx, sinks)
	return out, err
}

// markersSQL reads the enablement rows of the sinks bound as {sinks}: the earliest created
// (c), the created of the newest row (nc) and when the newest was written (u).
func (s deliveryStore) markersSQL() string {
	return `SELECT sink, min(created) AS c, argMax(created, updated) AS nc, max(updated) AS u, 1 AS present
FROM ` + s.table(schema.TableDelivery) + `
WHERE hunt_id = '' AND fire = toDateTime(0, 'UTC') AND status = '` + StatusEnabled + `' AND sink IN {sinks:Array(String)}
GROUP BY sink`
}

// enablement reads when each sink was first enabled, and which sinks need a row written:
// none yet, the newest not carrying the earliest time, or not refreshed for a week.
func (s deliveryStore) enablement(ctx context.Context, sinks []string) (map[string]time.Time, []string, error) {
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

// plan writes a first row for each sink of a (hunt, fire) that has none yet. The NOT IN is
// evaluated by the server as the rows are written, so a planner that read "no row" before a
// peer planned and claimed does not insert a pending row above the peer's claim.
func (s deliveryStore) plan(ctx context.Context, w work, sinks []string, status, owner string) error {
	keys := make([]string, len(sinks))
	for i, sk := range sinks {
		keys[i] = IdempotencyKey(w.HuntID, w.Fire, sk)
	}
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT {h:String}, toDateTime({f:Int64}, 'UTC'), c.1, toUUID({r:String}), c.2, {st:String}, 0, '', now64(3), now64(6),
       toDateTime64(0, 6, 'UTC'), toUUID('` + nilUUID + `'), {owner:String}, toDateTime64(0, 3, 'UTC'), now64(6)
FROM (SELECT arrayJoin(arrayZip({sinks:Array(String)}, {keys:Array(String)})) AS c)
WHERE c.1 NOT IN (SELECT sink FROM ` + s.table(schema.TableDelivery) + `
                  WHERE hunt_id = {h:String} AND fire = toDateTime({f:Int64}, 'UTC'))`
	return s.conn.Exec(writeCtx(ctx), q, clickhouse.Named("h", w.HuntID), clickhouse.Named("f", w.Fire),
		clickhouse.Named("r", w.RunID.String()), clickhouse.Named("st", status), clickhouse.Named("owner", owner),
		clickhouse.Named("sinks", sinks), clickhouse.Named("keys", keys))
}

// claim writes a delivering row under claimID for each key whose newest row is claimable on
// the server clock: pending or retry and due, or delivering with an expired lease (its
// holder died). It counts the attempt. A tie at the top does not stop a claim: two claims
// that tied both lost (held refuses ties), and only a newer row can settle the key again.
func (s deliveryStore) claim(ctx context.Context, keys []key, claimID uuid.UUID, owner string, lease time.Duration) error {
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT hunt_id, fire, sink, run_id, idempotency_key, 'delivering', attempts + 1, last_error, next_attempt, created, delivered,
       toUUID({claim:String}), {owner:String}, now64(3) + toIntervalMillisecond({lease_ms:Int64}), now64(6)
FROM (` + s.newestSQL(keysWhere) + `)
WHERE lease_until <= now64(3)
  AND (status = 'delivering' OR (status IN ('pending', 'retry') AND next_attempt <= now64(3)))`
	args := append(keyArgs(keys), clickhouse.Named("claim", claimID.String()), clickhouse.Named("owner", owner),
		clickhouse.Named("lease_ms", lease.Milliseconds()))
	return s.conn.Exec(writeCtx(ctx), q, args...)
}

// held is a claimed delivery as the verify read saw it.
type held struct {
	key
	RunID   uuid.UUID
	Key     string
	Attempt uint32
	Created time.Time
	ClaimID uuid.UUID
	Until   time.Time
	Updated time.Time
}

// read returns the newest rows of keys that are held by claimID and live, and the server clock.
func (s deliveryStore) held(ctx context.Context, keys []key, claimID uuid.UUID) ([]held, time.Time, error) {
	q := `SELECT hunt_id, toInt64(fire), sink, run_id, idempotency_key, attempts, created, claim_id, lease_until, updated, now64(3)
FROM (` + s.newestSQL(keysWhere) + `)
WHERE claim_id = toUUID({claim:String}) AND NOT tied AND status = 'delivering' AND lease_until > now64(3)`
	args := append(keyArgs(keys), clickhouse.Named("claim", claimID.String()))
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer rows.Close()
	var out []held
	var now time.Time
	for rows.Next() {
		var h held
		if err := rows.Scan(&h.HuntID, &h.Fire, &h.Sink, &h.RunID, &h.Key, &h.Attempt, &h.Created, &h.ClaimID, &h.Until, &h.Updated, &now); err != nil {
			return nil, time.Time{}, err
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, err
	}
	if now.IsZero() {
		if err := s.conn.QueryRow(ctx, "SELECT now64(3)").Scan(&now); err != nil {
			return nil, time.Time{}, err
		}
	}
	return out, now, nil
}

// fencedCopy inserts a copy of h's newest row with the given changes, only while that row is
// still h's claim, not tied, delivering and live on the server clock.
func (s deliveryStore) fencedCopy(ctx context.Context, h held, status, lastError, nextAttempt, delivered, leaseUntil string, extra ...any) error {
	q := `INSERT INTO ` + s.table(schema.TableDelivery) + ` (` + deliveryCols + `)
SELECT hunt_id, fire, sink, run_id, idempotency_key, ` + status + `, attempts, ` + lastError + `, ` + nextAttempt + `, created,
       ` + delivered + `, claim_id, owner, ` + leaseUntil + `, now64(6)
FROM (` + s.newestSQL(keysWhere) + `)
WHERE claim_id = toUUID({claim:String}) AND NOT tied AND status = 'delivering' AND lease_until > now64(3)`
	args := append(keyArgs([]key{h.key}), clickhouse.Named("claim", h.ClaimID.String()))
	return s.conn.Exec(writeCtx(ctx), q, append(args, extra...)...)
}

// renew extends h's lease and reads it back: ok false means the claim is lost (a peer's row is
// newest or the lease ran out); an error means the renewal is not known to have landed.
func (s deliveryStore) renew(ctx context.Context, h held, lease time.Duration) (held, bool, error) {
	err := s.fencedCopy(ctx, h, "status", "last_error", "next_attempt", "delivered",
		"now64(3) + toIntervalMillisecond({lease_ms:Int64})", clickhouse.Named("lease_ms", lease.Milliseconds()))
	if err != nil {
		return h, true, err
	}
	got, _, err := s.held(ctx, []key{h.key}, h.ClaimID)
	if err != nil {
		return h, true, err
	}
	if len(got) == 0 {
		return h, false, nil
	}
	return got[0], true, nil
}

// finish writes the outcome of h's attempt, fenced on the claim. A write that finds the
// claim gone writes nothing: the delivery is then retried by whoever claims it next, with
// the same key.
func (s deliveryStore) finish(ctx context.Context, h held, status, lastError string, backoff time.Duration) error {
	return s.fencedCopy(ctx, h, "{st:String}", "{err:String}", "now64(3) + toIntervalMillisecond({backoff_ms:Int64})",
		"if({st:String} = 'delivered', now64(6), delivered)", "now64(3)",
		clickhouse.Named("st", status), clickhouse.Named("err", lastError), clickhouse.Named("backoff_ms", backoff.Milliseconds()))
}

// finding is one committed finding of a fire.
type finding struct {
	ID   uint64
	JSON string
	// What the hunt's explain keys made of the row (hunt.Explained); "" on older rows.
	Title, Severity, DedupKey string
}

// suppressKey is the finding's key for suppression and grouping: its dedup key when the hunt
// sets dedup:, else its suppress.by fields.
func (f finding) suppressKey(by []string) string {
	if f.DedupKey != "" {
		sum := sha256.Sum256([]byte("dedup\x00" + f.DedupKey))
		return hex.EncodeToString(sum[:16])
	}
	return suppressKey(f.JSON, by)
}

// findings reads the committed run's findings of a fire, once each, ordered by finding_id.
func (s deliveryStore) findings(ctx context.Context, huntID string, fire int64, runID uuid.UUID) ([]finding, error) {
	rows, err := s.conn.Query(ctx, `SELECT finding_id, finding, title, severity, dedup_key FROM `+s.table(schema.TableFindings)+`
WHERE hunt_id = {h:String} AND fire = toDateTime({f:Int64}, 'UTC') AND run_id = toUUID({r:String})
ORDER BY finding_id LIMIT 1 BY finding_id`,
		clickhouse.Named("h", huntID), clickhouse.Named("f", fire), clickhouse.Named("r", runID.String()))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []finding
	for rows.Next() {
		var f finding
		if err := rows.Scan(&f.ID, &f.JSON, &f.Title, &f.Severity, &f.DedupKey); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// suppressKey identifies a finding for suppression: its by fields (gjson paths) as JSON.
func suppressKey(findingJSON string, by []string) string {
	h := sha256.New()
	for _, field := range by {
		raw := gjson.Get(findingJSON, field).Raw
		b, _ := json.Marshal([2]string{field, raw})
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// suppressedKeys returns which of keys an earlier fire of the hunt notified within
// [fire − for, fire). The fire's own rows never count, so every sink and every retry of the
// fire computes the same set.
func (s deliveryStore) suppressedKeys(ctx context.Context, huntID string, fire int64, window time.Duration, keys []string) (map[string]bool, error) {
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

// recordSuppress notes keys as notified by fire.
func (s deliveryStore) recordSuppress(ctx context.Context, huntID string, fire int64, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return s.conn.Exec(writeCtx(ctx), `INSERT INTO `+s.table(schema.TableSuppress)+` (hunt_id, suppress_key, fire, recorded)
SELECT {h:String}, arrayJoin({keys:Array(String)}), toDateTime({f:Int64}, 'UTC'), now64(6)`,
		clickhouse.Named("h", huntID), clickhouse.Named("keys", keys), clickhouse.Named("f", fire))
}
