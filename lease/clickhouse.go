package lease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// NewestLeaseSQL is a subquery giving the newest lease row of each hunt in the
// Array(String) parameter named param, as columns hunt_id, fire, owner, claim_id, claimed,
// until, and tied (1 when another claim id has a row with the same, greatest claimed: see
// View.Tied). Newest is max (claimed, claim_id); argMax over that tuple measured faster than
// FINAL and than LIMIT 1 BY on chDB for this shape, and unlike FINAL it breaks ties on
// claim_id the same way on every replica (see lease/bench_test.go). tied compares the
// greatest claim id at the greatest claimed with the smallest one (argMin over (−claimed,
// claim_id)); a renewal or release row shares its claim's id, so it never ties with it.
func NewestLeaseSQL(database, param string) string {
	return `SELECT hunt_id, t.1 AS fire, t.2 AS owner, t.3 AS claim_id, t.4 AS claimed, t.5 AS until, t.3 != lo AS tied
FROM (SELECT hunt_id, argMax((fire, owner, claim_id, claimed, lease_until), (claimed, claim_id)) AS t,
             argMin(claim_id, (-toUnixTimestamp64Micro(claimed), claim_id)) AS lo
      FROM ` + schema.QuoteIdent(database) + `.` + schema.TableLease + `
      WHERE hunt_id IN {` + param + `:Array(String)} GROUP BY hunt_id)`
}

// NewestWatermarkSQL is a subquery giving the newest watermark of each hunt in the
// Array(String) parameter named param, as columns hunt_id, watermark, claim_id, run_id.
// Newest is the greatest (watermark, updated): commits only ever raise a hunt's watermark, so
// a late-landing or lagging row can never move progress back, whatever the clocks say.
func NewestWatermarkSQL(database, param string) string {
	return `SELECT hunt_id, t.1 AS watermark, t.2 AS claim_id, t.3 AS run_id, t.4 AS interval_seconds
FROM (SELECT hunt_id, argMax((watermark, claim_id, run_id, interval_seconds), (watermark, updated)) AS t
      FROM ` + schema.QuoteIdent(database) + `.` + schema.TableWatermark + `
      WHERE hunt_id IN {` + param + `:Array(String)} GROUP BY hunt_id)`
}

// writeSettings are set on every coordination write: synchronous (an async insert is
// invisible until flushed and its errors are lost) and explicit about join defaults, which
// the freeness checks rely on (an unmatched LEFT JOIN row reads as epoch 0: no lease, no
// watermark).
func writeSettings(ctx context.Context, token string) clickhouse.Settings {
	s := clickhouse.Settings{
		"async_insert":   0,
		"join_use_nulls": 0,
	}
	if d, ok := ctx.Value(executionBoundKey{}).(time.Duration); ok && d > 0 {
		s["max_execution_time"] = d.Seconds()
	}
	if token != "" {
		// Replicated tables drop an insert whose block hash they have seen; a token unique
		// to this attempt keeps a new attempt from being mistaken for an old one, while a
		// client retry of the same attempt stays idempotent.
		s["insert_deduplication_token"] = token
	}
	return s
}

// chStore is the ClickHouse Store.
type chStore struct {
	conn     driver.Conn
	database string
}

func (s chStore) table(name string) string { return schema.QuoteIdent(s.database) + "." + name }

// maxStatement caps the hunts bound into one statement. Parameters travel in the URL over
// HTTP, and servers cap its size (http_max_uri_size, 1 MiB by default): 2,000 hunts with
// long ids and their claim ids stay well under it. A larger batch costs its round trips once
// per 2,000 hunts; the protocol still waits one settle.
const maxStatement = 2000

func chunks[T any](all []T) [][]T {
	var out [][]T
	for len(all) > maxStatement {
		out = append(out, all[:maxStatement])
		all = all[maxStatement:]
	}
	return append(out, all)
}

func (s chStore) Read(ctx context.Context, hunts []string) (View, error) {
	v := View{Leases: make(map[string]Row, len(hunts)), Watermarks: make(map[string]int64, len(hunts)),
		WatermarkIntervals: map[string]int64{}, Tied: map[string]bool{}}
	for _, part := range chunks(uniq(hunts)) {
		if err := s.read(ctx, part, &v); err != nil {
			return v, err
		}
	}
	return v, nil
}

