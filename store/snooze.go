package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// SnoozeRequest mutes a hunt's notifications: until Until when set, else for For when set,
// else until unsnoozed. Runs and findings go on; only people are left alone.
type SnoozeRequest struct {
	HuntID string
	For    time.Duration // from the server's now
	Until  time.Time
	Reason string
	By     string
}

// Snooze is a hunt's newest snooze row. A zero Until lasts until unsnoozed.
type Snooze struct {
	HuntID  string
	Until   time.Time
	Reason  string
	By      string
	Updated time.Time
}

// LiveAt says whether the snooze mutes at t. The zero Snooze (no row, or an unsnooze) never does.
func (z Snooze) LiveAt(t time.Time) bool {
	return !z.Updated.IsZero() && (z.Until.IsZero() || t.Before(z.Until))
}

// Snooze writes a snooze row for r.HuntID (the server's clock stamps it and, for For, its
// end). Dispatchers mute the hunt's deliveries from their next poll.
func (s *Store) Snooze(ctx context.Context, r SnoozeRequest) error {
	if r.HuntID == "" {
		return errors.New("store: snooze: empty hunt id")
	}
	if r.For < 0 || (r.For > 0 && !r.Until.IsZero()) {
		return errors.New("store: snooze: give a positive For or an Until, not both")
	}
	until := int64(0)
	if !r.Until.IsZero() {
		until = r.Until.UnixMilli()
	}
	q := `INSERT INTO ` + s.table(schema.TableSnooze) + ` (hunt_id, snoozed, snoozed_until, reason, snoozed_by, updated)
SELECT {h:String}, 1, if({for_ms:Int64} > 0, now64(3) + toIntervalMillisecond({for_ms:Int64}),
       fromUnixTimestamp64Milli({until_ms:Int64}, 'UTC')), {reason:String}, {by:String}, now64(6)`
	// Each snooze is a new write (as for Pause): a repeated snooze after an unsnooze is not a
	// duplicate of the first.
	err := s.conn.Exec(insertCtx(ctx, "snooze", uuid.NewString()), q, clickhouse.Named("h", r.HuntID),
		clickhouse.Named("for_ms", r.For.Milliseconds()), clickhouse.Named("until_ms", until),
		clickhouse.Named("reason", r.Reason), clickhouse.Named("by", r.By))
	if err != nil {
		return fmt.Errorf("store: snooze %s: %w", r.HuntID, err)
	}
	return nil
}

// Unsnooze writes an unsnooze row for huntID: its deliveries due from the next poll are sent.
// Deliveries muted meanwhile stay muted.
func (s *Store) Unsnooze(ctx context.Context, huntID, by string) error {
	if huntID == "" {
		return errors.New("store: unsnooze: empty hunt id")
	}
	q := `INSERT INTO ` + s.table(schema.TableSnooze) + ` (hunt_id, snoozed, snoozed_until, reason, snoozed_by, updated)
SELECT {h:String}, 0, toDateTime64(0, 3, 'UTC'), '', {by:String}, now64(6)`
	if err := s.conn.Exec(insertCtx(ctx, "unsnooze", uuid.NewString()), q, clickhouse.Named("h", huntID), clickhouse.Named("by", by)); err != nil {
		return fmt.Errorf("store: unsnooze %s: %w", huntID, err)
	}
	return nil
}

// Snoozes returns the hunts whose newest snooze row is a snooze, expired or not: the caller
// judges LiveAt on its own clock, so one poll judges time intervals and snoozes alike. A
// database whose schema predates the table has none (so notifications keep flowing on an
// upgraded binary before `hunt-runner schema` has run).
func (s *Store) Snoozes(ctx context.Context) (map[string]Snooze, error) {
	// Newest by (updated, snoozed): of two rows written in the same microsecond the unsnooze
	// wins, on every reader.
	rows, err := s.conn.Query(ctx, `SELECT hunt_id, t.2, t.3, t.4, t.5
FROM (SELECT hunt_id, argMax((snoozed, snoozed_until, reason, snoozed_by, updated), (updated, -snoozed)) AS t
      FROM `+s.table(schema.TableSnooze)+` GROUP BY hunt_id)
WHERE t.1 = 1`)
	if err != nil {
		var ex *clickhouse.Exception
		if errors.As(err, &ex) && ex.Code == 60 { // UNKNOWN_TABLE: `hunt-runner schema` not run since; no snooze can exist
			return map[string]Snooze{}, nil
		}
		return nil, fmt.Errorf("store: read snoozes: %w", err)
	}
	defer rows.Close()
	out := map[string]Snooze{}
	for rows.Next() {
		var z Snooze
		if err := rows.Scan(&z.HuntID, &z.Until, &z.Reason, &z.By, &z.Updated); err != nil {
			return nil, fmt.Errorf("store: read snoozes: %w", err)
		}
		if z.Until.UnixMilli() == 0 {
			z.Until = time.Time{}
		}
		out[z.HuntID] = z
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read snoozes: %w", err)
	}
	return out, nil
}
