package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/lease"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// A claim whose insert is acknowledged too late to count is Lost and never extended: its row
// frees the hunt when the provisional lease passes, not a whole lease later. A claim that wins
// is extended to the whole lease.
func TestLateClaimBlocksOnlyTheProvisionalLease(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	conn := db.Conn
	ctx := context.Background()
	if _, err := schema.Apply(ctx, conn, db.Name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	const settle, whole = 200 * time.Millisecond, time.Minute
	c := newCoord(t, db, "pod-a", whole, settle)
	if p := c.Options().Provisional; p != 10*settle {
		t.Fatalf("provisional lease %s, want 10 × settle", p)
	}
	fire := serverNow(t, db) - 1
	// The claim insert (the one hunt_lease insert that zips its batch) lands at once but is
	// acknowledged a settle late.
	srv.SetFaults(t, ctl.FaultRule{Name: "late-claim", Kind: ctl.KindInsert, Match: "arrayZip", Times: 1,
		Effect: ctl.DelayAnswer, Delay: settle + 100*time.Millisecond})
	res, err := c.Claim(ctx, []lease.Fire{{HuntID: "h", Fire: fire}})
	if err != nil || len(res.Lost) != 1 {
		t.Fatalf("late claim: %+v, %v; want lost", res, err)
	}
	if res.InsertTook < settle+100*time.Millisecond {
		t.Fatalf("claim insert took %s by the result, acknowledged %s late", res.InsertTook, settle+100*time.Millisecond)
	}
	var until time.Time
	if err := conn.QueryRow(ctx, "SELECT max(lease_until) FROM hunt_lease WHERE hunt_id = 'h'").Scan(&until); err != nil {
		t.Fatal(err)
	}
	var claimed time.Time
	if err := conn.QueryRow(ctx, "SELECT max(claimed) FROM hunt_lease WHERE hunt_id = 'h'").Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if held := until.Sub(claimed); held > 10*settle+time.Second {
		t.Fatalf("the orphan row holds its hunt for %s, want the provisional %s", held, 10*settle)
	}
	var won lease.Lease
	for deadline := time.Now().Add(whole / 2); ; {
		res, err := c.Claim(ctx, []lease.Fire{{HuntID: "h", Fire: fire}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Won) == 1 {
			won = res.Won[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hunt stayed blocked for half a lease after a late claim")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if left := won.Until.Sub(won.Claimed); left < whole-time.Second {
		t.Fatalf("the winner holds %s, want the whole lease %s", left, whole)
	}
	if trust := time.Until(won.Trusted); trust < whole/2 {
		t.Fatalf("the winner is trusted for %s only", trust)
	}
}
