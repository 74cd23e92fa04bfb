package notify

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// The fences of the delivery row, one statement at a time: a claim does not take a live
// claim, a stale holder's outcome lands nowhere once a peer holds the delivery, and Retry
// re-queues dead letters only.
func TestDeliveryFences(t *testing.T) {
	db := testDB(t)
	st := deliveryStore{conn: db.Conn, db: db.Name}
	ctx := context.Background()
	fire := baseFire()
	run := commit(t, db, "brute", fire, `{"host":"a"}`)
	w := work{HuntID: "brute", Fire: fire.Unix(), RunID: run}
	if err := st.plan(ctx, w, []string{"soc", "am"}, StatusPending, "planner"); err != nil {
		t.Fatal(err)
	}
	k := key{"brute", fire.Unix(), "soc"}
	claim := func(lease time.Duration) (uuid.UUID, []held) {
		t.Helper()
		id := uuid.New()
		if err := st.claim(ctx, []key{k}, id, "x", lease); err != nil {
			t.Fatal(err)
		}
		h, _, err := st.held(ctx, []key{k}, id)
		if err != nil {
			t.Fatal(err)
		}
		return id, h
	}

	_, first := claim(2 * time.Second) // long enough to outlast the checks below on a loaded engine
	if len(first) != 1 {
		t.Fatal("the first claim of a pending delivery failed")
	}
	// A planner that read "no row" before the claim landed must not put a pending row above it.
	if err := st.plan(ctx, w, []string{"soc"}, StatusPending, "late-planner"); err != nil {
		t.Fatal(err)
	}
	if d := deliveries(t, db)[k]; d.Status != StatusDelivering {
		t.Fatalf("a late plan replaced the claim: %+v", d)
	}
	if _, second := claim(time.Minute); len(second) != 0 {
		t.Fatal("a second claim took a live claim")
	}
	chtest.Eventually(t, 10*time.Second, "the first lease to expire", func() bool {
		var expired bool
		_ = db.Conn.QueryRow(ctx, "SELECT toDateTime64(?, 3, 'UTC') <= now64(3)", first[0].Until.Format("2006-01-02 15:04:05.000")).Scan(&expired)
		return expired
	})
	_, peer := claim(time.Minute)
	if len(peer) != 1 {
		t.Fatal("an expired claim was not taken over")
	}
	if err := st.finish(ctx, first[0], StatusDelivered, "", 0); err != nil {
		t.Fatal(err)
	}
	if d := deliveries(t, db)[k]; d.Status != StatusDelivering {
		t.Fatalf("the stale holder's outcome replaced the peer's claim: %+v", d)
	}
	if err := st.finish(ctx, peer[0], StatusDead, "gone", 0); err != nil {
		t.Fatal(err)
	}
	// am: delivered; soc: dead. Retry of the whole fire re-queues soc only.
	amID := uuid.New()
	if err := st.claim(ctx, []key{{"brute", fire.Unix(), "am"}}, amID, "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	amHeld, _, err := st.held(ctx, []key{{"brute", fire.Unix(), "am"}}, amID)
	if err != nil || len(amHeld) != 1 {
		t.Fatalf("claim am: %v %v", amHeld, err)
	}
	if err := st.finish(ctx, amHeld[0], StatusDelivered, "", 0); err != nil {
		t.Fatal(err)
	}
	n, err := Retry(ctx, db.Conn, db.Name, "op", RetryFilter{HuntID: "brute", Since: fire.Add(-time.Hour)})
	if err != nil || n != 1 {
		t.Fatalf("Retry = %d, %v", n, err)
	}
	ds := deliveries(t, db)
	if ds[k].Status != StatusPending || ds[key{"brute", fire.Unix(), "am"}].Status != StatusDelivered {
		t.Errorf("after Retry: soc %s, am %s; want pending, delivered", ds[k].Status, ds[key{"brute", fire.Unix(), "am"}].Status)
	}
}

// Two claims tied on updated (one microsecond) both lose; once their leases have run out, a
// new claim takes the delivery instead of leaving it stuck behind the tie.
func TestTiedClaimsLoseAndDoNotBlock(t *testing.T) {
	db := testDB(t)
	st := deliveryStore{conn: db.Conn, db: db.Name}
	ctx := context.Background()
	fire := baseFire()
	k := key{"brute", fire.Unix(), "soc"}
	a, b := uuid.New(), uuid.New()
	// Two inserts: one insert of both rows would collapse them at once (optimize_on_insert).
	// updated is recent: the table's TTL drops rows older than 30 days as they are inserted.
	for _, id := range []uuid.UUID{a, b} {
		err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_delivery ("+deliveryCols+") SELECT 'brute', toDateTime(?, 'UTC'), 'soc', "+
			"generateUUIDv4(), 'k', 'delivering', 1, '', now64(3), now64(6), toDateTime64(0, 6, 'UTC'), toUUID(?), 'x', "+
			"now64(3) + toIntervalMillisecond(200), toDateTime64(?, 6, 'UTC')", fire.Unix(), id.String(), fire.Format("2006-01-02 15:04:05")+".000001")
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uuid.UUID{a, b} {
		if h, _, err := st.held(ctx, []key{k}, id); err != nil || len(h) != 0 {
			t.Errorf("tied claim %s counted as held: %v %v", id, h, err)
		}
	}
	chtest.Eventually(t, 10*time.Second, "a new claim past the tie", func() bool {
		id := uuid.New()
		if err := st.claim(ctx, []key{k}, id, "y", time.Minute); err != nil {
			t.Fatal(err)
		}
		h, _, err := st.held(ctx, []key{k}, id)
		return err == nil && len(h) == 1
	})
}
