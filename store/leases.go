package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Leases is the ClickHouse implementation of lease.Store: the claim protocol's reads and its
// fenced writes of hunt_lease. It is safe for concurrent use, like the Store it comes from.
type Leases struct{ s *Store }

// Leases returns the lease.Store over s's database, for lease.New.
func (s *Store) Leases() *Leases { return &Leases{s: s} }

var _ lease.Store = (*Leases)(nil)

// chunks splits a batch into statements of at most lease.MaxStatement hunts.
func chunks[T any](all []T) [][]T {
	var out [][]T
	for len(all) > lease.MaxStatement {
		out = append(out, all[:lease.MaxStatement])
		all = all[lease.MaxStatement:]
	}
	return append(out, all)
}

func (ls *Leases) Read(ctx context.Context, hunts []string) (lease.View, error) {
	v := lease.View{Leases: make(map[string]lease.Row, len(hunts)), Watermarks: make(map[string]int64, len(hunts)),
		WatermarkIntervals: map[string]int64{}, Tied: map[string]bool{}}
	for _, part := range chunks(uniq(hunts)) {
		if err := ls.read(ctx, part, &v); err != nil {
			return v, err
		}
	}
	return v, nil
}

// read adds part's rows to v. v.Now is the first chunk's clock: the earliest, so a lease
// that expires between chunks still counts as live (the conservative side).
func (ls *Leases) read(ctx context.Context, hunts []string, v *lease.View) error {
	// One row per requested hunt, each carrying the server clock, so the clock and the
	// rows come from the same round trip.
	q := `SELECT b.h, now64(6), l.hunt_id != '', toInt64(l.fire), l.owner, l.claim_id, l.claimed, l.until, l.tied,
       w.hunt_id != '', toInt64(w.watermark), toInt64(w.interval_seconds)
FROM (SELECT arrayJoin({ids:Array(String)}) AS h) AS b
LEFT JOIN (` + NewestLeaseSQL(ls.s.database, "ids") + `) AS l ON l.hunt_id = b.h
LEFT JOIN (` + newestCommitSQL(ls.s.database, "ids") + `) AS w ON w.hunt_id = b.h`
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	rows, err := ls.s.conn.Query(ctx, q, clickhouse.Named("ids", hunts))
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
			v.Leases[h] = lease.Row{HuntID: h, Fire: fire, Owner: owner, ClaimID: id, Claimed: claimed, Until: till}
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

func (ls *Leases) InsertClaims(ctx context.Context, claims []lease.Row, length time.Duration) error {
	for _, part := range chunks(claims) {
		if err := ls.insertClaims(ctx, part, length); err != nil {
			return err
		}
	}
	return nil
}

func (ls *Leases) insertClaims(ctx context.Context, claims []lease.Row, length time.Duration) error {
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
	q := `INSERT INTO ` + ls.s.table(schema.TableLease) + ` (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT b.h, toDateTime(b.f, 'UTC'), {owner:String}, toUUID(b.cid), ` + nextClaimed("l.claimed") + `,
       now64(3) + toIntervalMillisecond({lease_ms:Int64})
FROM (SELECT c.1 AS h, c.2 AS f, c.3 AS cid
      FROM (SELECT arrayJoin(arrayZip({ids:Array(String)}, {fires:Array(Int64)}, {claims:Array(String)})) AS c)) AS b
LEFT JOIN (` + NewestLeaseSQL(ls.s.database, "ids") + `) AS l ON l.hunt_id = b.h
LEFT JOIN (` + newestCommitSQL(ls.s.database, "ids") + `) AS w ON w.hunt_id = b.h
LEFT JOIN (` + pausedSQL(ls.s.database, "now64(3)") + `) AS p ON p.hunt_id = ` + huntOfKey("b.h") + `
WHERE (l.until <= now64(3) OR (w.hunt_id != '' AND toInt64(l.fire) <= toInt64(w.watermark)))
  AND toInt64(w.watermark) < b.f
  AND p.hunt_id = ''`
	ctx = writeCtx(ctx, batchToken(claimIDs))
	return ls.s.conn.Exec(ctx, q,
		clickhouse.Named("owner", claims[0].Owner),
		clickhouse.Named("lease_ms", length.Milliseconds()),
		clickhouse.Named("ids", ids),
		clickhouse.Named("fires", fires),
		clickhouse.Named("claims", claimIDs),
	)
}

// Running is the cap's read (lease.Cap): the newest lease row of every key of hunts (the hunts
// and their backfill keys; a delivery key's hunt part is never a hunt id, so it is left out)
// that is live on the server's clock and not spent. hunt_lease is small (one row per key
// survives merges, and the TTL drops a day-old lease), so its scan by key prefix is cheap; the
// watermarks are read by key, for the live keys only.
func (ls *Leases) Running(ctx context.Context, hunts []string) ([]lease.Row, error) {
	var out []lease.Row
	for _, part := range chunks(uniq(hunts)) {
		rows, err := ls.running(ctx, part)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

func (ls *Leases) running(ctx context.Context, hunts []string) ([]lease.Row, error) {
	inScope := huntOfKey("hunt_id") + " IN {hunts:Array(String)}"
	q := `SELECT l.hunt_id, toInt64(l.fire), l.owner, l.claim_id, l.claimed, l.until
FROM (SELECT hunt_id, t.1 AS fire, t.2 AS owner, t.3 AS claim_id, t.4 AS claimed, t.5 AS until
      FROM (SELECT hunt_id, argMax((fire, owner, claim_id, claimed, lease_until), (claimed, claim_id)) AS t
            FROM ` + ls.s.table(schema.TableLease) + ` WHERE ` + inScope + ` GROUP BY hunt_id)
      WHERE until > now64(3)) AS l
LEFT JOIN (SELECT hunt_id, max(watermark) AS watermark FROM ` + ls.s.table(schema.TableWatermark) + `
           WHERE hunt_id IN (SELECT hunt_id FROM ` + ls.s.table(schema.TableLease) + ` WHERE ` + inScope + ` AND lease_until > now64(3))
           GROUP BY hunt_id) AS w ON w.hunt_id = l.hunt_id
WHERE NOT (w.hunt_id != '' AND toInt64(l.fire) <= toInt64(w.watermark))`
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	rows, err := ls.s.conn.Query(ctx, q, clickhouse.Named("hunts", hunts))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []lease.Row
	for rows.Next() {
		var r lease.Row
		if err := rows.Scan(&r.HuntID, &r.Fire, &r.Owner, &r.ClaimID, &r.Claimed, &r.Until); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// huntOfKey is the hunt id of a coordination key in SQL: a backfill's key
// (schema.BackfillKey) is paused with its hunt.
func huntOfKey(col string) string {
	return "if(position(" + col + ", '" + schema.BackfillInfix + "') > 0, substring(" + col + ", 1, position(" + col +
		", '" + schema.BackfillInfix + "') - 1), " + col + ")"
}

func (ls *Leases) Release(ctx context.Context, leases []lease.Lease) error {
	for _, part := range chunks(leases) {
		if err := ls.release(ctx, part); err != nil {
			return err
		}
	}
	return nil
}

func (ls *Leases) release(ctx context.Context, leases []lease.Lease) error {
	ids := make([]string, len(leases))
	claimIDs := make([]string, len(leases))
	for i, l := range leases {
		ids[i], claimIDs[i] = l.HuntID, l.ClaimID.String()
	}
	// Only a live lease is released. An expired one already frees the hunt, and a peer may be
	// claiming it right now: a release row inserted before that claim became visible to us
	// would land above it and free the hunt under a winner.
	return ls.writeFenced(ctx, ids, claimIDs, "now64(3)", liveOnly, "release:"+batchToken(claimIDs))
}

func (ls *Leases) Extend(ctx context.Context, leases []lease.Lease, length, margin time.Duration) error {
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
		if err := ls.writeFenced(ectx, ids, claimIDs, until, live, "extend:"+batchToken(claimIDs),
			clickhouse.Named("lease_ms", length.Milliseconds()), clickhouse.Named("margin_ms", margin.Milliseconds())); err != nil {
			return err
		}
	}
	return nil
}

// Renew writes a copy of l's row lasting length from the server's now, if that row is still
// the newest of its hunt and live: renewing an expired lease could overlap a peer's claim that
// read the hunt as free. The deduplication token is the claim and the row it extends, so a
// retry routed to another replica is dropped by the block deduplication, and the next renewal
// (a newer row) is not. The length is literal SQL (an extension's is a bound parameter), so
// the two can be told apart in a server's query log.
func (ls *Leases) Renew(ctx context.Context, l lease.Lease, length time.Duration) error {
	token := fmt.Sprintf("renew:%s:%d", l.ClaimID, l.Claimed.UnixMicro())
	until := fmt.Sprintf("now64(3) + toIntervalMillisecond(%d)", length.Milliseconds())
	return ls.writeFenced(ctx, []string{l.HuntID}, []string{l.ClaimID.String()}, until, liveOnly, token)
}

// ReplicaDelay is the largest system.replicas.absolute_delay over the database's tables; 0
// when nothing is replicated.
func (s *Store) ReplicaDelay(ctx context.Context) (time.Duration, error) {
	// max over no rows is 0, which is the answer for a non-replicated database.
	var secs uint64
	err := s.conn.QueryRow(ctx, `SELECT toUInt64(max(absolute_delay)) FROM system.replicas WHERE database = {db:String}`,
		clickhouse.Named("db", s.database)).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("store: replica delay: %w", err)
	}
	return time.Duration(secs) * time.Second, nil
}

// liveOnly narrows a fenced write to a lease that is still live on the server clock.
const liveOnly = " AND until > now64(3)"

// writeFenced inserts, for each hunt whose newest lease row carries one of claimIDs, a copy
// of that row with a fresh claimed and lease_until = untilExpr. extraWhere narrows further.
// The copy's claimed is the server's now, or just above the row it copies when that row's
// claimed is ahead of the server's clock (a clock stepped back, a replica that ran fast): the
// copy must be the newest row, or the claim it renews would lose to its own older row.
func (ls *Leases) writeFenced(ctx context.Context, ids, claimIDs []string, untilExpr, extraWhere, token string, params ...any) error {
	q := `INSERT INTO ` + ls.s.table(schema.TableLease) + ` (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT hunt_id, fire, owner, claim_id, ` + nextClaimed("claimed") + `, ` + untilExpr + `
FROM (` + NewestLeaseSQL(ls.s.database, "ids") + `)
WHERE has(arrayMap(x -> toUUID(x), {claims:Array(String)}), claim_id)` + extraWhere
	ctx = writeCtx(ctx, token)
	return ls.s.conn.Exec(ctx, q, append([]any{
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