// read adds part's rows to v. v.Now is the first chunk's clock: the earliest, so a lease
// that expires between chunks still counts as live (the conservative side).
func (s chStore) read(ctx context.Context, hunts []string, v *View) error {
	// One row per requested hunt, each carrying the server clock, so the clock and the
	// rows come from the same round trip.
	q := `SELECT b.h, now64(6), l.hunt_id != '', toInt64(l.fire), l.owner, l.claim_id, l.claimed, l.until, l.tied,
       w.hunt_id != '', toInt64(w.watermark), toInt64(w.interval_seconds)
FROM (SELECT arrayJoin({ids:Array(String)}) AS h) AS b
LEFT JOIN (` + NewestLeaseSQL(s.database, "ids") + `) AS l ON l.hunt_id = b.h
LEFT JOIN (` + NewestWatermarkSQL(s.database, "ids") + `) AS w ON w.hunt_id = b.h`
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	rows, err := s.conn.Query(ctx, q, clickhouse.Named("ids", hunts))
	if err != nil {
		return err
	}
	first := v.Now.IsZero()
	defer rows.Close()
	for rows.Next() {
		var (
			h, owner           string
			now, claimed, till time.Time
			hasL, hasW, tied   bool
			fire, wm, inForce  int64
			id                 uuid.UUID
		)
		if err := rows.Scan(&h, &now, &hasL, &fire, &owner, &id, &claimed, &till, &tied, &hasW, &wm, &inForce); err != nil {
			return err
		}
		if first {
			v.Now = now
		}
		if hasL {
			v.Leases[h] = Row{HuntID: h, Fire: fire, Owner: owner, ClaimID: id, Claimed: claimed, Until: till}
			if tied {
				v.Tied[h] = true
			}
		}
		if hasW {
			v.Watermarks[h] = wm
			if inForce > 0 {
				v.WatermarkIntervals[h] = inForce
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if v.Now.IsZero() {
		return errors.New("no rows from read")
	}
	return nil
}

func (s chStore) InsertClaims(ctx context.Context, claims []Row, lease time.Duration) error {
	for _, part := range chunks(claims) {
		if err := s.insertClaims(ctx, part, lease); err != nil {
			return err
		}
	}
	return nil
}

func (s chStore) insertClaims(ctx context.Context, claims []Row, lease time.Duration) error {
	ids := make([]string, len(claims))
	fires := make([]int64, len(claims))
	claimIDs := make([]string, len(claims))
	for i, c := range claims {
		ids[i], fires[i], claimIDs[i] = c.HuntID, c.Fire, c.ClaimID.String()
	}
	// The WHERE re-checks freeness on the server at the moment the rows are written: a
	// claimer that read a hunt as free cannot then overwrite a claim that landed since. A
	// lease whose fire is committed is spent: it frees the hunt. A hunt with no commit has no
	// watermark row (join_use_nulls = 0 reads it as 0), and its lease is never spent.
	q := `INSERT INTO ` + s.table(schema.TableLease) + ` (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT b.h, toDateTime(b.f, 'UTC'), {owner:String}, toUUID(b.cid), ` + nextClaimed("l.claimed") + `,
       now64(3) + toIntervalMillisecond({lease_ms:Int64})
FROM (SELECT c.1 AS h, c.2 AS f, c.3 AS cid
      FROM (SELECT arrayJoin(arrayZip({ids:Array(String)}, {fires:Array(Int64)}, {claims:Array(String)})) AS c)) AS b
LEFT JOIN (` + NewestLeaseSQL(s.database, "ids") + `) AS l ON l.hunt_id = b.h
LEFT JOIN (` + NewestWatermarkSQL(s.database, "ids") + `) AS w ON w.hunt_id = b.h
LEFT JOIN (` + pausedSQL(s.database) + `) AS p ON p.hunt_id = ` + huntOfKey("b.h") + `
WHERE (l.until <= now64(3) OR (w.hunt_id != '' AND toInt64(l.fire) <= toInt64(w.watermark)))
  AND toInt64(w.watermark) < b.f
  AND p.hunt_id = ''`
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(writeSettings(ctx, batchToken(claimIDs))))
	return s.conn.Exec(ctx, q,
		clickhouse.Named("owner", claims[0].Owner),
		clickhouse.Named("lease_ms", lease.Milliseconds()),
		clickhouse.Named("ids", ids),
		clickhouse.Named("fires", fires),
		clickhouse.Named("claims", claimIDs),
	)
}

// pausedSQL is a subquery of the hunts paused now (hunt_id): their newest hunt_pause row
// pauses them, until resumed or until its paused_until. The claim insert leaves them out, so
// a pause is a barrier for claims from the moment it is visible, not from the next snapshot.
func pausedSQL(database string) string {
	return `SELECT hunt_id FROM (
    SELECT hunt_id, argMax((paused, paused_until), updated) AS t
    FROM ` + schema.QuoteIdent(database) + `.` + schema.TablePause + ` GROUP BY hunt_id)
WHERE t.1 = 1 AND (toUnixTimestamp64Milli(t.2) = 0 OR t.2 > now64(3))`
}

// huntOfKey is the hunt id of a coordination key in SQL: a backfill's key
// (schema.BackfillKey) is paused with its hunt.
func huntOfKey(col string) string {
	return "if(position(" + col + ", '" + schema.BackfillInfix + "') > 0, substring(" + col + ", 1, position(" + col +
		", '" + schema.BackfillInfix + "') - 1), " + col + ")"
}

func (s chStore) Release(ctx context.Context, leases []Lease) error {
	for _, part := range chunks(leases) {
		if err := s.release(ctx, part); err != nil {
			return err
		}
	}
	return nil
}

func (s chStore) release(ctx context.Context, leases []Lease) error {
	ids := make([]string, len(leases))
	claimIDs := make([]string, len(leases))
	for i, l := range leases {
		ids[i], claimIDs[i] = l.HuntID, l.ClaimID.String()
	}
	// Only a live lease is released. An expired one already frees the hunt, and a peer may be
	// claiming it right now: a release row inserted before that claim became visible to us
	// would land above it and free the hunt under a winner.
	return s.writeFenced(ctx, ids, claimIDs, "now64(3)", liveOnly, "release:"+batchToken(claimIDs))
}

func (s chStore) Extend(ctx context.Context, leases []Lease, lease, margin time.Duration) error {
	for _, part := range chunks(leases) {
		ids := make([]string, len(part))
		claimIDs := make([]string, len(part))
		for i, l := range part {
			ids[i], claimIDs[i] = l.HuntID, l.ClaimID.String()
		}
		// The length is a bound parameter (a renewal's is literal SQL), so the two can be told
		// apart in a server's query log. The row extended must live margin more when the
		// statement runs, and the statement may run margin/2 at most: whatever it writes lands
		// while the provisional lease still runs (see protocol.extend).
		until := "now64(3) + toIntervalMillisecond({lease_ms:Int64})"
		live := " AND until > now64(3) + toIntervalMillisecond({margin_ms:Int64})"
		ectx := withExecutionBound(ctx, margin/2)
		if err := s.writeFenced(ectx, ids, claimIDs, until, live, "extend:"+batchToken(claimIDs),
			clickhouse.Named("lease_ms", lease.Milliseconds()), clickhouse.Named("margin_ms", margin.Milliseconds())); err != nil {
			return err
		}
	}
	return nil
}

// withExecutionBound makes the server abort the statement once it has run for d
// (max_execution_time): what the caller derives from when the statement's rows can land
// holds on the server, not only while the client waits.
func withExecutionBound(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, executionBoundKey{}, d)
}

type executionBoundKey struct{}

// liveOnly narrows a fenced write to a lease that is still live on the server clock.
const liveOnly = " AND until > now64(3)"

// writeFenced inserts, for each hunt whose newest lease row carries one of claimIDs, a copy
// of that row with a fresh claimed and lease_until = untilExpr. extraWhere narrows further.
// The copy's claimed is the server's now, or just above the row it copies when that row's
// claimed is ahead of the server's clock (a clock stepped back, a replica that ran fast): the
// copy must be the newest row, or the claim it renews would lose to its own older row.
func (s chStore) writeFenced(ctx context.Context, ids, claimIDs []string, untilExpr, extraWhere, token string, params ...any) error {
	q := `INSERT INTO ` + s.table(schema.TableLease) + ` (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT hunt_id, fire, owner, claim_id, ` + nextClaimed("claimed") + `, ` + untilExpr + `
FROM (` + NewestLeaseSQL(s.database, "ids") + `)
WHERE has(arrayMap(x -> toUUID(x), {claims:Array(String)}), claim_id)` + extraWhere
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(writeSettings(ctx, token)))
	return s.conn.Exec(ctx, q, append([]any{
		clickhouse.Named("ids", uniq(ids)),
		clickhouse.Named("claims", claimIDs),
	}, params...)...)
}

