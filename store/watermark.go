// Package store holds the per-hunt progress: fenced watermark writes, the run log
// (hunt_run), per-hunt state (hunt_state), run-now requests, and the one-round-trip Snapshot
// the runner plans each tick from.
package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// ErrFenced is lease.ErrFenced: the writer no longer holds the lease.
var ErrFenced = lease.ErrFenced

// Snapshot is everything the runner needs to plan a tick, read in one round trip.
type Snapshot struct {
	Now   time.Time // server clock, read in the same round trip
	Hunts map[string]HuntState
	// Backfills are the backfills still to run (active, not cancelled, not finished), oldest
	// request first, each with the state of its coordination key. Keys are never in Hunts.
	Backfills []Backfill
}

// Backfill is one backfill still to run: its request and its progress.
type Backfill struct {
	ID, HuntID  string
	From, To    int64 // the range [From, To), epoch seconds
	Chunk       int64 // seconds per chunk (the last may be shorter)
	RequestedBy string
	Requested   time.Time
	// Progress is the newest watermark, lease and hunt_state row of Key(): chunks commit there,
	// so Progress.Watermark is where the next chunk starts (From while none has committed).
	Progress HuntState
}

// Key is the coordination key the backfill's chunks are claimed and committed under.
func (b Backfill) Key() string { return schema.BackfillKey(b.HuntID, b.ID) }

// Done is how far the backfill has got: chunks cover [From, Done()).
func (b Backfill) Done() int64 {
	if b.Progress.HasWatermark && b.Progress.Watermark > b.From {
		return min(b.Progress.Watermark, b.To)
	}
	return b.From
}

// HuntState is the newest watermark, lease, state and pending request of one hunt.
type HuntState struct {
	Watermark    int64
	HasWatermark bool

	LeaseOwner   string
	LeaseFire    int64
	LeaseClaimID uuid.UUID
	LeaseUntil   time.Time
	HasLease     bool

	RequestedFire int64 // newest pending request (requested_fire > watermark)
	HasRequest    bool

	Status              hunt.RunStatus
	ConsecutiveFailures uint32
	LastError           string
	LastFire            int64
	// RetryAfter (server clock) is when a failing hunt may be claimed again: every pod honours
	// it, and the due count leaves the hunt out until then.
	RetryAfter    time.Time
	HasRetryAfter bool
	OverrunCount  uint64
	TooAggressive bool

	// Paused is set when the hunt's newest hunt_pause row pauses it, whether or not that pause
	// has run out by now (PausedAt decides): who paused it, why, since when (server clock) and
	// until when (zero: until resumed).
	Paused      bool
	PausedBy    string
	PauseReason string
	PausedSince time.Time
	PausedUntil time.Time
}

// ScheduleState is h as the due predicate reads it (schedule.State): the one conversion, so
// the runner, status and backfills apply the same rules.
func (h HuntState) ScheduleState() schedule.State {
	st := schedule.State{
		Watermark: h.Watermark, HasWatermark: h.HasWatermark,
		LeaseUntilMs: h.LeaseUntil.UnixMilli(), LeaseFire: h.LeaseFire, HasLease: h.HasLease,
		RetryAfterMs: h.RetryAfter.UnixMilli(), HasRetryAfter: h.HasRetryAfter,
		RequestedFire: h.RequestedFire, HasRequest: h.HasRequest,
		Paused: h.Paused,
	}
	if !h.PausedUntil.IsZero() { // time.Time's zero is not the epoch; 0 is "until resumed"
		st.PausedUntilMs = h.PausedUntil.UnixMilli()
	}
	return st
}

// PausedAt reports whether the hunt is paused at now (schedule.State.PausedAt).
func (h HuntState) PausedAt(now time.Time) bool { return h.ScheduleState().PausedAt(now.UnixMilli()) }

// LeaseHeld reports whether a lease holds the hunt at now: live and not spent (its fire not
// yet committed; schedule.State.LeaseFreeAt).
func (h HuntState) LeaseHeld(now time.Time) bool {
	return h.HasLease && !h.ScheduleState().LeaseFreeAt(now.UnixMilli())
}

