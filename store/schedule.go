package store

import (
	"context"
	"fmt"
	"time"

	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Schedule reads and writes the published schedule (hunt_schedule) and its publication
// records (hunt_publish): the schedule.Store that schedule.Materialise diffs against, and the
// reads runners and status make of what is published. schedule computes the rows
// (schedule.RowsOf) and the diff; this file only moves them. Safe for concurrent use, as Store.
type Schedule struct{ s *Store }

// Schedule returns the store's schedule tables.
func (s *Store) Schedule() *Schedule { return &Schedule{s: s} }

var _ schedule.Store = (*Schedule)(nil)

// Published implements schedule.Store. FINAL leaves the newest row per hunt (ReplacingMergeTree
// by updated); its Now is the server clock, which Materialise versions the rows from.
func (sc *Schedule) Published(ctx context.Context, set string) (schedule.Published, error) {
	s := sc.s
	p := schedule.Published{Rows: map[string]schedule.Row{}}
	// To the microsecond, like the versions it orders (ServerClock is to the second).
	if err := s.conn.QueryRow(ctx, "SELECT now64(6)").Scan(&p.Now); err != nil {
		return p, err
	}
	rows, err := s.conn.Query(ctx, "SELECT hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated, hunt_set FROM "+
		qualified(s.database, schema.TableSchedule)+" FINAL")
	if err != nil {
		return p, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r       schedule.Row
			enabled uint8
			updated time.Time
		)
		if err := rows.Scan(&r.HuntID, &r.IntervalSeconds, &r.PhaseOffset, &enabled, &r.ConfigHash, &updated, &r.Set); err != nil {
			return p, err
		}
		r.Enabled = enabled == 1
		p.Rows[r.HuntID] = r
		if updated.After(p.Newest) {
			p.Newest = updated
		}
	}
	if err := rows.Err(); err != nil {
		return p, err
	}
	p.SetHash, err = sc.PublishedSetHash(ctx, set)
	return p, err
}

// Publish implements schedule.Store: the rows first, then the record, so a runner that sees the
// new set hash also sees the rows.
func (sc *Schedule) Publish(ctx context.Context, rows []schedule.Row, rec schedule.Publication) error {
	s := sc.s
	if len(rows) > 0 {
		ictx, insert := schema.Insert(ctx, s.database, schema.TableSchedule,
			"hunt_id", "interval_seconds", "phase_offset", "enabled", "config_hash", "updated", "hunt_set")
		b, err := s.conn.PrepareBatch(ictx, insert)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if err := b.Append(r.HuntID, r.IntervalSeconds, r.PhaseOffset, boolToUInt8(r.Enabled), r.ConfigHash, rec.At, rec.Set); err != nil {
				_ = b.Abort()
				return err
			}
		}
		if err := b.Send(); err != nil {
			return err
		}
	}
	ictx, insert := schema.Insert(ctx, s.database, schema.TablePublish, "set_hash", "hunt_count", "source", "published", "hunt_set")
	b, err := s.conn.PrepareBatch(ictx, insert)
	if err != nil {
		return err
	}
	if err := b.Append(rec.SetHash, rec.HuntCount, rec.Source, rec.At, rec.Set); err != nil {
		_ = b.Abort()
		return err
	}
	return b.Send()
}

func boolToUInt8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// PublishedSetHash returns the set hash of hunt set set's newest hunt_publish row ("" if that
// set was never published), so a runner can tell whether hunt_schedule matches the set it
// loaded; another set's publication says nothing about its own.
func (sc *Schedule) PublishedSetHash(ctx context.Context, set string) (string, error) {
	if err := schedule.ValidateHuntSet(set); err != nil {
		return "", err
	}
	s := sc.s
	rows, err := s.conn.Query(ctx, "SELECT set_hash FROM "+qualified(s.database, schema.TablePublish)+
		" WHERE hunt_set = "+quoteSet(set)+" ORDER BY published DESC LIMIT 1")
	if err != nil {
		return "", fmt.Errorf("read published set hash: %w", err)
	}
	defer rows.Close()
	var h string
	if rows.Next() {
		if err := rows.Scan(&h); err != nil {
			return "", fmt.Errorf("read published set hash: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read published set hash: %w", err)
	}
	return h, nil
}

// HuntSets returns, for every hunt in hunt_schedule, the hunt set of its newest row
// (tombstones included): the set that publishes it or last retired it.
func (sc *Schedule) HuntSets(ctx context.Context) (map[string]string, error) {
	s := sc.s
	rows, err := s.conn.Query(ctx, "SELECT hunt_id, hunt_set FROM "+qualified(s.database, schema.TableSchedule)+" FINAL")
	if err != nil {
		return nil, fmt.Errorf("read the hunt sets: %w", err)
	}
	defer rows.Close()
	sets := map[string]string{}
	for rows.Next() {
		var id, set string
		if err := rows.Scan(&id, &set); err != nil {
			return nil, fmt.Errorf("read the hunt sets: %w", err)
		}
		sets[id] = set
	}
	return sets, rows.Err()
}
