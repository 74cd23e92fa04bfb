package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Snapshot is everything the runner needs to plan a tick (Store.Snapshot).
type Snapshot struct {
	Now   time.Time // server clock, read with the rows (Store.Snapshot says how close)
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

// Snapshot reads the server clock and, per hunt, the newest watermark, lease, state and pause
// and the newest pending run-now request, plus the backfills still to run: one named, typed
// statement per row shape (clock, watermarks, leases, states, requests, pauses, backfills),
// sent snapshotConcurrency at a time, so a tick costs two round trips' latency whatever the
// number of hunts.
//
// Consistency: each statement reads the committed rows of its own tables when it runs; the
// statements run at nearly the same moment but not at one instant, and not against one
// snapshot of the database, so a row landing meanwhile may be seen by one statement and not
// another (a commit may be in the watermarks and its lease still held, a lease may look live a
// few milliseconds past its end). Planning stays safe because nothing decided on a snapshot is
// trusted: a fire planned on it is claimed through lease's protocol, whose conditional insert
// re-checks freeness and pause on the server and whose verify read is the authority on the
// lease and on where the run's window starts; a stale snapshot costs a lost claim or a fire
// planned a tick late, never a second run.
func (s *Store) Snapshot(ctx context.Context) (Snapshot, error) {
	return s.snapshot(ctx)
}

// snapshotStatements is how many statements (round trips) a Snapshot sends.
const snapshotStatements = 7

// snapshotConcurrency bounds the snapshot's statements in flight at once: within the driver's
// default idle pool (5), leaving one connection for the renewals that run beside a tick, so a
// tick reuses its connections instead of opening new ones (each costs a handshake and, over
// HTTP, a query of its own).
const snapshotConcurrency = 4

func (s *Store) snapshot(ctx context.Context) (Snapshot, error) {
	ctx = snapshotCtx(ctx)
	var (
		g    errgroup.Group
		now  time.Time
		rows snapshotRows
	)
	g.SetLimit(snapshotConcurrency)
	g.Go(func() (err error) { now, err = s.serverClock(ctx); return err })
	g.Go(func() (err error) {
		rows.wms, err = selectRows[watermarkRow](ctx, s, snapshotWatermarksSQL(s.database, ""))
		return err
	})
	g.Go(func() (err error) {
		rows.leases, err = selectRows[leaseRow](ctx, s, snapshotLeasesSQL(s.database, ""))
		return err
	})
	g.Go(func() (err error) {
		rows.states, err = selectRows[stateRow](ctx, s, snapshotStatesSQL(s.database, ""))
		return err
	})
	s.readControls(ctx, &g, &rows)
	if err := g.Wait(); err != nil {
		return Snapshot{}, fmt.Errorf("store: snapshot: %w", err)
	}
	if now.IsZero() {
		return Snapshot{}, errors.New("store: snapshot: no clock row")
	}
	return rows.assemble(now, nil), nil
}

// SnapshotOf is Snapshot narrowed to the hunts a tick can act on, so that its cost follows
// those hunts rather than every hunt in the database. It reads, in a first round, the server
// clock and the three small tables in full: pauses, pending run-now requests and backfills
// still to run, which hold rows only for hunts an operator paused, requested or backfilled.
// candidates is then called with the server clock and returns the hunts the caller wants read
// (those its own memory says may be due); the second round reads the newest watermark, lease
// and hunt_state rows of those hunts, of every hunt the first round named (paused, requested,
// backfilled) and of the backfills' coordination keys, in batches of at most
// snapshotBatchBytes of ids, each bound as one Array(String) parameter: the tables are keyed by
// hunt_id, so each statement reads only the granules of its hunts.
//
// The result is what Snapshot would give for the hunts in it: Hunts holds an entry for each
// hunt read, rows or none (a hunt with no rows is there with its zero state), and Backfills
// their progress. A hunt absent from Hunts was not read: it is neither paused nor has a
// pending request (both tables were read in full), and its watermark, lease and hunt_state
// rows are whatever the caller last learned, or newer. Consistency is Snapshot's: planning on
// it stays safe because the claim's verify read is the authority.
func (s *Store) SnapshotOf(ctx context.Context, candidates func(now time.Time) []string) (Snapshot, error) {
	ctx = snapshotCtx(ctx)
	var (
		g    errgroup.Group
		now  time.Time
		rows snapshotRows
	)
	g.SetLimit(snapshotConcurrency)
	g.Go(func() (err error) { now, err = s.serverClock(ctx); return err })
	s.readControls(ctx, &g, &rows)
	if err := g.Wait(); err != nil {
		return Snapshot{}, fmt.Errorf("store: snapshot: %w", err)
	}
	if now.IsZero() {
		return Snapshot{}, errors.New("store: snapshot: no clock row")
	}
	ids := candidates(now)
	for _, r := range rows.requests {
		ids = append(ids, r.HuntID)
	}
	for _, r := range rows.pauses {
		ids = append(ids, r.HuntID)
	}
	for _, r := range rows.backfills {
		ids = append(ids, r.HuntID, schema.BackfillKey(r.HuntID, r.ID))
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var mu sync.Mutex
	for _, batch := range idBatches(ids, snapshotBatchBytes) {
		param := clickhouse.Named("ids", batch)
		gather(&g, &mu, &rows.wms, func() ([]watermarkRow, error) {
			return selectRows[watermarkRow](ctx, s, snapshotWatermarksSQL(s.database, "ids"), param)
		})
		gather(&g, &mu, &rows.leases, func() ([]leaseRow, error) {
			return selectRows[leaseRow](ctx, s, snapshotLeasesSQL(s.database, "ids"), param)
		})
		gather(&g, &mu, &rows.states, func() ([]stateRow, error) {
			return selectRows[stateRow](ctx, s, snapshotStatesSQL(s.database, "ids"), param)
		})
	}
	if err := g.Wait(); err != nil {
		return Snapshot{}, fmt.Errorf("store: snapshot: %w", err)
	}
	return rows.assemble(now, ids), nil
}

// snapshotBatchBytes bounds the hunt ids one statement of SnapshotOf binds: parameters travel
// in the request's URL over HTTP, which ClickHouse caps at 1 MiB by default; a quarter of it
// leaves room for escaping.
const snapshotBatchBytes = 256 << 10

// idBatches cuts ids into runs of at most limit bytes (each id counted with its quoting and
// separator), in order; an empty ids gives no batch.
func idBatches(ids []string, limit int) [][]string {
	var out [][]string
	for start := 0; start < len(ids); {
		end, size := start+1, len(ids[start])+8
		for end < len(ids) && size+len(ids[end])+8 <= limit {
			size += len(ids[end]) + 8
			end++
		}
		out = append(out, ids[start:end])
		start = end
	}
	return out
}

// snapshotCtx is ctx with the settings the snapshot's reads rely on: an unmatched LEFT JOIN
// row reads as zeros (no watermark: epoch 0), which the pending request and backfill reads
// rely on.
func snapshotCtx(ctx context.Context) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
}

// snapshotRows are the rows of a snapshot's statements, before they are assembled.
type snapshotRows struct {
	wms       []watermarkRow
	leases    []leaseRow
	states    []stateRow
	requests  []requestRow
	pauses    []pauseRow
	backfills []backfillRow
}

// readControls adds to g the reads of the small tables, read in full by every snapshot:
// pending requests, pauses and backfills still to run.
func (s *Store) readControls(ctx context.Context, g *errgroup.Group, rows *snapshotRows) {
	g.Go(func() (err error) {
		rows.requests, err = selectRows[requestRow](ctx, s, snapshotRequestsSQL(s.database))
		return err
	})
	g.Go(func() (err error) {
		rows.pauses, err = selectRows[pauseRow](ctx, s, snapshotPausesSQL(s.database))
		return err
	})
	g.Go(func() (err error) {
		rows.backfills, err = selectRows[backfillRow](ctx, s, snapshotBackfillsSQL(s.database))
		return err
	})
}

// assemble builds the snapshot at now from rows; read lists hunts that were read (each gets an
// entry, rows or none), nil when every hunt was.
func (rows snapshotRows) assemble(now time.Time, read []string) Snapshot {
	snap := Snapshot{Now: now, Hunts: make(map[string]HuntState, len(read))}
	keys := map[string]HuntState{} // backfill and delivery coordination keys
	isKey := func(id string) bool {
		return strings.Contains(id, schema.BackfillInfix) || strings.Contains(id, DeliveryInfix)
	}
	for _, id := range read {
		if !isKey(id) {
			snap.Hunts[id] = HuntState{}
		}
	}
	// update applies f to the state of hunt, a hunt id or a coordination key (a backfill's or a
	// delivery queue's), which is never a hunt.
	update := func(hunt string, f func(*HuntState)) {
		states := snap.Hunts
		if isKey(hunt) {
			states = keys
		}
		h := states[hunt]
		f(&h)
		states[hunt] = h
	}
	for _, r := range rows.wms {
		update(r.HuntID, func(h *HuntState) { h.Watermark, h.HasWatermark = r.Watermark, true })
	}
	for _, r := range rows.leases {
		update(r.HuntID, func(h *HuntState) {
			h.LeaseFire, h.LeaseOwner, h.LeaseClaimID, h.LeaseUntil, h.HasLease = r.Fire, r.Owner, r.ClaimID, r.Until, true
		})
	}
	for _, r := range rows.states {
		update(r.HuntID, func(h *HuntState) {
			h.LastFire, h.ConsecutiveFailures, h.Status, h.LastError = r.LastFire, r.ConsecutiveFailures, hunt.RunStatus(r.Status), r.LastError
			h.OverrunCount, h.TooAggressive = r.OverrunCount, r.TooAggressive == 1
			if r.RetryAfter.Unix() > 0 {
				h.RetryAfter, h.HasRetryAfter = r.RetryAfter, true
			}
		})
	}
	for _, r := range rows.requests {
		update(r.HuntID, func(h *HuntState) { h.RequestedFire, h.HasRequest = r.RequestedFire, true })
	}
	for _, r := range rows.pauses {
		update(r.HuntID, func(h *HuntState) {
			h.Paused, h.PausedBy, h.PauseReason, h.PausedSince = true, r.PausedBy, r.Reason, r.Updated
			if r.PausedUntil.UnixMilli() > 0 {
				h.PausedUntil = r.PausedUntil
			}
		})
	}
	for _, r := range rows.backfills {
		snap.Backfills = append(snap.Backfills, Backfill{ID: r.ID, HuntID: r.HuntID, From: r.From, To: r.To, Chunk: int64(r.Chunk),
			RequestedBy: r.RequestedBy, Requested: r.Requested})
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
	return snap
}

// gather runs read in g and appends what it returns to dst under mu: the batches of one row
// shape land in one slice.
func gather[T any](g *errgroup.Group, mu *sync.Mutex, dst *[]T, read func() ([]T, error)) {
	g.Go(func() error {
		got, err := read()
		if err != nil {
			return err
		}
		mu.Lock()
		*dst = append(*dst, got...)
		mu.Unlock()
		return nil
	})
}

// serverClock reads the server's clock: every lease, backoff and pause comparison of a plan
// uses it, never the process clock.
func (s *Store) serverClock(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.conn.QueryRow(ctx, "SELECT now64(6)").Scan(&now)
	return now, err
}

// selectRows runs q and scans its rows into T by column name (the ch tags).
func selectRows[T any](ctx context.Context, s *Store, q string, args ...any) ([]T, error) {
	var out []T
	if err := s.conn.Select(ctx, &out, q, args...); err != nil {
		return nil, err
	}
	return out, nil
}

// The snapshot's statements, each named for the rows it returns, with its row type.

// watermarkRow is a hunt's newest watermark (snapshotWatermarksSQL).
type watermarkRow struct {
	HuntID    string `ch:"hunt_id"`
	Watermark int64  `ch:"watermark"`
}

func snapshotWatermarksSQL(database, param string) string {
	return `SELECT hunt_id, toInt64(watermark) AS watermark FROM (` + newestWatermarkSQL(database, param) + `)`
}

// leaseRow is a hunt's newest lease row (snapshotLeasesSQL).
type leaseRow struct {
	HuntID  string    `ch:"hunt_id"`
	Fire    int64     `ch:"fire"`
	Owner   string    `ch:"owner"`
	ClaimID uuid.UUID `ch:"claim_id"`
	Until   time.Time `ch:"until"`
}

func snapshotLeasesSQL(database, param string) string {
	return `SELECT hunt_id, toInt64(fire) AS fire, owner, claim_id, until FROM (` + NewestLeaseSQL(database, param) + `)`
}

// stateRow is a hunt's newest hunt_state row (snapshotStatesSQL).
type stateRow struct {
	HuntID              string    `ch:"hunt_id"`
	Status              string    `ch:"status"`
	ConsecutiveFailures uint32    `ch:"consecutive_failures"`
	LastError           string    `ch:"last_error"`
	LastFire            int64     `ch:"last_fire"`
	RetryAfter          time.Time `ch:"retry_after"`
	OverrunCount        uint64    `ch:"overrun_count"`
	TooAggressive       uint8     `ch:"too_aggressive"`
}

func snapshotStatesSQL(database, param string) string {
	return `SELECT hunt_id, toString(status) AS status, consecutive_failures, last_error, toInt64(last_fire) AS last_fire,
       retry_after, overrun_count, too_aggressive
FROM (` + newestStateSQL(database, param) + `)`
}

// requestRow is a hunt's newest pending run-now request (snapshotRequestsSQL).
type requestRow struct {
	HuntID        string `ch:"hunt_id"`
	RequestedFire int64  `ch:"requested_fire"`
}

func snapshotRequestsSQL(database string) string {
	return `SELECT hunt_id, toInt64(requested_fire) AS requested_fire FROM (` + pendingRequestSQL(database) + `)`
}

// pauseRow is a hunt's newest hunt_pause row when it pauses the hunt (snapshotPausesSQL). It
// is read even when its paused_until has passed: the predicate decides at the snapshot's now,
// and status shows the pause that ran out.
type pauseRow struct {
	HuntID      string    `ch:"hunt_id"`
	PausedUntil time.Time `ch:"paused_until"`
	Reason      string    `ch:"reason"`
	PausedBy    string    `ch:"paused_by"`
	Updated     time.Time `ch:"updated"`
}

func snapshotPausesSQL(database string) string {
	return `SELECT hunt_id, paused_until, reason, paused_by, updated FROM (` + newestPauseSQL(database) + `) WHERE paused = 1`
}

// backfillRow is a backfill still to run (snapshotBackfillsSQL): active and short of its end.
type backfillRow struct {
	ID          string    `ch:"backfill_id"`
	HuntID      string    `ch:"hunt_id"`
	From        int64     `ch:"range_start"`
	To          int64     `ch:"range_end"`
	Chunk       uint32    `ch:"chunk_seconds"`
	RequestedBy string    `ch:"requested_by"`
	Requested   time.Time `ch:"requested"`
}

func snapshotBackfillsSQL(database string) string {
	// Only the backfills' own keys' watermarks are read, not every hunt's.
	keys := `(SELECT concat(hunt_id, '` + schema.BackfillInfix + `', backfill_id) FROM ` + qualified(database, schema.TableBackfill) + `)`
	return `SELECT b.backfill_id AS backfill_id, b.hunt_id AS hunt_id, toInt64(b.range_start) AS range_start,
       toInt64(b.range_end) AS range_end, b.chunk_seconds AS chunk_seconds, b.requested_by AS requested_by, b.requested AS requested
FROM (SELECT * FROM ` + qualified(database, schema.TableBackfill) + ` FINAL) AS b
LEFT JOIN (` + newestWatermarkWhereSQL(database, huntsIn(keys)) + `) AS w ON w.hunt_id = concat(b.hunt_id, '` + schema.BackfillInfix + `', b.backfill_id)
WHERE b.state = '` + BackfillActive + `' AND toInt64(w.watermark) < toInt64(b.range_end)`
}