// Run is one hunt_run row (one finished attempt).
type Run struct {
	HuntID      string
	Fire        int64
	RunID       uuid.UUID
	Owner       string
	Status      hunt.RunStatus
	WindowStart int64
	WindowEnd   int64
	RowsWritten uint64
	Started     time.Time
	Finished    time.Time
	Error       string
	// GapStart, GapEnd: a range this run skipped (outage longer than max_catchup); Advance
	// records it as a gap row when GapEnd > GapStart. RecordRun ignores them.
	GapStart, GapEnd int64
	// FindingsDropped counts result rows past the hunt's max_findings, not stored.
	FindingsDropped uint64
	Kind            hunt.Kind // hunt.KindScheduled (default), KindRequest, KindBackfill
	// Interval is the hunt's interval in seconds when the run committed
	// (hunt_watermark.interval_seconds): the next run's catch-up cap uses it.
	Interval int64
	// Revision is the hunt's revision that ran (hunt.Hunt.Revision); the run history shows a
	// change of it.
	Revision string
}

// State is what a finished run writes to hunt_state. Its counters are not taken from the
// writer's snapshot but derived on the server from the hunt's newest row when the statement
// runs, so two pods cannot lose or reverse each other's increments, and a write for an older
// fire never lands over a newer one (SetStates).
type State struct {
	HuntID    string
	Status    hunt.RunStatus // hunt.RunFailed counts one more consecutive failure; any other resets them
	LastError string
	LastFire  int64 // the fire the run was for: the write is fenced on it
	// Overran counts one overrun for LastFire: the count rises by one the first time a row of
	// that fire is written, whoever writes it and however often.
	Overran       bool
	TooAggressive bool
	// A failure backs the hunt off: the n-th consecutive failure (n as derived) sets retry_after
	// to the server's now plus min(BackoffBase × 2^(n−1), BackoffCap) (0: no backoff).
	BackoffBase, BackoffCap time.Duration
}

// Store reads and writes the progress tables.
type Store struct {
	conn     driver.Conn
	database string
}

// New returns a Store over database (default "hunt_runner" when empty).
func New(conn driver.Conn, database string) *Store {
	if database == "" {
		database = lease.DefaultDatabase
	}
	return &Store{conn: conn, database: database}
}

// Snapshot reads, in ONE round trip, now64() and per hunt the newest watermark, lease and
// state and the newest pending run-now request.
func (s *Store) Snapshot(ctx context.Context) (Snapshot, error) {
	return s.snapshot(ctx, snapshotNewest)
}

func (s *Store) snapshot(ctx context.Context, how snapshotForm) (Snapshot, error) {
	snap := Snapshot{Hunts: map[string]HuntState{}}
	keys := map[string]HuntState{} // backfill coordination keys
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	rows, err := s.conn.Query(ctx, snapshotSQL(s.database, how))
	if err != nil {
		return snap, fmt.Errorf("watermark: snapshot: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			kind, huntID, s1, s2 string
			n1, n2, n3           int64
			id                   uuid.UUID
			ts, now              time.Time
		)
		if err := rows.Scan(&kind, &huntID, &n1, &n2, &n3, &s1, &s2, &id, &ts, &now); err != nil {
			return snap, fmt.Errorf("watermark: snapshot: %w", err)
		}
		if kind == "now" {
			snap.Now = now
			continue
		}
		states := snap.Hunts
		if strings.Contains(huntID, schema.BackfillInfix) {
			states = keys
		}
		h := states[huntID]
		switch kind {
		case "watermark":
			h.Watermark, h.HasWatermark = n1, true
		case "lease":
			h.LeaseFire, h.LeaseOwner, h.LeaseClaimID, h.LeaseUntil, h.HasLease = n1, s1, id, ts, true
		case "state":
			h.LastFire, h.ConsecutiveFailures, h.Status, h.LastError = n1, uint32(n2), hunt.RunStatus(s1), s2
			// n3 packs overrun_count with too_aggressive in its lowest bit.
			h.OverrunCount, h.TooAggressive = uint64(n3)>>1, n3&1 == 1
			if ts.Unix() > 0 {
				h.RetryAfter, h.HasRetryAfter = ts, true
			}
		case "request":
			h.RequestedFire, h.HasRequest = n1, true
		case "pause":
			h.Paused, h.PausedBy, h.PauseReason, h.PausedSince = true, s1, s2, now
			if ts.UnixMilli() > 0 {
				h.PausedUntil = ts
			}
		case "backfill":
			snap.Backfills = append(snap.Backfills, Backfill{ID: s1, HuntID: huntID, From: n1, To: n2, Chunk: n3,
				RequestedBy: s2, Requested: ts})
			continue
		}
		states[huntID] = h
	}
	if err := rows.Err(); err != nil {
		return snap, fmt.Errorf("watermark: snapshot: %w", err)
	}
	if snap.Now.IsZero() {
		return snap, errors.New("watermark: snapshot: no clock row")
	}
	for i := range snap.Backfills {
		snap.Backfills[i].Progress = keys[snap.Backfills[i].Key()]
	}
	sort.Slice(snap.Backfills, func(i, j int) bool {
		a, b := snap.Backfills[i], snap.Backfills[j]
		if !a.Requested.Equal(b.Requested) {
			return a.Requested.Before(b.Requested)
		}
		return a.ID < b.ID
	})
	return snap, nil
}

