package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Backfill states (hunt_backfill.state). A backfill is finished when its key's watermark
// reaches its range's end; that is read, never written.
const (
	BackfillActive    = "active"
	BackfillCancelled = "cancelled"
)

// Pause is a pause request: until Until when set, else for For when set, else until resumed.
type Pause struct {
	HuntID string
	For    time.Duration // from the server's now
	Until  time.Time
	Reason string
	By     string
}

// Pause writes a pause row for p.HuntID (the server's clock stamps it and, for For, its end).
// Runners stop claiming the hunt at their next snapshot; a run in flight finishes.
func (s *Store) Pause(ctx context.Context, p Pause) error {
	if p.HuntID == "" {
		return errors.New("watermark: pause: empty hunt id")
	}
	if p.For < 0 || (p.For > 0 && !p.Until.IsZero()) {
		return errors.New("watermark: pause: give a positive For or an Until, not both")
	}
	until := int64(0)
	if !p.Until.IsZero() {
		until = p.Until.UnixMilli()
	}
	q := `INSERT INTO ` + s.table(schema.TablePause) + ` (hunt_id, paused, paused_until, reason, paused_by, updated)
SELECT {h:String}, 1, if({for_ms:Int64} > 0, now64(3) + toIntervalMillisecond({for_ms:Int64}),
       fromUnixTimestamp64Milli({until_ms:Int64}, 'UTC')), {reason:String}, {by:String}, now64(6)`
	// Each pause is a new write: a token from its content would drop a pause repeated after a
	// resume (the same hunt, reason and length) as a duplicate of the first.
	err := s.conn.Exec(insertCtx(ctx, "pause", uuid.NewString()), q, clickhouse.Named("h", p.HuntID), clickhouse.Named("for_ms", p.For.Milliseconds()),
		clickhouse.Named("until_ms", until), clickhouse.Named("reason", p.Reason), clickhouse.Named("by", p.By))
	if err != nil {
		return fmt.Errorf("watermark: pause %s: %w", p.HuntID, err)
	}
	return nil
}

// Resume writes a resume row for huntID: it is due again from the next snapshot, and continues
// from its watermark within max_catchup (older fires are recorded as a gap by the next run).
func (s *Store) Resume(ctx context.Context, huntID, by string) error {
	if huntID == "" {
		return errors.New("watermark: resume: empty hunt id")
	}
	q := `INSERT INTO ` + s.table(schema.TablePause) + ` (hunt_id, paused, paused_until, reason, paused_by, updated)
SELECT {h:String}, 0, toDateTime64(0, 3, 'UTC'), '', {by:String}, now64(6)`
	if err := s.conn.Exec(insertCtx(ctx, "resume", uuid.NewString()), q, clickhouse.Named("h", huntID), clickhouse.Named("by", by)); err != nil {
		return fmt.Errorf("watermark: resume %s: %w", huntID, err)
	}
	return nil
}

// BackfillRequest asks for [From, To) of HuntID to be run again in chunks of Chunk seconds.
type BackfillRequest struct {
	HuntID   string
	From, To int64
	Chunk    int64
	By       string
}

// NewBackfillID is a short random id (12 hex digits): typed by operators, unique in practice.
func NewBackfillID() string { return strings.ReplaceAll(uuid.NewString(), "-", "")[:12] }

// RequestBackfill records an active backfill and returns its id.
func (s *Store) RequestBackfill(ctx context.Context, r BackfillRequest) (string, error) {
	switch {
	case r.HuntID == "" || strings.Contains(r.HuntID, "#"):
		return "", fmt.Errorf("watermark: backfill: invalid hunt id %q", r.HuntID)
	case r.To <= r.From:
		return "", fmt.Errorf("watermark: backfill %s: empty range [%d, %d)", r.HuntID, r.From, r.To)
	case r.Chunk <= 0 || r.Chunk > 1<<31:
		return "", fmt.Errorf("watermark: backfill %s: chunk %ds out of range", r.HuntID, r.Chunk)
	}
	id := NewBackfillID()
	q := `INSERT INTO ` + s.table(schema.TableBackfill) + ` (backfill_id, hunt_id, range_start, range_end, chunk_seconds,
    state, requested_by, requested, updated)
SELECT {id:String}, {h:String}, toDateTime({from:Int64}, 'UTC'), toDateTime({to:Int64}, 'UTC'), {chunk:UInt32},
    {state:String}, {by:String}, now64(6), now64(6)`
	err := s.conn.Exec(insertCtx(ctx, "backfill", id), q, clickhouse.Named("id", id), clickhouse.Named("h", r.HuntID),
		clickhouse.Named("from", r.From), clickhouse.Named("to", r.To), clickhouse.Named("chunk", uint32(r.Chunk)),
		clickhouse.Named("state", BackfillActive), clickhouse.Named("by", r.By))
	if err != nil {
		return "", fmt.Errorf("watermark: backfill %s: %w", r.HuntID, err)
	}
	return id, nil
}

// ErrNoBackfill means no active backfill has the id.
var ErrNoBackfill = errors.New("no active backfill with that id")