// nextClaimed is the claimed of a row written above the newest row whose claimed is prev: the
// server's now, or one microsecond above prev when prev is ahead of it. So a clock stepped
// back never leaves an old row newest (the order is by claimed), and such a row delays claims
// by at most the step (rows written meanwhile still expire on the server's clock).
func nextClaimed(prev string) string {
	return "greatest(now64(6), " + prev + " + toIntervalMicrosecond(1))"
}

// batchToken derives one deduplication token from a batch's fresh claim ids.
func batchToken(claimIDs []string) string {
	h := sha256.New()
	for _, id := range claimIDs {
		h.Write([]byte(id))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func uniq(ss []string) []string {
	seen := make(map[string]bool, len(ss))
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// renew extends l if its row is still the newest of the hunt and live, then reads back. An
// error from the insert other than a definite one leaves its outcome unknown, so the read-back
// decides: the renewal counts when its row is visible, whatever the insert answered.
func (s chStore) renew(ctx context.Context, l Lease, lease, settle time.Duration) (Lease, error) {
	start := time.Now()
	// Deterministic: the claim and the row it extends, so a retry routed to another replica is
	// dropped by the block deduplication, and the next renewal (a newer row) is not.
	token := fmt.Sprintf("renew:%s:%d", l.ClaimID, l.Claimed.UnixMicro())
	until := fmt.Sprintf("now64(3) + toIntervalMillisecond(%d)", lease.Milliseconds())
	// Renewing an expired lease could overlap a peer's claim that read the hunt as free.
	werr := s.writeFenced(ctx, []string{l.HuntID}, []string{l.ClaimID.String()}, until, liveOnly, token)
	if werr != nil && !Transient(werr) {
		return l, fmt.Errorf("lease: renew %s: %w", l.HuntID, werr)
	}
	v, err := s.Read(ctx, []string{l.HuntID})
	if err != nil {
		if werr != nil {
			return l, fmt.Errorf("lease: renew %s: %w (read-back: %v)", l.HuntID, werr, err)
		}
		return l, fmt.Errorf("lease: renew read-back %s: %w", l.HuntID, err)
	}
	cur, ok := v.Leases[l.HuntID]
	switch {
	case !ok || cur.ClaimID != l.ClaimID:
		return l, fmt.Errorf("%w: hunt %s fire %d: newest claim is %s", ErrLost, l.HuntID, l.Fire, cur.ClaimID)
	case !cur.Until.After(v.Now):
		return l, fmt.Errorf("%w: hunt %s fire %d: expired at %s", ErrLost, l.HuntID, l.Fire, cur.Until.UTC().Format(time.RFC3339Nano))
	case !cur.Claimed.After(l.Claimed):
		// Still ours and live, but no renewal row is visible (refused, or not there yet): the
		// lease and its trust stay what they were; the caller tries again.
		if werr != nil {
			return l, fmt.Errorf("lease: renew %s: %w", l.HuntID, werr)
		}
		return l, fmt.Errorf("lease: renewal of hunt %s not visible yet, lease live until %s", l.HuntID, cur.Until.UTC().Format(time.RFC3339Nano))
	}
	l.Claimed, l.Until, l.Trusted = cur.Claimed, cur.Until, trustFrom(start, cur, v.Now, lease, settle)
	return l, nil
}