// rowsForm builds a subquery with columns hunt_id and cols: the newest row per hunt_id of a
// table by version (an ORDER BY list; the table's ReplacingMergeTree version leads it).
type rowsForm func(database, table string, cols []string, version string) string

// snapshotForm is how a snapshot picks the newest rows: one form for hunt_lease, one for the
// other ReplacingMergeTree tables. BenchmarkSnapshot (bench_test.go) compares alternatives.
type snapshotForm struct{ lease, other rowsForm }

// snapshotNewest is the form Snapshot uses. BenchmarkSnapshot (10,000 hunts, 5 unmerged
// parts, chDB, interleaved, median): FINAL 78 ms, FINAL with LIMIT 1 BY for the lease 73 ms,
// LIMIT 1 BY 86 ms, argMax 96 ms. FINAL alone breaks ties on the version by insert order;
// LIMIT 1 BY on (claimed, claim_id) keeps the lease order every claimer uses, at no cost.
var snapshotNewest = snapshotForm{lease: limitByRows, other: finalRows}

// finalRows reads the table with FINAL: the newest row by its version column.
func finalRows(database, table string, cols []string, _ string) string {
	return "SELECT hunt_id, " + strings.Join(cols, ", ") + " FROM " + schema.QuoteIdent(database) + "." + table + " FINAL"
}

// limitByRows keeps the first row per hunt_id in version order.
func limitByRows(database, table string, cols []string, version string) string {
	return "SELECT hunt_id, " + strings.Join(cols, ", ") + " FROM " + schema.QuoteIdent(database) + "." + table +
		" ORDER BY hunt_id, " + version + " LIMIT 1 BY hunt_id"
}

