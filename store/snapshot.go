package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
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
	snap := Snapshot{Hunts: map[string]HuntState{}}
	// An unmatched LEFT JOIN row reads as zeros (no watermark: epoch 0), which the pending
	// request and backfill reads rely on.
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	var (
		g         errgroup.Group
		wms       []watermarkRow
		leases    []leaseRow
		states    []stateRow
		requests  []requestRow
		pauses    []pauseRow
		backfills []backfillRow
	)
	g.SetLimit(snapshotConcurrency)
	g.Go(func() (err error) { snap.Now, err = s.serverClock(ctx); return err })
	g.Go(func() (err error) {
		wms, err = selectRows[watermarkRow](ctx, s, snapshotWatermarksSQL(s.database))
		return err
	})
	g.Go(func() (err error) {
		leases, err = selectRows[leaseRow](ctx, s, snapshotLeasesSQL(s.database))
		return err
	})
	g.Go(func() (err error) {
		states, err = selectRows[stateRow](ctx, s, snapshotStatesSQL(s.database))
		return err
	})
	g.Go(func() (err error) {
		requests, err = selectRows[requestRow](ctx, s, snapshotRequestsSQL(s.database))
		return err
	})
	g.Go(func() (err error) {
		pauses, err = selectRows[pauseRow](ctx, s, snapshotPausesSQL(s.database))
		return err
	})
	g.Go(func() (err error) {
		backfills, err = selectRows[backfillRow](ctx, s, snapshotBackfillsSQL(s.database))
		return err
	})
	if err := g.Wait(); err != nil {
		return snap, fmt.Errorf("store: snapshot: %w", err)
	}
	if snap.Now.IsZero() {
		return snap, errors.New("store: snapshot: no clock row")
	}
	keys := map[string]HuntState{} // backfill and delivery coordination keys
	// update applies f to the state of hunt, a hunt id or a coordination key (a backfill's or a
	// delivery queue's), which is never a hunt.
	update := func(hunt string, f func(*HuntState)) {
		states := snap.Hunts
		if strings.Contains(hunt, schema.BackfillInfix) || strings.Contains(hunt, DeliveryInfix) {
			states = keys
		}
		h := states[hunt]
		f(&h)
		states[hunt] = h
	}
	for _, r := range wms {
		update(r.HuntID, func(h *HuntState) { h.Watermark, h.HasWatermark = r.Watermark, true })
	}
	for _, r := range leases {
		update(r.HuntID, func(h *HuntState) {
			h.LeaseFire, h.LeaseOwner, h.LeaseClaimID, h.LeaseUntil, h.HasLease = r.Fire, r.Owner, r.ClaimID, r.Until, true
		})
	}
	for _, r := range states {
		update(r.HuntID, func(h *HuntState) {
			h.LastFire, h.ConsecutiveFailures, h.Status, h.LastError = r.LastFire, r.ConsecutiveFailures, hunt.RunStatus(r.Status), r.LastError
			h.OverrunCount, h.TooAggressive = r.OverrunCount, r.TooAggressive == 1
			if r.RetryAfter.Unix() > 0 {
				h.RetryAfter, h.HasRetryAfter = r.RetryAfter, true
			}
		})
	}
	for _, r := range requests {
		update(r.HuntID, func(h *HuntState) { h.RequestedFire, h.HasRequest = r.RequestedFire, true })
	}
	for _, r := range pauses {
		update(r.HuntID, func(h *HuntState) {
			h.Paused, h.PausedBy, h.PauseReason, h.PausedSince = true, r.PausedBy, r.Reason, r.Updated
			if r.PausedUntil.UnixMilli() > 0 {
				h.PausedUntil = r.PausedUntil
			}
		})
	}
	for _, r := range backfills {
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
	return snap, nil
}

// serverClock reads the server's clock: every lease, backoff and pause comparison of a plan
// uses it, never the process clock.
func (s *Store) serverClock(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.conn.QueryRow(ctx, "SELECT now64(6)").Scan(&now)
	return now, err
}

// selectRows runs q and scans its rows into T by column name (the ch tags).
func selectRows[T any](ctx context.Context, s *Store, q string) ([]T, error) {
	var out []T
	if err := s.conn.Select(ctx, &out, q); err != nil {
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

func snapshotWatermarksSQL(database string) string {
	return `SELECT hunt_id, toInt64(watermark) AS watermark FROM (` + newestWatermarkSQL(database, "") + `)`
}

// leaseRow is a hunt's newest lease row (snapshotLeasesSQL).
type leaseRow struct {
	HuntID  string    `ch:"hunt_id"`
	Fire    int64     `ch:"fire"`
	Owner   string    `ch:"owner"`
	ClaimID uuid.UUID `ch:"claim_id"`
	Until   time.Time `ch:"until"`
}

func snapshotLeasesSQL(database string) string {
	return `SELECT hunt_id, toInt64(fire) AS fire, owner, claim_id, until FROM (` + NewestLeaseSQL(database, "") + `)`
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

func snapshotStatesSQL(database string) string {
	return `SELECT hunt_id, toString(status) AS status, consecutive_failures, last_error, toInt64(last_fire) AS last_fire,
       retry_after, overrun_count, too_aggressive
FROM (` + newestStateSQL(database, "") + `)`
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
	return `SELECT b.backfill_id AS backfill_id, b.hunt_id AS hunt_id, toInt64(b.range_start) AS range_start,
       toInt64(b.range_end) AS range_end, b.chunk_seconds AS chunk_seconds, b.requested_by AS requested_by, b.requested AS requested
FROM (SELECT * FROM ` + qualified(database, schema.TableBackfill) + ` FINAL) AS b
LEFT JOIN (` + newestWatermarkSQL(database, "") + `) AS w ON w.hunt_id = concat(b.hunt_id, '` + schema.BackfillInfix + `', b.backfill_id)
WHERE b.state = '` + BackfillActive + `' AND toInt64(w.watermark) < toInt64(b.range_end)`
}
