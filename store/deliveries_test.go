package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store"
)

// claimKey claims (hunt, sink)'s delivery key through c until a claim wins: the first need not.
func claimKey(t *testing.T, c *lease.Coordinator, hunt, sink string, fire int64) lease.Lease {
	t.Helper()
	var won lease.Lease
	chtest.Eventually(t, 30*time.Second, "a claim of "+store.DeliveryKey(hunt, sink), func() bool {
		res, err := c.Claim(context.Background(), []lease.Fire{{HuntID: store.DeliveryKey(hunt, sink), Fire: fire}})
		if err != nil || len(res.Won) == 0 {
			return false
		}
		won = res.Won[0]
		return true
	})
	return won
}

func coordinator(t *testing.T, db *chtest.DB, owner string, leaseLen time.Duration) *lease.Coordinator {
	t.Helper()
	c, err := lease.New(store.New(db.Conn, db.Name).Leases(), lease.Options{Owner: owner, Lease: leaseLen, Settle: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newest(t *testing.T, st *store.Store, id store.DeliveryID) store.Delivery {
	t.Helper()
	ds, err := st.Deliveries(context.Background(), []store.DeliveryID{id})
	if err != nil || len(ds) != 1 {
		t.Fatalf("newest row of %+v: %v %v", id, ds, err)
	}
	return ds[0]
}

// The fences of the delivery rows, one statement at a time, under claims of the lease
// protocol: an attempt starts only under a live claim of its (hunt, sink); a holder whose claim
// was taken over writes neither a start nor an outcome, and is told so (never "recorded");
// an outcome too close to the lease's end is refused; a late plan does not cover an attempt;
// the snapshot never takes a delivery key for a hunt; Retry re-queues dead letters only.
func TestDeliveryFences(t *testing.T) {
	db := chtest.NewWithSchema(t)
	st := store.New(db.Conn, db.Name)
	ctx := context.Background()
	fire := time.Now().Add(-time.Hour).Truncate(time.Minute).Unix()
	plan := func(owner string, sinks ...string) {
		t.Helper()
		keys := make([]string, len(sinks))
		for i, s := range sinks {
			keys[i] = "key-" + s
		}
		if err := st.PlanDeliveries(ctx, store.DeliveryPlan{HuntID: "brute", Fire: fire, RunID: uuid.New(), Sinks: sinks, Keys: keys,
			Status: store.DeliveryPending, Owner: owner}); err != nil {
			t.Fatal(err)
		}
	}
	plan("planner", "soc", "am")
	soc := store.DeliveryID{HuntID: "brute", Fire: fire, Sink: "soc"}
	a, b := coordinator(t, db, "a", 6*time.Second), coordinator(t, db, "b", time.Minute)

	la := claimKey(t, a, "brute", "soc", fire)
	// As the Dispatcher does: the statement may run until the claim's trust deadline.
	actx, cancel := context.WithTimeout(ctx, 2*time.Until(la.Trusted))
	started, err := st.StartDeliveries(actx, []lease.Lease{la}, []store.DeliveryID{soc})
	cancel()
	if err != nil || len(started) != 1 || started[0].Attempts != 1 || started[0].ClaimID != la.ClaimID {
		t.Fatalf("start under a live claim: %+v %v", started, err)
	}
	// A planner that read "no row" before the attempt started must not put a pending row above it.
	plan("late-planner", "soc")
	if d := newest(t, st, soc); d.Status != store.DeliveryDelivering {
		t.Fatalf("a late plan replaced the attempt: %+v", d)
	}
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for h := range snap.Hunts {
		if strings.Contains(h, store.DeliveryInfix) {
			t.Errorf("the snapshot lists delivery key %q as a hunt", h)
		}
	}

	// a's lease runs out unrenewed; b takes the (hunt, sink) over.
	chtest.Eventually(t, 30*time.Second, "a's lease to expire", func() bool {
		var expired bool
		_ = db.Conn.QueryRow(ctx, "SELECT fromUnixTimestamp64Milli({u:Int64}, 'UTC') <= now64(3)",
			clickhouse.Named("u", la.Until.UnixMilli())).Scan(&expired)
		return expired
	})
	lb := claimKey(t, b, "brute", "soc", fire)
	// The stale holder's sink answered: its outcome is fenced on the lease (its attempt's row
	// is still the newest delivery row), and it is told the outcome is not recorded.
	if err := st.FinishDelivery(ctx, la, started[0], store.DeliveryOutcome{Status: store.DeliveryDelivered}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the stale holder's outcome: %v, want ErrFenced", err)
	}
	if d := newest(t, st, soc); d.Status != store.DeliveryDelivering || d.ClaimID != la.ClaimID {
		t.Fatalf("the stale holder's outcome was written: %+v", d)
	}
	peer, err := st.StartDeliveries(ctx, []lease.Lease{lb}, []store.DeliveryID{soc})
	if err != nil || len(peer) != 1 || peer[0].Attempts != 2 {
		t.Fatalf("the peer's start: %+v %v", peer, err)
	}
	if got, err := st.StartDeliveries(ctx, []lease.Lease{la}, []store.DeliveryID{soc}); err != nil || len(got) != 0 {
		t.Fatalf("a start under a claim taken over: %+v %v", got, err)
	}
	if d := newest(t, st, soc); d.ClaimID != lb.ClaimID || d.Attempts != 2 {
		t.Fatalf("a start under a claim taken over wrote a row: %+v", d)
	}
	// An outcome that may run longer on the server than the lease has left is refused: it
	// could land after the lease, beside the next holder's.
	long, cancel := context.WithTimeout(ctx, 4*time.Minute) // store.CommitBound: 2m > the 1m lease
	err = st.FinishDelivery(long, lb, peer[0], store.DeliveryOutcome{Status: store.DeliveryDelivered})
	cancel()
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("an outcome allowed to outlive the lease: %v, want ErrFenced", err)
	}
	if err := st.FinishDelivery(ctx, lb, peer[0], store.DeliveryOutcome{Status: store.DeliveryDead, LastError: "gone"}); err != nil {
		t.Fatal(err)
	}

	// am: delivered; soc: dead. Retry of the whole fire re-queues soc only.
	am := store.DeliveryID{HuntID: "brute", Fire: fire, Sink: "am"}
	lam := claimKey(t, b, "brute", "am", fire)
	amStarted, err := st.StartDeliveries(ctx, []lease.Lease{lam}, []store.DeliveryID{am})
	if err != nil || len(amStarted) != 1 {
		t.Fatalf("start am: %v %v", amStarted, err)
	}
	if err := st.FinishDelivery(ctx, lam, amStarted[0], store.DeliveryOutcome{Status: store.DeliveryDelivered}); err != nil {
		t.Fatal(err)
	}
	n, err := st.RequeueDead(ctx, store.DeadFilter{HuntID: "brute", Since: time.Unix(fire, 0).Add(-time.Hour)}, "op")
	if err != nil || n != 1 {
		t.Fatalf("RequeueDead = %d, %v", n, err)
	}
	if s, m := newest(t, st, soc).Status, newest(t, st, am).Status; s != store.DeliveryPending || m != store.DeliveryDelivered {
		t.Errorf("after RequeueDead: soc %s, am %s; want pending, delivered", s, m)
	}
}