// snapshotSQL is one statement of tagged rows: (kind, hunt_id, n1, n2, n3, s1, s2, id, ts, now).
func snapshotSQL(database string, how snapshotForm) string {
	// Commits only raise a hunt's watermark, so its newest is the greatest (the table's
	// projection answers this without reading every commit).
	wm := "SELECT hunt_id, max(watermark) AS watermark FROM " + schema.QuoteIdent(database) + "." + schema.TableWatermark + " GROUP BY hunt_id"
	ls := how.lease(database, schema.TableLease, []string{"fire", "owner", "claim_id", "claimed", "lease_until"}, "claimed DESC, claim_id DESC")
	st := how.other(database, schema.TableState, []string{"status", "consecutive_failures", "last_error", "last_fire", "updated",
		"retry_after", "overrun_count", "too_aggressive"}, "updated DESC")
	// A pause row is read even when its paused_until has passed: the predicate decides at
	// the snapshot's now, and status shows the pause that ran out.
	pz := how.other(database, schema.TablePause, []string{"paused", "paused_until", "reason", "paused_by", "updated"}, "updated DESC")
	const nilID = "toUUID('00000000-0000-0000-0000-000000000000')"
	const zeroTS = "toDateTime64(0, 6, 'UTC')"
	return `SELECT 'now' AS kind, '' AS hunt_id, toInt64(0) AS n1, toInt64(0) AS n2, toInt64(0) AS n3, '' AS s1, '' AS s2,
       ` + nilID + ` AS id, ` + zeroTS + ` AS ts, now64(6) AS now
UNION ALL
SELECT 'watermark', hunt_id, toInt64(watermark), 0, 0, '', '', ` + nilID + `, ` + zeroTS + `, ` + zeroTS + `
FROM (` + wm + `)
UNION ALL
SELECT 'lease', hunt_id, toInt64(fire), 0, 0, owner, '', claim_id, toDateTime64(lease_until, 6, 'UTC'), ` + zeroTS + `
FROM (` + ls + `)
UNION ALL
SELECT 'state', hunt_id, toInt64(last_fire), toInt64(consecutive_failures),
       toInt64(overrun_count) * 2 + toInt64(too_aggressive), toString(status), last_error, ` + nilID + `,
       toDateTime64(retry_after, 6, 'UTC'), ` + zeroTS + `
FROM (` + st + `)
UNION ALL
SELECT 'request', r.hunt_id, toInt64(max(r.requested_fire)), 0, 0, '', '', ` + nilID + `, ` + zeroTS + `, ` + zeroTS + `
FROM ` + schema.QuoteIdent(database) + `.hunt_request AS r
LEFT JOIN (` + wm + `) AS w ON w.hunt_id = r.hunt_id
WHERE r.requested_fire > w.watermark
GROUP BY r.hunt_id
UNION ALL
SELECT 'pause', hunt_id, 0, 0, 0, paused_by, reason, ` + nilID + `, toDateTime64(paused_until, 6, 'UTC'),
       toDateTime64(updated, 6, 'UTC')
FROM (` + pz + `)
WHERE paused = 1
UNION ALL
SELECT 'backfill', b.hunt_id, toInt64(b.range_start), toInt64(b.range_end), toInt64(b.chunk_seconds), b.backfill_id,
       b.requested_by, ` + nilID + `, toDateTime64(b.requested, 6, 'UTC'), ` + zeroTS + `
FROM (SELECT * FROM ` + schema.QuoteIdent(database) + `.` + schema.TableBackfill + ` FINAL) AS b
LEFT JOIN (` + wm + `) AS w ON w.hunt_id = concat(b.hunt_id, ` + "'" + schema.BackfillInfix + "'" + `, b.backfill_id)
WHERE b.state = '` + BackfillActive + `' AND toInt64(w.watermark) < toInt64(b.range_end)`
}

