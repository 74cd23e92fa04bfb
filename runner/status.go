package runner

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/watermark"
)

// ScheduleEntry is the schedule of one hunt as `status` shows it: from the loaded hunt files,
// or from the published hunt_schedule table when no source is given.
type ScheduleEntry struct {
	HuntID   string
	Interval int64
	Offset   int64
	Enabled  bool
}

// HuntStatus is one row of `hunt-runner status`. Times are RFC 3339 UTC; absent values are
// omitted from JSON.
type HuntStatus struct {
	HuntID              string `json:"hunt_id"`
	IntervalSeconds     int64  `json:"interval_seconds"`
	OffsetSeconds       int64  `json:"offset_seconds"`
	Enabled             bool   `json:"enabled"`
	LatestFire          string `json:"latest_fire,omitempty"`
	NextFire            string `json:"next_fire,omitempty"`
	Watermark           string `json:"watermark,omitempty"`
	BehindSeconds       int64  `json:"behind_seconds"`
	Due                 bool   `json:"due"`
	LeaseOwner          string `json:"lease_owner,omitempty"`
	LeaseFire           string `json:"lease_fire,omitempty"`
	LeaseUntil          string `json:"lease_until,omitempty"`
	LeaseLive           bool   `json:"lease_live"`
	RequestedFire       string `json:"requested_fire,omitempty"`
	LastRunStatus       string `json:"last_run_status,omitempty"`
	LastRunFire         string `json:"last_run_fire,omitempty"`
	LastRunTime         string `json:"last_run_time,omitempty"`
	LastRunRows         uint64 `json:"last_run_rows"`
	LastRunError        string `json:"last_run_error,omitempty"`
	ConsecutiveFailures uint32 `json:"consecutive_failures"`
	// Paused: a pause holds now (hunt-runner pause); by whom, why, since and until when
	// (PausedUntil empty: until resumed).
	Paused      bool             `json:"paused"`
	PausedBy    string           `json:"paused_by,omitempty"`
	PauseReason string           `json:"pause_reason,omitempty"`
	PausedSince string           `json:"paused_since,omitempty"`
	PausedUntil string           `json:"paused_until,omitempty"`
	Backfills   []BackfillStatus `json:"backfills,omitempty"` // backfills still to run
}

// BackfillStatus is the progress of one backfill still to run: chunks cover [From, Done).
type BackfillStatus struct {
	ID           string `json:"id"`
	From         string `json:"from"`
	To           string `json:"to"`
	Done         string `json:"done"`
	ChunkSeconds int64  `json:"chunk_seconds"`
	Chunks       int64  `json:"chunks"`
	ChunksDone   int64  `json:"chunks_done"`
	RequestedBy  string `json:"requested_by"`
}

// BackfillProgress is b as status shows it.
func BackfillProgress(b watermark.Backfill) BackfillStatus {
	ceil := func(n int64) int64 { return (n + b.Chunk - 1) / b.Chunk }
	return BackfillStatus{ID: b.ID, From: rfcSec(b.From), To: rfcSec(b.To), Done: rfcSec(b.Done()), ChunkSeconds: b.Chunk,
		Chunks: ceil(b.To - b.From), ChunksDone: ceil(b.Done() - b.From), RequestedBy: b.RequestedBy}
}

// StatusReport is the whole `status` answer: {"now": …, "hunts": […]}.
type StatusReport struct {
	Now   string       `json:"now"`
	Hunts []HuntStatus `json:"hunts"`
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }
func rfcSec(s int64) string  { return rfc(time.Unix(s, 0)) }

type lastRun struct {
	status, errText string
	finished        time.Time
	rows            uint64
	fire            time.Time
}

