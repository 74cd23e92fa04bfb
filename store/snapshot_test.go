package store

import (
	"context"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// SnapshotOf reads the candidates it is given and every paused, requested and backfilled hunt,
// each exactly as Snapshot reads it, and no other hunt; the small tables in one round and the
// rows in a second, so that a tick costs seven statements however many hunts exist.
func TestSnapshotOfReadsOnlyWhatItIsAsked(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	exec := func(q string) {
		t.Helper()
		if err := db.Conn.Exec(ctx, strings.ReplaceAll(q, "$db", schema.QuoteIdent(db.Name))); err != nil {
			t.Fatal(err)
		}
	}
	// wm, other: committed, lease spent; leased: a live lease only; failed: in backoff;
	// req: a pending request only; paused: paused; bfh: a backfill with one chunk committed.
	for _, id := range []string{"wm", "other"} {
		exec(fmt.Sprintf(`INSERT INTO $db.hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT '%[1]s', toDateTime(%[2]d, 'UTC'), 'pod-a', generateUUIDv4(), now64(6), now64(3) + INTERVAL 1 HOUR`, id, now-60))
		exec(fmt.Sprintf(`INSERT INTO $db.hunt_watermark (hunt_id, watermark, claim_id, updated)
SELECT '%s', toDateTime(%d, 'UTC'), generateUUIDv4(), now64(6)`, id, now-60))
	}
	exec(fmt.Sprintf(`INSERT INTO $db.hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT 'leased', toDateTime(%d, 'UTC'), 'pod-b', generateUUIDv4(), now64(6), now64(3) + INTERVAL 5 MINUTE`, now))
	exec(fmt.Sprintf(`INSERT INTO $db.hunt_state (hunt_id, status, consecutive_failures, last_error, last_fire, retry_after, updated)
SELECT 'failed', 'failed', 3, 'boom', toDateTime(%d, 'UTC'), now64(3) + INTERVAL 1 MINUTE, now64(6)`, now-60))
	if err := s.Request(ctx, "req", now-30, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(ctx, Pause{HuntID: "paused", Reason: "noisy", By: "bob"}); err != nil {
		t.Fatal(err)
	}
	bf, err := s.RequestBackfill(ctx, BackfillRequest{HuntID: "bfh", From: now - 3600, To: now - 600, Chunk: 600, By: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	exec(fmt.Sprintf(`INSERT INTO $db.hunt_watermark (hunt_id, watermark, claim_id, updated)
SELECT '%s', toDateTime(%d, 'UTC'), generateUUIDv4(), now64(6)`, schema.BackfillKey("bfh", bf), now-3000))

	full, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var asked time.Time
	if _, err := s.SnapshotOf(ctx, func(time.Time) []string { return nil }); err != nil { // warm the connection pool
		t.Fatal(err)
	}
	before := chtest.Queries(t, db.URL)
	part, err := s.SnapshotOf(ctx, func(now time.Time) []string {
		asked = now
		return []string{"wm", "leased", "failed", "new", "wm"}
	})
	trips := chtest.Queries(t, db.URL) - before
	if err != nil {
		t.Fatal(err)
	}
	if !asked.Equal(part.Now) {
		t.Errorf("candidates asked at %v, snapshot at %v: they must share the server clock", asked, part.Now)
	}
	want := []string{"bfh", "failed", "leased", "new", "paused", "req", "wm"}
	if got := slices.Sorted(maps.Keys(part.Hunts)); !slices.Equal(got, want) {
		t.Fatalf("read %v, want %v (candidates, paused, requested, backfilled; not other)", got, want)
	}
	for _, id := range want {
		if !reflect.DeepEqual(part.Hunts[id], full.Hunts[id]) {
			t.Errorf("%s: SnapshotOf %+v\nSnapshot %+v", id, part.Hunts[id], full.Hunts[id])
		}
	}
	if !reflect.DeepEqual(part.Backfills, full.Backfills) || len(part.Backfills) != 1 || part.Backfills[0].Done() != now-3000 {
		t.Errorf("backfills %+v, want %+v with progress at %d", part.Backfills, full.Backfills, now-3000)
	}
	if f := part.Hunts["failed"]; !f.HasRetryAfter || !f.RetryAfter.After(part.Now) || f.ConsecutiveFailures != 3 {
		t.Errorf("failed = %+v: want its backoff", f)
	}
	if os.Getenv(chtest.EnvURL) == "" && trips != snapshotStatements {
		t.Errorf("SnapshotOf took %d round trips, want %d", trips, snapshotStatements)
	}
}

// Many candidates are read in batches whose parameters stay far below the server's URL cap,
// and every one of them is in the snapshot, with or without rows.
func TestSnapshotOfBatchesManyCandidates(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	const n = 40_000
	if err := db.Conn.Exec(ctx, `INSERT INTO `+schema.QuoteIdent(db.Name)+`.hunt_watermark (hunt_id, watermark, claim_id, updated)
SELECT concat('c', leftPad(toString(number), 5, '0')), toDateTime(1700000000 + number, 'UTC'), generateUUIDv4(), now64(6)
FROM numbers(`+fmt.Sprint(n)+`) WHERE number % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%05d", i)
	}
	batches := idBatches(ids, snapshotBatchBytes)
	if len(batches) < 2 {
		t.Fatalf("%d batches: the test must cross a batch boundary", len(batches))
	}
	if got := slices.Concat(batches...); !slices.Equal(got, ids) {
		t.Fatalf("batches do not tile the ids")
	}
	if _, err := s.SnapshotOf(ctx, func(time.Time) []string { return ids }); err != nil { // warm the connection pool
		t.Fatal(err)
	}
	before := chtest.Queries(t, db.URL)
	snap, err := s.SnapshotOf(ctx, func(time.Time) []string { return ids })
	trips := chtest.Queries(t, db.URL) - before
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Hunts) != n {
		t.Fatalf("%d hunts in the snapshot, want %d", len(snap.Hunts), n)
	}
	for i, id := range ids {
		h, ok := snap.Hunts[id]
		if wantWM := i%2 == 0; !ok || h.HasWatermark != wantWM || (wantWM && h.Watermark != 1700000000+int64(i)) {
			t.Fatalf("%s = %+v (listed %v)", id, h, ok)
		}
	}
	if want := int64(snapshotStatements - 3 + 3*len(batches)); os.Getenv(chtest.EnvURL) == "" && trips != want {
		t.Errorf("%d round trips for %d batches, want %d", trips, len(batches), want)
	}
}

func TestIDBatchesBound(t *testing.T) {
	ids := []string{"aaaa", "bb", strings.Repeat("x", 100), "c"}
	for _, limit := range []int{1, 20, 30, 1000} {
		batches := idBatches(ids, limit)
		if !slices.Equal(slices.Concat(batches...), ids) {
			t.Fatalf("limit %d: %v do not tile %v", limit, batches, ids)
		}
		for _, b := range batches {
			size := 0
			for _, id := range b {
				size += len(id) + 8
			}
			if len(b) > 1 && size > limit {
				t.Errorf("limit %d: batch %v is %d bytes", limit, b, size)
			}
		}
	}
	if idBatches(nil, 10) != nil {
		t.Error("no ids must give no batch")
	}
}