// Advance commits run with a compare-and-set: one row lands in hunt_watermark, moving the
// hunt's watermark to run.WindowEnd, only if, when the statement runs,
//
//   - the newest lease of the hunt is l's claim, for l's fire, and lives longer than the
//     statement may run (CommitBound, also its max_execution_time);
//   - the newest watermark is still where the run's window (or its recorded gap) starts —
//     or there is still none, for a first run (l.HasWatermark is what the claim verified) —
//     and below the new one; and
//   - the hunt has no commit row of this run yet.
//
// So a run commits only the window it actually read, from where progress stood when it won the
// claim, and no two commits of a hunt overlap, whatever pauses, late answers or expiries came
// between. The row is also the run's audit record (hunt_runs reads it), so a commit and its
// record cannot be separated.
//
// Whatever the insert answers, Advance reads back by run id before deciding: nil when the row
// is there (an error from an insert that landed is a success), ErrFenced when the insert
// answered and wrote nothing, a refusal (lease.Refused) when the server did not execute it,
// ErrUnknown when neither the insert nor the read-back settled it. A retry after a lost answer
// inserts nothing (the compare no longer holds, and the run has a row) and finds the row of the
// first attempt; its deduplication token is the run id, so a retry routed to another replica
// is dropped by the block deduplication too.
func (s *Store) Advance(ctx context.Context, l lease.Lease, run Run) error {
	watermark := run.WindowEnd
	q := `INSERT INTO ` + s.table(schema.TableWatermark) + ` (hunt_id, watermark, claim_id, updated,
    run_id, run_owner, run_start, run_rows, run_started, gap_start, gap_end, findings_dropped, kind, interval_seconds, revision)
SELECT l.hunt_id, toDateTime({wm:Int64}, 'UTC'), l.claim_id, now64(6),
    toUUID({run:String}), {owner:String}, toDateTime({ws:Int64}, 'UTC'), {rows:UInt64},
    fromUnixTimestamp64Micro({started:Int64}, 'UTC'), toDateTime({gs:Int64}, 'UTC'), toDateTime({ge:Int64}, 'UTC'),
    {dropped:UInt64}, {kind:String}, {interval:UInt32}, {revision:String}
FROM (` + lease.NewestLeaseSQL(s.database, "ids") + `) AS l
LEFT JOIN (` + lease.NewestWatermarkSQL(s.database, "ids") + `) AS w ON w.hunt_id = l.hunt_id
WHERE l.claim_id = toUUID({claim:String}) AND toInt64(l.fire) = {fire:Int64}
  AND l.until > now64(3) + toIntervalMillisecond({bound_ms:Int64})
  AND (w.hunt_id != '') = {has_prev:Bool} AND (NOT {has_prev:Bool} OR toInt64(w.watermark) = {prev:Int64})
  AND {wm:Int64} > {prev:Int64}
  AND toUUID({run:String}) NOT IN (SELECT run_id FROM ` + s.table(schema.TableWatermark) + ` WHERE hunt_id = {h:String})`
	kind := cmp.Or(run.Kind, hunt.KindScheduled)
	// The run continues from where its window (or the gap before it) starts; that must still
	// be the newest watermark, so the committed windows of a hunt tile.
	prev := run.WindowStart
	if run.GapEnd > run.GapStart {
		prev = run.GapStart
	}
	bound := CommitBound(ctx)
	wctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"async_insert":               0,
		"join_use_nulls":             0,
		"insert_deduplication_token": "commit:" + run.RunID.String(),
		"max_execution_time":         bound.Seconds(),
	}))
	err := s.conn.Exec(wctx, q,
		clickhouse.Named("ids", []string{l.HuntID}),
		clickhouse.Named("h", l.HuntID),
		clickhouse.Named("bound_ms", bound.Milliseconds()),
		clickhouse.Named("wm", watermark),
		clickhouse.Named("claim", l.ClaimID.String()),
		clickhouse.Named("fire", l.Fire),
		clickhouse.Named("has_prev", l.HasWatermark),
		clickhouse.Named("prev", prev),
		clickhouse.Named("run", run.RunID.String()),
		clickhouse.Named("owner", run.Owner),
		clickhouse.Named("ws", run.WindowStart),
		clickhouse.Named("rows", run.RowsWritten),
		clickhouse.Named("started", run.Started.UnixMicro()),
		clickhouse.Named("gs", run.GapStart),
		clickhouse.Named("ge", run.GapEnd),
		clickhouse.Named("dropped", run.FindingsDropped),
		clickhouse.Named("kind", kind.String()),
		clickhouse.Named("interval", run.Interval),
		clickhouse.Named("revision", run.Revision),
	)
	if err != nil && !lease.Transient(err) {
		return fmt.Errorf("watermark: advance %s to %d: %w", l.HuntID, watermark, err)
	}
	// Whatever the insert answered, its row decides: an error may come from a statement that
	// landed (a quorum timeout after the local write, a lost answer), and a success must be
	// checked against the fence.
	ok, rerr := s.Committed(ctx, l.HuntID, run.RunID)
	switch {
	case ok:
		return nil
	case rerr != nil && err != nil:
		return fmt.Errorf("%w: advance %s to %d: %w (read-back: %v)", ErrUnknown, l.HuntID, watermark, err, rerr)
	case rerr != nil:
		return fmt.Errorf("%w: advance %s read-back: %w", ErrUnknown, l.HuntID, rerr)
	case err != nil && lease.Refused(err):
		return fmt.Errorf("watermark: advance %s to %d: refused before executing: %w", l.HuntID, watermark, err)
	case err != nil:
		return fmt.Errorf("%w: advance %s to %d: not visible after: %w", ErrUnknown, l.HuntID, watermark, err)
	}
	return fmt.Errorf("%w: hunt %s fire %d claim %s: not committed (lease no longer ours or too close to its end, or the watermark moved from %d)",
		ErrFenced, l.HuntID, l.Fire, l.ClaimID, prev)
}

