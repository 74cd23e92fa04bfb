package store

import (
	"context"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// A heartbeat is one row with the server's clock as last_tick; a later beat supersedes it.
func TestHeartbeat(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	if err := s.Heartbeat(ctx, Heartbeat{}); err == nil {
		t.Error("a heartbeat without an owner was accepted")
	}
	started := time.Now().Add(-time.Minute)
	for i, hash := range []string{"h1", "h2"} {
		if err := s.Heartbeat(ctx, Heartbeat{Owner: "pod-a", Version: "v1", HuntSet: "default", SetHash: hash, Hunts: 3 + i,
			Started: started, Beat: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var hash, version string
	var hunts uint32
	var lagMs int64
	var st time.Time
	if err := db.Conn.QueryRow(ctx, "SELECT set_hash, version, hunts, toInt64(dateDiff('millisecond', last_tick, now64(3))), started FROM "+
		db.Name+".hunt_runner_heartbeat FINAL WHERE owner = 'pod-a'").Scan(&hash, &version, &hunts, &lagMs, &st); err != nil {
		t.Fatal(err)
	}
	if hash != "h2" || version != "v1" || hunts != 4 || lagMs < 0 || lagMs > 60_000 || st.UnixMilli() != started.UnixMilli() {
		t.Errorf("heartbeat row: hash %s version %s hunts %d, %d ms old, started %v (want %v)", hash, version, hunts, lagMs, st, started)
	}
}