// CancelBackfill stops an active backfill: runners claim none of its chunks from their next
// snapshot; a chunk in flight finishes (its commit is under the backfill's own key, so it
// never touches the live watermark). Chunks already committed stay committed.
func (s *Store) CancelBackfill(ctx context.Context, id, by string) error {
	var state string
	// TODO(#24): fold the newest hunt_backfill row (argMax here, FINAL below, in Backfills and
	// in the snapshot) into one newestBackfillSQL beside newest.go's forms. argMax answers a row
	// for an unknown id ('' state: ErrNoBackfill), which a FINAL read does not.
	err := s.conn.QueryRow(ctx, "SELECT argMax(state, updated) FROM "+s.table(schema.TableBackfill)+
		" WHERE backfill_id = {id:String}", clickhouse.Named("id", id)).Scan(&state)
	if err != nil {
		return fmt.Errorf("watermark: cancel backfill %s: %w", id, err)
	}
	if state != BackfillActive {
		return fmt.Errorf("watermark: cancel backfill %s: %w", id, ErrNoBackfill)
	}
	q := `INSERT INTO ` + s.table(schema.TableBackfill) + ` (backfill_id, hunt_id, range_start, range_end, chunk_seconds,
    state, requested_by, requested, updated)
SELECT backfill_id, hunt_id, range_start, range_end, chunk_seconds, {state:String},
    concat(requested_by, ' (cancelled by ', {by:String}, ')'), requested, now64(6)
FROM (SELECT * FROM ` + s.table(schema.TableBackfill) + ` FINAL WHERE backfill_id = {id:String})
WHERE state = {active:String}`
	if err := s.conn.Exec(insertCtx(ctx, "cancel", id), q, clickhouse.Named("id", id), clickhouse.Named("by", by),
		clickhouse.Named("state", BackfillCancelled), clickhouse.Named("active", BackfillActive)); err != nil {
		return fmt.Errorf("watermark: cancel backfill %s: %w", id, err)
	}
	return nil
}

// BackfillInfo is one backfill as the CLI lists it.
type BackfillInfo struct {
	ID, HuntID, State, RequestedBy string
	From, To, Chunk, Done          int64
	Requested                      time.Time
}

// Backfills lists the backfills of huntID (all hunts when empty), newest request first, with
// how far each got (Done: the chunks cover [From, Done)).
func (s *Store) Backfills(ctx context.Context, huntID string) ([]BackfillInfo, error) {
	q := `SELECT b.backfill_id, b.hunt_id, toString(b.state), b.requested_by, toInt64(b.range_start), toInt64(b.range_end),
    toInt64(b.chunk_seconds), if(w.hunt_id = '', toInt64(b.range_start), greatest(toInt64(b.range_start), w.wm)), b.requested
FROM (SELECT * FROM ` + s.table(schema.TableBackfill) + ` FINAL WHERE {h:String} = '' OR hunt_id = {h:String}) AS b
LEFT JOIN (SELECT hunt_id, toInt64(max(watermark)) AS wm FROM ` + s.table(schema.TableWatermark) + `
    WHERE position(hunt_id, {infix:String}) > 0 GROUP BY hunt_id) AS w
  ON w.hunt_id = concat(b.hunt_id, {infix:String}, b.backfill_id)
ORDER BY b.requested DESC, b.backfill_id`
	// TODO(#24): fold the key's watermark with newestWatermarkSQL (newest.go) once it can be
	// narrowed by the backfill infix as here.
	qctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	rows, err := s.conn.Query(qctx, q, clickhouse.Named("h", huntID), clickhouse.Named("infix", schema.BackfillInfix))
	if err != nil {
		return nil, fmt.Errorf("watermark: list backfills: %w", err)
	}
	defer rows.Close()
	var out []BackfillInfo
	for rows.Next() {
		var b BackfillInfo
		if err := rows.Scan(&b.ID, &b.HuntID, &b.State, &b.RequestedBy, &b.From, &b.To, &b.Chunk, &b.Done, &b.Requested); err != nil {
			return nil, fmt.Errorf("watermark: list backfills: %w", err)
		}
		b.Done = min(b.Done, b.To)
		out = append(out, b)
	}
	return out, rows.Err()
}

// Gaps returns the ranges [start, end) huntID's live runs skipped (hunt_runs rows with status
// gap), oldest first.
func (s *Store) Gaps(ctx context.Context, huntID string) ([][2]int64, error) {
	rows, err := s.conn.Query(ctx, "SELECT toInt64(window_start), toInt64(window_end) FROM "+s.table(schema.ViewRuns)+
		" WHERE hunt_id = {h:String} AND status = 'gap' AND kind != 'backfill' ORDER BY window_start",
		clickhouse.Named("h", huntID))
	if err != nil {
		return nil, fmt.Errorf("watermark: read gaps of %s: %w", huntID, err)
	}
	defer rows.Close()
	var out [][2]int64
	for rows.Next() {
		var g [2]int64
		if err := rows.Scan(&g[0], &g[1]); err != nil {
			return nil, fmt.Errorf("watermark: read gaps of %s: %w", huntID, err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}
