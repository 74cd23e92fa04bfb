package store

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Heartbeat is one runner's hunt_runner_heartbeat row as the runner writes it; last_tick is
// the server's clock at the insert.
type Heartbeat struct {
	Owner   string
	Version string
	HuntSet string
	SetHash string // hash of the loaded hunt set
	Hunts   int    // hunts loaded
	// HuntFiles is the loaded files' problems as JSON (status.HuntFiles, bounded by its
	// writer); empty when the runner reports none.
	HuntFiles string
	// Started is when the runner started (its own clock): it tells a restart from a runner
	// that kept ticking.
	Started time.Time
	// Beat is the runner's clock at this beat. It is not stored; it makes the deduplication
	// token of each beat distinct, so a retry of one beat is dropped and the next beat is not.
	Beat time.Time
}

// Heartbeat records that h.Owner is ticking: one small insert, last_tick = now64(3).
func (s *Store) Heartbeat(ctx context.Context, h Heartbeat) error {
	if h.Owner == "" {
		return fmt.Errorf("watermark: heartbeat: empty owner")
	}
	q := `INSERT INTO ` + s.table(schema.TableHeartbeat) + ` (owner, version, hunt_set, set_hash, hunts, last_tick, started, hunt_files)
SELECT {owner:String}, {version:String}, {set:String}, {hash:String}, {hunts:UInt32}, now64(3),
    fromUnixTimestamp64Milli({started:Int64}, 'UTC'), {files:String}`
	err := s.conn.Exec(insertCtx(ctx, "heartbeat", h.Owner, h.Started.UnixMilli(), h.Beat.UnixNano()), q,
		clickhouse.Named("owner", h.Owner), clickhouse.Named("version", h.Version), clickhouse.Named("set", h.HuntSet),
		clickhouse.Named("hash", h.SetHash), clickhouse.Named("hunts", uint32(max(h.Hunts, 0))),
		clickhouse.Named("started", h.Started.UnixMilli()), clickhouse.Named("files", h.HuntFiles))
	if err != nil {
		return fmt.Errorf("watermark: heartbeat of %s: %w", h.Owner, err)
	}
	return nil
}