// ErrUnknown marks a commit whose outcome is not known yet: the insert failed in a way that
// may have applied it (or may still apply it), and its read-back did not settle it. Retrying
// Advance with the same run is safe once the first attempt can no longer be running
// (CommitBound after its send): the retry finds the row, or is the only one to write it.
var ErrUnknown = errors.New("watermark: commit outcome unknown")

// DefaultCommitBound is the server-side execution bound of a commit whose context has no
// deadline: the runner's longest (half its 10 s attempt timeout).
const DefaultCommitBound = 5 * time.Second

// CommitBound is how long Advance lets its insert run on the server (max_execution_time):
// half of what is left of ctx's deadline (the other half is the read-back's), else
// DefaultCommitBound. The compare-and-set also requires
// the lease to outlive it on the server's clock, so a commit that passes its fence lands
// before the lease ends and can never land beside the next holder's (docs/claim-protocol.md).
func CommitBound(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl)/2, time.Millisecond)
	}
	return DefaultCommitBound
}

// Committed reports whether run committed (its row is in hunt_watermark).
func (s *Store) Committed(ctx context.Context, huntID string, run uuid.UUID) (bool, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM "+s.table(schema.TableWatermark)+
		" WHERE hunt_id = {h:String} AND run_id = toUUID({run:String})",
		clickhouse.Named("h", huntID), clickhouse.Named("run", run.String())).Scan(&n)
	return n > 0, err
}

func (s *Store) table(name string) string {
	return schema.QuoteIdent(s.database) + "." + schema.QuoteIdent(name)
}

// insertCtx sets what every coordination insert carries: synchronous, explicit join defaults,
// and a deduplication
// token derived from the row's content, so a retry routed to another replica after a lost
// answer is dropped by the block deduplication (an identical later write is dropped too, which
// changes nothing).
func insertCtx(ctx context.Context, parts ...any) context.Context {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%v\x00", p)
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"async_insert": 0, "insert_deduplication_token": hex.EncodeToString(h.Sum(nil)[:16]),
		"join_use_nulls": 0})) // a hunt without a previous row reads zeros
}

// RecordRun appends a hunt_run row.
func (s *Store) RecordRun(ctx context.Context, r Run) error {
	switch r.Status {
	case hunt.RunFailed, hunt.RunLost:
	default:
		// Succeeded and gap rows are commits: only Advance writes them, in hunt_watermark.
		return fmt.Errorf("watermark: run status %q is not one of failed, lost (commits go through Advance)", r.Status)
	}
	if r.RunID == uuid.Nil {
		r.RunID = uuid.New()
	}
	r.Kind = cmp.Or(r.Kind, hunt.KindScheduled)
	q := `INSERT INTO ` + s.table(schema.TableRun) + ` (hunt_id, fire, run_id, owner, status, window_start, window_end,
       rows_written, started, finished, error, findings_dropped, kind, revision)
SELECT {h:String}, toDateTime({fire:Int64}, 'UTC'), toUUID({run:String}), {owner:String}, {status:String},
       toDateTime({ws:Int64}, 'UTC'), toDateTime({we:Int64}, 'UTC'), {rows:UInt64},
       fromUnixTimestamp64Micro({started:Int64}, 'UTC'), fromUnixTimestamp64Micro({finished:Int64}, 'UTC'), {err:String},
       {dropped:UInt64}, {kind:String}, {revision:String}`
	// The run id is the deduplication token: a retry of this row on a replicated table after a
	// lost answer is dropped by the block deduplication.
	ictx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"async_insert": 0, "insert_deduplication_token": "run:" + r.RunID.String() + ":" + r.Status.String()}))
	err := s.conn.Exec(ictx, q,
		clickhouse.Named("h", r.HuntID), clickhouse.Named("fire", r.Fire), clickhouse.Named("run", r.RunID.String()),
		clickhouse.Named("owner", r.Owner), clickhouse.Named("status", r.Status.String()),
		clickhouse.Named("ws", r.WindowStart), clickhouse.Named("we", r.WindowEnd), clickhouse.Named("rows", r.RowsWritten),
		clickhouse.Named("started", r.Started.UnixMicro()), clickhouse.Named("finished", r.Finished.UnixMicro()),
		clickhouse.Named("err", boundError(r.Error)), clickhouse.Named("dropped", r.FindingsDropped), clickhouse.Named("kind", r.Kind.String()),
		clickhouse.Named("revision", r.Revision),
	)
	if err != nil {
		return fmt.Errorf("watermark: record run %s fire %d: %w", r.HuntID, r.Fire, err)
	}
	return nil
}

