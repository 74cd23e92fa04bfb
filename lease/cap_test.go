package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
)

// On the engine: a peer's live lease of the scope takes room, a lease outside the scope does
// not, and the batch keeps its first winners (in the order asked) up to the cap; the others
// are Lost, released at once (no longer live), and their fires can be claimed again.
func TestClaimCappedKeepsTheFirstWinnersUpToTheCap(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	peer := newCoord(t, db, "pod-b", 10*time.Second, 400*time.Millisecond)
	c := newCoord(t, db, "pod-a", 10*time.Second, 400*time.Millisecond)
	now := serverNow(t, db)
	scope := []string{"held", "h1", "h2", "h3"}
	for _, id := range []string{"held", "elsewhere"} {
		res, err := peer.Claim(ctx, []lease.Fire{{HuntID: id, Fire: now - 5}})
		if err != nil || len(res.Won) != 1 {
			t.Fatalf("peer's claim of %s: %+v %v", id, res, err)
		}
	}
	fires := []lease.Fire{{HuntID: "h1", Fire: now - 5}, {HuntID: "h2", Fire: now - 5}, {HuntID: "h3", Fire: now - 5}}
	res, err := c.ClaimCapped(ctx, fires, lease.Cap{Max: 2, Hunts: scope})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Won) != 1 || res.Won[0].HuntID != "h1" || len(res.Lost) != 2 || res.OverCap != 2 {
		t.Fatalf("cap 2 with one peer lease: %+v, want h1 won, h2 and h3 lost over the cap", res)
	}
	live, err := leases(db).Running(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 2 {
		t.Fatalf("live leases of the scope after the claim: %+v, want the peer's and h1 (the others released)", live)
	}
	// Room frees when h1 ends: h2 is claimable again, under the same cap.
	if err := c.Release(ctx, res.Won[0]); err != nil {
		t.Fatal(err)
	}
	res, err = c.ClaimCapped(ctx, fires[1:], lease.Cap{Max: 2, Hunts: scope})
	if err != nil || len(res.Won) != 1 || res.Won[0].HuntID != "h2" || res.OverCap != 1 {
		t.Fatalf("after h1's release: %+v %v, want h2 won and h3 over the cap", res, err)
	}
}
