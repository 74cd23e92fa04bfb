package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Pause state travels in the snapshot: who, why, since and until when; a resume clears it; a
// pause whose end has passed is still reported but no longer holds.
func TestPauseInSnapshot(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	if err := s.Pause(ctx, Pause{HuntID: "a", Reason: "noisy", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(ctx, Pause{HuntID: "b", For: time.Hour, By: "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(ctx, Pause{HuntID: "c", Until: time.Unix(serverNow(t, db)-60, 0), By: "carol"}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := snap.Hunts["a"], snap.Hunts["b"], snap.Hunts["c"]
	if !a.Paused || a.PausedBy != "alice" || a.PauseReason != "noisy" || !a.PausedUntil.IsZero() || !a.PausedAt(snap.Now) ||
		a.PausedSince.IsZero() || a.PausedSince.After(snap.Now) {
		t.Errorf("a: %+v, want paused by alice until resumed", a)
	}
	if d := b.PausedUntil.Sub(snap.Now); !b.PausedAt(snap.Now) || d <= 59*time.Minute || d > time.Hour {
		t.Errorf("b: paused until %v at now %v, want an hour from the server's now", b.PausedUntil, snap.Now)
	}
	if !c.Paused || c.PausedAt(snap.Now) {
		t.Errorf("c: %+v: a pause that ended must be reported but not hold", c)
	}
	if err := s.Resume(ctx, "a", "alice"); err != nil {
		t.Fatal(err)
	}
	snap, err = s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Hunts["a"].Paused || !snap.Hunts["b"].Paused {
		t.Errorf("after resume: a %+v, b %+v", snap.Hunts["a"], snap.Hunts["b"])
	}
	if err := s.Pause(ctx, Pause{HuntID: "x", For: time.Hour, Until: time.Now()}); err == nil {
		t.Error("a pause with both For and Until was accepted")
	}
}

// A backfill is in the snapshot until cancelled or finished, with its key's progress, and its
// key never appears among the hunts.
func TestBackfillInSnapshot(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	from, to := now-3600, now-600
	id1, err := s.RequestBackfill(ctx, BackfillRequest{HuntID: "h", From: from, To: to, Chunk: 600, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := s.RequestBackfill(ctx, BackfillRequest{HuntID: "h", From: from, To: to, Chunk: 600, By: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	// Progress of id1: one chunk committed under its key.
	c := coord(t, db, "pod-a", time.Minute)
	key := schema.BackfillKey("h", id1)
	l := claimOne(t, c, key, from+600)
	if err := s.Advance(ctx, l, Run{HuntID: "h", Fire: from + 600, RunID: uuid.New(), Owner: "pod-a",
		WindowStart: from, WindowEnd: from + 600, Started: time.Now(), Kind: hunt.KindBackfill}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Hunts[key]; ok || len(snap.Hunts) != 0 {
		t.Errorf("hunts %v: a backfill key must not be listed as a hunt", snap.Hunts)
	}
	if len(snap.Backfills) != 2 || snap.Backfills[0].ID != id1 || snap.Backfills[1].ID != id2 {
		t.Fatalf("backfills %+v, want %s then %s", snap.Backfills, id1, id2)
	}
	b := snap.Backfills[0]
	if b.HuntID != "h" || b.From != from || b.To != to || b.Chunk != 600 || b.RequestedBy != "alice" ||
		b.Done() != from+600 || !b.Progress.HasLease || b.Progress.LeaseOwner != "pod-a" {
		t.Errorf("backfill %+v (done %d), want [%d, %d) by 600s, done to %d", b, b.Done(), from, to, from+600)
	}
	if snap.Backfills[1].Done() != from {
		t.Errorf("untouched backfill done %d, want %d", snap.Backfills[1].Done(), from)
	}
	if err := s.CancelBackfill(ctx, id2, "carol"); err != nil {
		t.Fatal(err)
	}
	if err := s.CancelBackfill(ctx, id2, "carol"); !errors.Is(err, ErrNoBackfill) {
		t.Errorf("second cancel: %v, want ErrNoBackfill", err)
	}
	if err := s.CancelBackfill(ctx, "nope", "carol"); !errors.Is(err, ErrNoBackfill) {
		t.Errorf("cancel of an unknown id: %v, want ErrNoBackfill", err)
	}
	// Finish id1: its last chunk reaches the range's end.
	if err := c.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	l = claimOne(t, c, key, to)
	if err := s.Advance(ctx, l, Run{HuntID: "h", Fire: to, RunID: uuid.New(), Owner: "pod-a",
		WindowStart: from + 600, WindowEnd: to, Started: time.Now(), Kind: hunt.KindBackfill}); err != nil {
		t.Fatal(err)
	}
	snap, err = s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Backfills) != 0 {
		t.Errorf("backfills %+v, want none (one finished, one cancelled)", snap.Backfills)
	}
	list, err := s.Backfills(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != id2 || list[0].State != BackfillCancelled || list[0].Done != from ||
		list[1].ID != id1 || list[1].State != BackfillActive || list[1].Done != to {
		t.Errorf("list %+v", list)
	}
}

// Snooze rows: the newest per hunt decides, an unsnooze ends it, and a database whose schema
// predates hunt_snooze reads as no snoozes rather than failing every notify poll.
func TestSnoozesNewestRowDecides(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	st := New(db.Conn, db.Name)
	if err := st.Snooze(ctx, SnoozeRequest{HuntID: "a", For: time.Hour, Reason: "r", By: "ana"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Snooze(ctx, SnoozeRequest{HuntID: "b", By: "bo"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Unsnooze(ctx, "b", "bo"); err != nil {
		t.Fatal(err)
	}
	got, err := st.Snoozes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := got["a"]
	if len(got) != 1 || !ok || a.By != "ana" || a.Reason != "r" || a.Until.IsZero() || !a.LiveAt(a.Updated) || a.LiveAt(a.Until) {
		t.Fatalf("snoozes %+v; want a, live for an hour, and b ended by its unsnooze", got)
	}
	if err := db.Conn.Exec(ctx, "DROP TABLE "+db.Name+".hunt_snooze"); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Snoozes(ctx); err != nil || len(got) != 0 {
		t.Errorf("without the table: %v %v, want no snoozes and no error", got, err)
	}
}
