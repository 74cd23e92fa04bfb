package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/lease"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// privateDB is a fresh database with the schema on a private engine, for fault rules.
func privateDB(t *testing.T) (*chtest.Server, *chtest.DB) {
	t.Helper()
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	if _, err := schema.Apply(context.Background(), db.Conn, db.Name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	return srv, db
}

// claimUntilWon claims fire until a claim wins: on a loaded machine a claim acknowledged past
// the settle is lost, and its provisional row must expire first.
func claimUntilWon(t *testing.T, c *lease.Coordinator, hunt string, fire int64) lease.Lease {
	t.Helper()
	var won lease.Lease
	chtest.Eventually(t, time.Minute, "a claim of "+hunt+" to win", func() bool {
		res, err := c.Claim(context.Background(), []lease.Fire{{HuntID: hunt, Fire: fire}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Won) == 1 {
			won = res.Won[0]
			return true
		}
		return false
	})
	return won
}

// matchExtend is the extension's statement (its margin is a bound parameter only it has).
const matchExtend = `margin_ms`

// An extension acknowledged long after the provisional lease would have ended, but whose row
// landed at once, is Won, not Lost: the read-back decides, and its hunt is run instead of
// being held for a whole lease with nobody running it (issue 23, item 5).
func TestLateExtensionAcknowledgementStillWins(t *testing.T) {
	srv, db := privateDB(t)
	const settle, whole = 200 * time.Millisecond, time.Minute
	c := newCoord(t, db, "pod-a", whole, settle)
	srv.SetFaults(t, ctl.FaultRule{Name: "late-ext", Kind: ctl.KindInsert, Match: matchExtend, Times: 1,
		Effect: ctl.DelayAnswer, Delay: c.Options().Provisional + time.Second})
	l := claimUntilWon(t, c, "h", serverNow(t, db)-1)
	if st := srv.FaultStats(t); st[0].Fired != 1 {
		t.Fatalf("the late acknowledgement fired %d times", st[0].Fired)
	}
	if held := l.Until.Sub(l.Claimed); held < whole-time.Second {
		t.Fatalf("won lease lasts %s, want the whole %s", held, whole)
	}
	if left := time.Until(l.Trusted); left > whole-settle {
		t.Fatalf("trusted for %s more, longer than the row's life less a settle", left)
	}
}

// fenceStore runs before each extension: what a paused pod or a held request does to it.
type fenceStore struct {
	lease.Store
	before func(leases []lease.Lease)
}

func (s *fenceStore) Extend(ctx context.Context, leases []lease.Lease, lease, margin time.Duration) error {
	s.before(leases)
	return s.Store.Extend(ctx, leases, lease, margin)
}

// waitServerUntil waits until the server's clock is past at.
func waitServerUntil(t *testing.T, db *chtest.DB, at time.Time) {
	t.Helper()
	chtest.Eventually(t, time.Minute, "the server clock to pass "+at.String(), func() bool {
		var now time.Time
		if err := db.Conn.QueryRow(context.Background(), "SELECT now64(3)").Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now.After(at)
	})
}

// An extension that reaches the server when its provisional row has less than a settle left,
// or has expired, writes nothing, and its claim is Lost: a row written then might land after a
// peer found the hunt free. The read-back, not the answer, says so.
func TestExtensionFencedOnTheProvisionalLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		left time.Duration // of the provisional row when the extension runs
	}{
		{"inside the margin", 200 * time.Millisecond},
		{"after expiry", -200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := chtest.NewWithSchema(t)
			const settle, whole = 500 * time.Millisecond, time.Minute
			c := newCoordOver(t, &fenceStore{Store: leases(db), before: func(ls []lease.Lease) {
				waitServerUntil(t, db, ls[0].Until.Add(-tc.left))
			}}, lease.Options{Owner: "pod-a", Lease: whole, Settle: settle})
			res, err := c.Claim(context.Background(), []lease.Fire{{HuntID: "h", Fire: serverNow(t, db) - 1}})
			if err != nil || len(res.Won) != 0 {
				t.Fatalf("claim extended with %s of its provisional lease left: %+v, %v; want lost", tc.left, res, err)
			}
			for _, r := range leaseRows(t, db, "h") {
				if r.Until.Sub(r.Claimed) > c.Options().Provisional+time.Second {
					t.Fatalf("a row holding the hunt for %s was written, want only the provisional row", r.Until.Sub(r.Claimed))
				}
			}
		})
	}
}

// A lease row whose claimed is ahead of the server's clock (the clock stepped back, a replica
// that ran fast) does not stall the hunt: once it has expired a claim wins at once, written
// just above it, and its renewals are visible.
func TestClaimAfterAClockStepBack(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until) "+
		"SELECT 'h', toDateTime(0, 'UTC'), 'pod-fast', generateUUIDv4(), now64(6) + INTERVAL 1 HOUR, now64(3) - INTERVAL 1 SECOND")
	if err != nil {
		t.Fatal(err)
	}
	c := newCoord(t, db, "pod-a", 10*time.Second, 200*time.Millisecond)
	l := claimUntilWon(t, c, "h", serverNow(t, db)-1)
	rows := leaseRows(t, db, "h")
	if len(rows) < 2 || rows[len(rows)-1].ClaimID != l.ClaimID {
		t.Fatalf("lease rows %+v: want the claim newest", rows)
	}
	if _, err := c.Renew(ctx, l); err != nil {
		t.Fatalf("renewal under a claimed an hour ahead: %v", err)
	}
}

