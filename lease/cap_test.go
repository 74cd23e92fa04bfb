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
	// claimUntil claims fs under cap 2 until want wins: on a loaded machine a claim may be lost
	// (a late acknowledgement, an extension past its margin), never more than the cap kept.
	claimUntil := func(fs []lease.Fire, want string) lease.Lease {
		t.Helper()
		var won lease.Lease
		ok := chtest.Poll(time.Minute, func() bool {
			res, err := c.ClaimCapped(ctx, fs, lease.Cap{Max: 2, Hunts: scope})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Won) > 1 || (len(res.Won) == 1 && res.Won[0].HuntID != want) {
				t.Fatalf("cap 2 with one peer lease: %+v, want at most %s won (the first asked), the rest over the cap", res, want)
			}
			if len(res.Won) == 1 && res.OverCap != len(fs)-1 {
				t.Fatalf("%d over the cap, want the %d winners after the first: %+v", res.OverCap, len(fs)-1, res)
			}
			live, err := leases(db).Running(ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			if len(live) > 2 {
				t.Fatalf("live leases of the scope after the claim: %+v, want at most the cap (2)", live)
			}
			if len(res.Won) == 1 {
				won = res.Won[0]
				return true
			}
			return false
		})
		if !ok {
			t.Fatalf("%s never won", want)
		}
		return won
	}
	h1 := claimUntil(fires, "h1")
	// Room frees when h1 ends: h2 is claimable again, under the same cap.
	if err := c.Release(ctx, h1); err != nil {
		t.Fatal(err)
	}
	claimUntil(fires[1:], "h2")
}
