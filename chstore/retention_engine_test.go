package chstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func findingsEngine(t *testing.T, db *chtest.DB) string {
	t.Helper()
	var s string
	if err := db.Conn.QueryRow(context.Background(), "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?",
		db.Name, chstore.TableFindings).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The findings TTL is changed only when it differs, and then once: a second apply is a no-op.
func TestApplyFindingsTTL(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	if did, err := chstore.ApplyFindingsTTL(ctx, db.Conn, db.Name, chstore.TopologySingle, "", chstore.DefaultFindingsTTLDays); err != nil || did != "" {
		t.Fatalf("the default TTL on a fresh schema: %q, %v; want no change", did, err)
	}
	did, err := chstore.ApplyFindingsTTL(ctx, db.Conn, db.Name, chstore.TopologySingle, "", 30)
	if err != nil || !strings.Contains(did, "toIntervalDay(90) to toDateTime(found) + toIntervalDay(30)") {
		t.Fatalf("30 days: %q, %v", did, err)
	}
	if e := findingsEngine(t, db); !strings.Contains(e, "TTL toDateTime(found) + toIntervalDay(30)") {
		t.Fatalf("engine after the change: %s", e)
	}
	if did, err = chstore.ApplyFindingsTTL(ctx, db.Conn, db.Name, chstore.TopologySingle, "", 30); err != nil || did != "" {
		t.Fatalf("30 days again: %q, %v; want no change", did, err)
	}
	if _, err = chstore.ApplyFindingsTTL(ctx, db.Conn, db.Name, chstore.TopologySingle, "", 0); err == nil {
		t.Fatal("a TTL of 0 days was accepted")
	}
}

// Rows written before hunt sets existed read as the default set once `schema` adds the column.
func TestHuntSetColumnsDefaultOnUpgrade(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	for _, q := range []string{
		"ALTER TABLE hunt_schedule DROP COLUMN hunt_set",
		"ALTER TABLE hunt_publish DROP COLUMN hunt_set",
		"INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) VALUES ('old', 60, 0, 1, 'h', now64(6))",
		"INSERT INTO hunt_publish (set_hash, hunt_count, source, published) VALUES ('s', 1, 'dir:/h', now64(6))",
	} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rep, err := chstore.Apply(ctx, db.Conn, db.Name, chstore.TopologySingle, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"added column hunt_schedule.hunt_set", "added column hunt_publish.hunt_set"} {
		if !slices.Contains(rep.Upgraded, want) {
			t.Errorf("upgrade report %v lacks %q", rep.Upgraded, want)
		}
	}
	for _, table := range []string{"hunt_schedule", "hunt_publish"} {
		var set string
		if err := db.Conn.QueryRow(ctx, "SELECT hunt_set FROM "+table).Scan(&set); err != nil || set != "default" {
			t.Errorf("%s.hunt_set of an old row = %q, %v; want default", table, set, err)
		}
	}
}