// A claim insert does not claim a paused hunt (nor a backfill of it): a pause is a barrier
// from the moment it is visible, whatever the claimer's snapshot said.
func TestClaimSkipsPausedHunts(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	pause := func(hunt string, paused int, until string) {
		t.Helper()
		err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_pause (hunt_id, paused, paused_until, reason, paused_by, updated) "+
			"SELECT {h:String}, {p:UInt8}, "+until+", 'test', 'test', now64(6)", clickhouse.Named("h", hunt), clickhouse.Named("p", paused))
		if err != nil {
			t.Fatal(err)
		}
	}
	pause("paused", 1, "toDateTime64(0, 3, 'UTC')")
	pause("ran-out", 1, "now64(3) - INTERVAL 1 SECOND")
	pause("resumed", 1, "toDateTime64(0, 3, 'UTC')")
	pause("resumed", 0, "toDateTime64(0, 3, 'UTC')")
	c := newCoord(t, db, "pod-a", 10*time.Second, 200*time.Millisecond)
	fire := serverNow(t, db) - 1
	res, err := c.Claim(ctx, []lease.Fire{{HuntID: "paused", Fire: fire}, {HuntID: schema.BackfillKey("paused", "b1"), Fire: fire}})
	if err != nil || len(res.Won) != 0 {
		t.Fatalf("claim of a paused hunt and its backfill: %+v, %v; want nothing won", res, err)
	}
	if n := len(leaseRows(t, db, "paused")) + len(leaseRows(t, db, schema.BackfillKey("paused", "b1"))); n != 0 {
		t.Fatalf("%d claim rows for a paused hunt", n)
	}
	claimUntilWon(t, c, "ran-out", fire)
	claimUntilWon(t, c, "resumed", fire)
}

// matchRenew is a renewal's insert: its lease length is literal SQL.
const matchRenew = `toIntervalMillisecond\(\d+\)`

// Trust comes from the row a renewal's read-back sees, counted from a send that preceded it:
//   - an answer held back does not stretch trust (the acknowledgement is not the anchor);
//   - a renewal whose first attempt landed with its outcome unknown, and whose later attempt
//     was refused, is trusted from the first attempt's row, not from the later send;
//   - a renewal refused before executing is not a success: the lease and its trust stay.
func TestRenewalTrustComesFromTheVisibleRow(t *testing.T) {
	srv, db := privateDB(t)
	ctx := context.Background()
	const settle, whole = 200 * time.Millisecond, 20 * time.Second
	c := newCoord(t, db, "pod-a", whole, settle)
	l := claimUntilWon(t, c, "h", serverNow(t, db)-1)

	srv.SetFaults(t, ctl.FaultRule{Name: "late", Kind: ctl.KindInsert, Match: matchRenew, Times: 1, Effect: ctl.DelayAnswer, Delay: 2 * time.Second})
	sent := time.Now()
	nl, err := c.Renew(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if limit := sent.Add(whole - settle); nl.Trusted.After(limit) {
		t.Fatalf("a renewal acknowledged 2 s late is trusted %s past its send + lease − settle", nl.Trusted.Sub(limit))
	}

	srv.SetFaults(t,
		ctl.FaultRule{Name: "lost-answer", Kind: ctl.KindInsert, Match: matchRenew, Times: 1, Effect: ctl.FailAfter, Code: 319},
		ctl.FaultRule{Name: "read-back", Kind: ctl.KindRead, Match: `arrayJoin`, Times: 1, Effect: ctl.FailBefore, Code: 289})
	first := time.Now()
	if _, err := c.Renew(ctx, nl); err == nil || errors.Is(err, lease.ErrLost) {
		t.Fatalf("renewal with a lost answer and a failed read-back: %v, want an unknown outcome", err)
	}
	time.Sleep(2 * time.Second) // the renewal loop's retry comes later: that is what is measured, not a synchronisation
	srv.SetFaults(t, ctl.FaultRule{Name: "refused", Kind: ctl.KindInsert, Match: matchRenew, Times: 1, Effect: ctl.FailBefore, Code: 286})
	retried, err := c.Renew(ctx, nl)
	if err != nil {
		t.Fatalf("retry refused, first attempt's row visible: %v, want that row as the renewal", err)
	}
	if limit := first.Add(whole - settle); retried.Trusted.After(limit) {
		t.Fatalf("trusted %s past the first attempt's send + lease − settle: the retry's send stretched it", retried.Trusted.Sub(limit))
	}

	srv.SetFaults(t, ctl.FaultRule{Name: "refused", Kind: ctl.KindInsert, Match: matchRenew, Times: 1, Effect: ctl.FailBefore, Code: 286})
	same, err := c.Renew(ctx, retried)
	if err == nil || errors.Is(err, lease.ErrLost) {
		t.Fatalf("renewal refused before executing: %v, want an error that keeps the lease", err)
	}
	if !same.Trusted.Equal(retried.Trusted) || !same.Until.Equal(retried.Until) {
		t.Fatalf("a refused renewal changed the lease: %+v → %+v", retried, same)
	}
}