// Recorded reports whether RecordRun's row for r is in hunt_run (looked up by run id and
// status), so a retry after a lost answer does not write it twice.
func (s *Store) Recorded(ctx context.Context, r Run) (bool, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM "+s.table(schema.TableRun)+
		" WHERE hunt_id = {h:String} AND run_id = toUUID({run:String}) AND status = {status:String}",
		clickhouse.Named("h", r.HuntID), clickhouse.Named("run", r.RunID.String()), clickhouse.Named("status", r.Status.String())).Scan(&n)
	return n > 0, err
}

// MaxErrorBytes bounds the error text stored with a run or a hunt's state. Errors can quote a
// whole hunt query (a syntax error does), and statement parameters travel in the request URL,
// which ClickHouse caps (http_max_uri_size, 1 MiB by default).
const MaxErrorBytes = 4096

// boundError cuts s to MaxErrorBytes on a UTF-8 boundary, marking the cut.
func boundError(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	const mark = "… (cut)"
	cut := MaxErrorBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// SetState writes a hunt_state row (updated = server clock).
func (s *Store) SetState(ctx context.Context, st State) error { return s.SetStates(ctx, []State{st}) }

// statesPerInsert bounds the error text of the hunt_state rows one insert carries: its
// parameters travel in the URL, escaped (a quote can take six bytes there), and ClickHouse caps
// the URL at 1 MiB by default.
const statesPerInsert = 32 << 10

// SetStates writes hunt_state rows (updated = the server's clock, the same for every row of an
// insert), in one insert unless their error text is long: then in as few as keep each insert's
// URL well under the server's cap.
func (s *Store) SetStates(ctx context.Context, sts []State) error {
	for len(sts) > 0 {
		n, size := 1, min(len(sts[0].LastError), MaxErrorBytes) // as stored: boundError
		for n < len(sts) && size+min(len(sts[n].LastError), MaxErrorBytes) <= statesPerInsert {
			size += min(len(sts[n].LastError), MaxErrorBytes)
			n++
		}
		if err := s.setStates(ctx, sts[:n]); err != nil {
			return err
		}
		sts = sts[n:]
	}
	return nil
}

// setStates writes hunt_state rows in one insert. The rows travel as array parameters; the
// deduplication token covers them all. Each row is derived from the hunt's newest row (by
// updated) as the statement runs:
//
//   - written only if that row's last_fire is not above the new one: a late write for an
//     older fire (a held statement, a slow pod) never undoes a newer fire's failure or backoff;
//   - consecutive_failures is the previous count plus one for a failure, 0 otherwise;
//   - overrun_count is the previous count, plus one for an overrun of a fire above the
//     previous row's (so each fire's overrun counts once, a retried write included);
//   - retry_after follows from the derived failure count.
//
// A failure written again after a lost answer counts twice (one backoff step more); nothing
// can count less.
func (s *Store) setStates(ctx context.Context, sts []State) error {
	var (
		ids, statuses, errs = make([]string, len(sts)), make([]string, len(sts)), make([]string, len(sts))
		fires, bases, caps  = make([]int64, len(sts)), make([]int64, len(sts)), make([]int64, len(sts))
		overran, aggressive = make([]bool, len(sts)), make([]bool, len(sts))
		token               = []any{"state"}
	)
	for i, st := range sts {
		ids[i], statuses[i], errs[i] = st.HuntID, st.Status.String(), boundError(st.LastError)
		fires[i], bases[i], caps[i] = st.LastFire, st.BackoffBase.Milliseconds(), st.BackoffCap.Milliseconds()
		overran[i], aggressive[i] = st.Overran, st.TooAggressive
		token = append(token, st.HuntID, st.Status.String(), st.LastError, st.LastFire, st.Overran, st.TooAggressive,
			st.BackoffBase, st.BackoffCap)
	}
	q := `INSERT INTO ` + s.table(schema.TableState) + ` (hunt_id, status, consecutive_failures, last_error, last_fire, updated,
    retry_after, overrun_count, too_aggressive)
SELECT b.h, b.status, b.failures, b.err, toDateTime(b.fire, 'UTC'), now64(6),
    if(b.failures > 0 AND b.base > 0,
       now64(3) + toIntervalMillisecond(least(toUInt64(b.base) * bitShiftLeft(toUInt64(1), least(greatest(b.failures, 1) - 1, 40)), toUInt64(b.cap))),
       toDateTime64(0, 3, 'UTC')),
    toUInt64(p.overruns) + if(b.overran AND toInt64(p.last_fire) < b.fire, 1, 0), b.aggressive
FROM (SELECT r.1 AS h, r.2 AS status, r.3 AS err, r.4 AS fire, r.5 AS base, r.6 AS cap, r.7 AS overran, r.8 AS aggressive,
             if(r.2 = '` + hunt.RunFailed.String() + `', toUInt32(p0.failures + 1), toUInt32(0)) AS failures
      FROM (SELECT arrayJoin(arrayZip({h:Array(String)}, {status:Array(String)}, {err:Array(String)}, {fire:Array(Int64)},
                {base_ms:Array(Int64)}, {cap_ms:Array(Int64)}, {overran:Array(Bool)}, {aggressive:Array(Bool)})) AS r) AS z
      LEFT JOIN (` + newestStateSQL(s.database) + `) AS p0 ON p0.hunt_id = z.r.1) AS b
LEFT JOIN (` + newestStateSQL(s.database) + `) AS p ON p.hunt_id = b.h
WHERE toInt64(p.last_fire) <= b.fire`
	args := []any{clickhouse.Named("h", ids), clickhouse.Named("status", statuses), clickhouse.Named("err", errs),
		clickhouse.Named("fire", fires), clickhouse.Named("base_ms", bases), clickhouse.Named("cap_ms", caps),
		clickhouse.Named("overran", overran), clickhouse.Named("aggressive", aggressive)}
	if err := s.conn.Exec(insertCtx(ctx, token...), q, args...); err != nil {
		if len(sts) == 1 {
			return fmt.Errorf("watermark: set state %s: %w", sts[0].HuntID, err)
		}
		return fmt.Errorf("watermark: set state of %d hunts: %w", len(sts), err)
	}
	return nil
}

// newestStateSQL is a subquery of each hunt's newest hunt_state row (by updated, the table's
// version) as hunt_id, failures, last_fire, overruns.
func newestStateSQL(database string) string {
	return `SELECT hunt_id, t.1 AS failures, t.2 AS last_fire, t.3 AS overruns
FROM (SELECT hunt_id, argMax((consecutive_failures, last_fire, overrun_count), updated) AS t
      FROM ` + schema.QuoteIdent(database) + `.` + schema.TableState + ` WHERE hunt_id IN {h:Array(String)} GROUP BY hunt_id)`
}

// Request queues a run-now request for huntID at fire (epoch seconds).
func (s *Store) Request(ctx context.Context, huntID string, fire int64, by string) error {
	if huntID == "" {
		return errors.New("watermark: request: empty hunt id")
	}
	q := `INSERT INTO ` + s.table(schema.TableRequest) + ` (hunt_id, requested_fire, request_id, requested_by, requested)
SELECT {h:String}, toDateTime({fire:Int64}, 'UTC'), generateUUIDv4(), {by:String}, now64(6)`
	err := s.conn.Exec(insertCtx(ctx, "request", huntID, fire, by), q,
		clickhouse.Named("h", huntID), clickhouse.Named("fire", fire), clickhouse.Named("by", by))
	if err != nil {
		return fmt.Errorf("watermark: request %s at %d: %w", huntID, fire, err)
	}
	return nil
}
