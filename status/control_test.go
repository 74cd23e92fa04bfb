package status

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// A paused hunt reads as paused (who, why, until when) and not due; a pending backfill shows
// its progress; a backfill chunk's failure says nothing of the hunt's live health.
func TestPauseAndBackfillInStatus(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	wm := store.New(db.Conn, db.Name)
	for _, q := range []string{
		`INSERT INTO ` + db.Name + `.hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) VALUES ('held', 60, 0, 1, 'h', now64(6)), ('replayed', 60, 0, 1, 'h', now64(6))`,
		// replayed committed its latest fire; a backfill chunk of it failed after that.
		`INSERT INTO ` + db.Name + `.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, kind)
		 SELECT 'replayed', toStartOfMinute(now()), generateUUIDv4(), now64(6) - INTERVAL 1 SECOND, generateUUIDv4(), 'pod-a',
		   toStartOfMinute(now()) - 60, 'scheduled'`,
		`INSERT INTO ` + db.Name + `.hunt_run (hunt_id, fire, run_id, owner, status, window_start, window_end, started, finished, error, kind)
		 SELECT 'replayed', toStartOfHour(now()) - 3000, generateUUIDv4(), 'pod-b', 'failed', toStartOfHour(now()) - 3600,
		   toStartOfHour(now()) - 3000, now64(6), now64(6), 'boom', 'backfill'`,
	} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	if err := wm.Pause(ctx, store.Pause{HuntID: "held", For: time.Hour, Reason: "tuning", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	var now uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	id, err := wm.RequestBackfill(ctx, store.BackfillRequest{HuntID: "replayed", From: int64(now) - 3600, To: int64(now) - 600, Chunk: 600, By: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Read(ctx, wm, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := mustGet(t, rep, "held")
	if !h.Paused || h.State != StatePaused || h.Due || h.Pause == nil || h.Pause.By != "alice" || h.Pause.Reason != "tuning" ||
		h.Pause.Until == "" || h.Pause.Since == "" {
		t.Errorf("held = %+v (pause %+v)", h, h.Pause)
	}
	r := mustGet(t, rep, "replayed")
	if r.Paused || r.State == StateFailing || r.LastRunStatus != "succeeded" {
		t.Errorf("replayed = %+v: a backfill chunk's failure must not read as the hunt's", r)
	}
	if len(r.Backfills) != 1 || r.Backfills[0].ID != id || r.Backfills[0].Chunks != 5 || r.Backfills[0].ChunksDone != 0 ||
		r.Backfills[0].RequestedBy != "bob" {
		t.Errorf("replayed backfills %+v", r.Backfills)
	}
}

// A snoozed hunt shows who snoozed it, why and until when, in the report, the hunt's API and
// both pages, while it still runs; an unsnooze or an expired snooze shows nothing.
func TestSnoozeInStatus(t *testing.T) {
	db := fixture(t)
	ctx := context.Background()
	st, w := db.store(), store.New(db.Conn, db.Name)
	entries := fixtureEntries()
	id := entries[0].ID
	if err := w.Snooze(ctx, store.SnoozeRequest{HuntID: id, For: time.Hour, Reason: "change window", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	rep, err := Read(ctx, st, entries)
	if err != nil {
		t.Fatal(err)
	}
	if z := mustGet(t, rep, id).Snooze; z == nil || z.By != "alice" || z.Reason != "change window" || z.Until == "" || z.Since == "" {
		t.Fatalf("snooze of %s: %+v", id, z)
	}
	srv := serveFixture(t, db, entries)
	if _, _, body := get(t, srv.URL+"/api/v1/hunts/"+id); !strings.Contains(body, "\"snooze\": {\n    \"by\": \"alice\",\n    \"reason\": \"change window\"") {
		t.Errorf("the hunt's API lacks the snooze:\n%s", body)
	}
	if _, _, page := get(t, srv.URL+"/"); !strings.Contains(page, "notifications snoozed by alice") {
		t.Errorf("the index does not show the snooze")
	}
	if _, _, page := get(t, srv.URL+"/hunts/"+id); !strings.Contains(page, `<dd id="snooze">snoozed by alice: change window until`) {
		t.Errorf("the hunt's page does not show the snooze")
	}
	if err := w.Unsnooze(ctx, id, "bob"); err != nil {
		t.Fatal(err)
	}
	if rep, err = Read(ctx, st, entries); err != nil || mustGet(t, rep, id).Snooze != nil {
		t.Errorf("after unsnooze: %v %+v", err, mustGet(t, rep, id).Snooze)
	}
	if err := w.Snooze(ctx, store.SnoozeRequest{HuntID: id, Until: time.Now().Add(-time.Minute), By: "carol"}); err != nil {
		t.Fatal(err)
	}
	if rep, err = Read(ctx, st, entries); err != nil || mustGet(t, rep, id).Snooze != nil {
		t.Errorf("an expired snooze shows: %v %+v", err, mustGet(t, rep, id).Snooze)
	}
}