// Status reads the coordination state (one snapshot plus one read of hunt_runs) and reports
// every hunt of entries, sorted by id. Hunts that have state but are not in entries are left out.
func Status(ctx context.Context, conn driver.Conn, store StateStore, database string, entries []ScheduleEntry) (StatusReport, error) {
	snap, err := store.Snapshot(ctx)
	if err != nil {
		return StatusReport{}, fmt.Errorf("status: %w", err)
	}
	runs := map[string]lastRun{}
	rows, err := conn.Query(ctx, "SELECT hunt_id, argMax(status, finished), argMax(error, finished), max(finished), "+
		"argMax(rows_written, finished), argMax(fire, finished) FROM "+chstore.QuoteIdent(database)+"."+chstore.ViewRuns+" "+
		"WHERE status != 'gap' AND kind != 'backfill' GROUP BY hunt_id")
	if err != nil {
		return StatusReport{}, fmt.Errorf("status: read hunt_runs: %w", err)
	}
	for rows.Next() {
		var id string
		var lr lastRun
		if err := rows.Scan(&id, &lr.status, &lr.errText, &lr.finished, &lr.rows, &lr.fire); err != nil {
			rows.Close()
			return StatusReport{}, fmt.Errorf("status: read hunt_runs: %w", err)
		}
		runs[id] = lr
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return StatusReport{}, fmt.Errorf("status: read hunt_runs: %w", err)
	}

	now := snap.Now.Unix()
	out := StatusReport{Now: snap.Now.UTC().Format(time.RFC3339Nano), Hunts: make([]HuntStatus, 0, len(entries))}
	for _, e := range entries {
		st := snap.Hunts[e.HuntID]
		hs := HuntStatus{HuntID: e.HuntID, IntervalSeconds: e.Interval, OffsetSeconds: e.Offset, Enabled: e.Enabled,
			ConsecutiveFailures: st.ConsecutiveFailures, Paused: st.PausedAt(snap.Now)}
		if hs.Paused {
			hs.PausedBy, hs.PauseReason, hs.PausedSince = st.PausedBy, st.PauseReason, rfc(st.PausedSince)
			if !st.PausedUntil.IsZero() {
				hs.PausedUntil = rfc(st.PausedUntil)
			}
		}
		for _, b := range snap.Backfills {
			if b.HuntID == e.HuntID {
				hs.Backfills = append(hs.Backfills, BackfillProgress(b))
			}
		}
		if st.HasWatermark {
			hs.Watermark = rfcSec(st.Watermark)
		}
		if st.HasLease {
			hs.LeaseOwner, hs.LeaseFire, hs.LeaseUntil = st.LeaseOwner, rfcSec(st.LeaseFire), rfc(st.LeaseUntil)
			hs.LeaseLive = st.LeaseUntil.After(snap.Now)
		}
		if st.HasRequest {
			hs.RequestedFire = rfcSec(st.RequestedFire)
		}
		if e.Enabled && e.Interval > 0 {
			latest := schedule.LatestFire(now, e.Interval, e.Offset)
			hs.LatestFire, hs.NextFire = rfcSec(latest), rfcSec(latest+e.Interval)
			row := schedule.Row{HuntID: e.HuntID, IntervalSeconds: uint32(e.Interval), PhaseOffset: uint32(e.Offset), Enabled: true}
			hs.Due = !hs.Paused && schedule.IsDue(now, row, schedule.State{Watermark: st.Watermark, HasWatermark: st.HasWatermark,
				LeaseUntilMs: st.LeaseUntil.UnixMilli(), HasLease: st.HasLease,
				RequestedFire: st.RequestedFire, HasRequest: st.HasRequest})
			if !st.HasWatermark || st.Watermark < latest {
				oldest := latest
				if st.HasWatermark {
					oldest = min(schedule.NextFire(st.Watermark, e.Interval, e.Offset), latest)
				}
				hs.BehindSeconds = now - oldest
			}
		}
		if lr, ok := runs[e.HuntID]; ok {
			hs.LastRunStatus, hs.LastRunError, hs.LastRunRows = lr.status, lr.errText, lr.rows
			hs.LastRunTime, hs.LastRunFire = rfc(lr.finished), rfc(lr.fire)
		}
		out.Hunts = append(out.Hunts, hs)
	}
	sort.Slice(out.Hunts, func(i, j int) bool { return out.Hunts[i].HuntID < out.Hunts[j].HuntID })
	return out, nil
}

// PublishedSchedule reads the newest hunt_schedule row of every hunt (tombstones included, as
// disabled entries).
func PublishedSchedule(ctx context.Context, conn driver.Conn, database string) ([]ScheduleEntry, error) {
	rows, err := conn.Query(ctx, "SELECT hunt_id, interval_seconds, phase_offset, enabled FROM "+
		chstore.QuoteIdent(database)+".hunt_schedule FINAL ORDER BY hunt_id")
	if err != nil {
		return nil, fmt.Errorf("read hunt_schedule: %w", err)
	}
	defer rows.Close()
	var out []ScheduleEntry
	for rows.Next() {
		var e ScheduleEntry
		var iv, off uint32
		var en uint8
		if err := rows.Scan(&e.HuntID, &iv, &off, &en); err != nil {
			return nil, fmt.Errorf("read hunt_schedule: %w", err)
		}
		e.Interval, e.Offset, e.Enabled = int64(iv), int64(off), en == 1
		out = append(out, e)
	}
	return out, rows.Err()
}
