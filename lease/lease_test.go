package lease_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newCoord(t testing.TB, db *chtest.DB, owner string, leaseDur, settle time.Duration) *lease.Coordinator {
	t.Helper()
	return newCoordOver(t, leases(db), lease.Options{Owner: owner, Lease: leaseDur, Settle: settle, Logger: quiet})
}

// leases is the ClickHouse lease.Store over db.
func leases(db *chtest.DB) *store.Leases { return store.New(db.Conn, db.Name).Leases() }

// newCoordOver is a Coordinator over st (the engine's store, or a test's wrapper around it).
func newCoordOver(t testing.TB, st lease.Store, opts lease.Options) *lease.Coordinator {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	c, err := lease.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serverNow reads the engine clock, the only clock fires are computed from.
func serverNow(t testing.TB, db *chtest.DB) int64 {
	t.Helper()
	var now time.Time
	if err := db.Conn.QueryRow(context.Background(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now.Unix()
}

func writeWatermark(t testing.TB, db *chtest.DB, hunt string, wm int64) {
	t.Helper()
	err := db.Conn.Exec(context.Background(),
		"INSERT INTO "+db.Name+".hunt_watermark (hunt_id, watermark, claim_id, updated) SELECT {h:String}, toDateTime({w:Int64}, 'UTC'), generateUUIDv4(), now64(6)",
		clickhouse.Named("h", hunt), clickhouse.Named("w", wm))
	if err != nil {
		t.Fatal(err)
	}
}

// leaseRows returns every hunt_lease row of hunt, oldest first.
func leaseRows(t testing.TB, db *chtest.DB, hunt string) []lease.Row {
	t.Helper()
	rows, err := db.Conn.Query(context.Background(),
		"SELECT hunt_id, toInt64(fire), owner, claim_id, claimed, lease_until FROM "+db.Name+".hunt_lease WHERE hunt_id = {h:String} ORDER BY claimed, claim_id",
		clickhouse.Named("h", hunt))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []lease.Row
	for rows.Next() {
		var r lease.Row
		if err := rows.Scan(&r.HuntID, &r.Fire, &r.Owner, &r.ClaimID, &r.Claimed, &r.Until); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestOptionsValidation(t *testing.T) {
	cases := []struct {
		name string
		opts lease.Options
		ok   bool
	}{
		{"defaults", lease.Options{Owner: "a"}, true},
		{"no owner", lease.Options{}, false},
		{"negative settle", lease.Options{Owner: "a", Settle: -time.Second}, false},
		{"lease under 4x settle", lease.Options{Owner: "a", Lease: 3 * time.Second, Settle: time.Second}, false},
		{"lease exactly 4x settle", lease.Options{Owner: "a", Lease: 4 * time.Second, Settle: time.Second}, true},
		{"default lease vs huge settle", lease.Options{Owner: "a", Settle: 2 * time.Minute}, false},
	}
	// A store over a client pointed nowhere: New must not touch the network.
	st := store.New(fakeConnForValidation(), "").Leases()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := lease.New(st, tc.opts)
			if (err == nil) != tc.ok {
				t.Fatalf("New(%+v) error = %v, want ok=%v", tc.opts, err, tc.ok)
			}
			if tc.ok {
				o := c.Options()
				if o.Lease < 4*o.Settle || o.Logger == nil {
					t.Fatalf("defaults not applied: %+v", o)
				}
			}
		})
	}
	if _, err := lease.New(nil, lease.Options{Owner: "a"}); err == nil {
		t.Fatal("New(nil store) succeeded")
	}
}

func TestClaimRenewRelease(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	c := newCoord(t, db, "pod-a", 10*time.Second, time.Second)
	now := serverNow(t, db)
	f := lease.Fire{HuntID: "h1", Fire: now - 5}

	res, err := c.Claim(ctx, []lease.Fire{f})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Won) != 1 {
		t.Fatalf("claim of a free fire: %+v", res)
	}
	won := res.Won[0]
	if won.HuntID != f.HuntID || won.Fire != f.Fire || won.Owner != "pod-a" || won.ClaimID == uuid.Nil {
		t.Fatalf("won lease = %+v", won)
	}
	if d := won.Until.Sub(won.Claimed); d < 9*time.Second || d > 11*time.Second {
		t.Fatalf("lease length %s, want ~10s", d)
	}
	// Trust ends before the lease does, on the local clock: at most lease − settle from now.
	if d := time.Until(won.Trusted); d <= 0 || d > 9*time.Second {
		t.Fatalf("trusted for %s more, want within (0, lease−settle]", d)
	}

	// A second claim of the held fire, by anyone, loses without writing.
	other := newCoord(t, db, "pod-b", 10*time.Second, time.Second)
	before := len(leaseRows(t, db, "h1"))
	res, err = other.Claim(ctx, []lease.Fire{f})
	if err != nil || len(res.Lost) != 1 || len(res.Won) != 0 {
		t.Fatalf("claim of a held fire: %+v, %v", res, err)
	}
	if after := len(leaseRows(t, db, "h1")); after != before {
		t.Fatalf("a claim of a held fire wrote %d rows", after-before)
	}

	renewed, err := c.Renew(ctx, won)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.ClaimID != won.ClaimID || !renewed.Claimed.After(won.Claimed) || renewed.Until.Before(won.Until) || !renewed.Trusted.After(won.Trusted) {
		t.Fatalf("renewed = %+v from %+v", renewed, won)
	}

	if err := c.Release(ctx, renewed); err != nil {
		t.Fatal(err)
	}
	rows := leaseRows(t, db, "h1")
	last := rows[len(rows)-1]
	// The release ends the lease at its own insert (a 10 s lease would end 10 s on); the two
	// clocks of the row are read a few milliseconds apart on a loaded engine.
	if last.ClaimID != won.ClaimID || last.Until.After(last.Claimed.Add(time.Second)) {
		t.Fatalf("release row = %+v", last)
	}
	// Released: the next claim wins at once.
	res, err = other.Claim(ctx, []lease.Fire{f})
	if err != nil || len(res.Won) != 1 {
		t.Fatalf("claim after release: %+v, %v", res, err)
	}
	// The released lease can no longer be renewed: a peer holds the hunt.
	if _, err := c.Renew(ctx, renewed); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renew after a peer took over: %v, want ErrLost", err)
	}
	// And releasing it again writes nothing over the peer's lease.
	releaseWritesNothing(t, db, c, renewed)
}

func TestExpiredLeaseIsReclaimable(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	a := newCoord(t, db, "pod-a", 4*time.Second, time.Second)
	b := newCoord(t, db, "pod-b", 10*time.Second, time.Second)
	f := lease.Fire{HuntID: "h", Fire: serverNow(t, db)}
	res, err := a.Claim(ctx, []lease.Fire{f})
	if err != nil || len(res.Won) != 1 {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	held := res.Won[0]
	// Wait on the server clock, not ours, for the lease to end.
	waitServerPast(t, db, held.Until)
	if _, err := a.Renew(ctx, held); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renew of an expired lease: %v, want ErrLost", err)
	}
	// Nor is it released: its row would land over a peer claiming the free hunt meanwhile.
	releaseWritesNothing(t, db, a, held)
	res, err = b.Claim(ctx, []lease.Fire{f})
	if err != nil || len(res.Won) != 1 {
		t.Fatalf("claim of an expired lease: %+v, %v", res, err)
	}
	if res.Won[0].Owner != "pod-b" {
		t.Fatalf("winner %+v", res.Won[0])
	}
}

// hookStore runs after each claim insert that the store acknowledged: what a peer does
// between our insert and our verify, deterministically, without polling.
type hookStore struct {
	lease.Store
	after func(ctx context.Context, claims []lease.Row)
}

func (s *hookStore) InsertClaims(ctx context.Context, claims []lease.Row, lease time.Duration) error {
	if err := s.Store.InsertClaims(ctx, claims, lease); err != nil {
		return err
	}
	if s.after != nil {
		s.after(ctx, claims)
	}
	return nil
}

// releaseWritesNothing releases l, which must no longer be releasable, and checks that no
// row was written.
func releaseWritesNothing(t *testing.T, db *chtest.DB, c *lease.Coordinator, l lease.Lease) {
	t.Helper()
	n := len(leaseRows(t, db, l.HuntID))
	if err := c.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if got := len(leaseRows(t, db, l.HuntID)); got != n {
		t.Fatalf("release of %+v wrote %d rows", l, got-n)
	}
}

func waitServerPast(t testing.TB, db *chtest.DB, until time.Time) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var now time.Time
		if err := db.Conn.QueryRow(context.Background(), "SELECT now64(3)").Scan(&now); err != nil {
			t.Fatal(err)
		}
		if now.After(until) {
			return
		}
		time.Sleep(until.Sub(now) + 10*time.Millisecond)
	}
	t.Fatalf("server clock never passed %s", until)
}

func TestAlreadyRun(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	c := newCoord(t, db, "pod-a", 10*time.Second, time.Second)
	now := serverNow(t, db)
	writeWatermark(t, db, "done", now-10)
	writeWatermark(t, db, "behind", now-100)
	res, err := c.Claim(ctx, []lease.Fire{{HuntID: "done", Fire: now - 10}, {HuntID: "behind", Fire: now - 10}, {HuntID: "new", Fire: now - 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.AlreadyRun) != 1 || res.AlreadyRun[0].HuntID != "done" || len(res.Won) != 2 {
		t.Fatalf("result %+v", res)
	}
	if rows := leaseRows(t, db, "done"); len(rows) != 0 {
		t.Fatalf("an already-run fire was claimed: %+v", rows)
	}
}

// A peer finishes the fire (writes its watermark) between our insert and our verify: the
// claim still wins the row but is reported AlreadyRun. Its lease is spent (its fire is
// committed), so nothing is released and the hunt's next fire can be claimed at once.
func TestAlreadyRunDuringSettle(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	now := serverNow(t, db)
	f := lease.Fire{HuntID: "h", Fire: now - 1}
	hook := &hookStore{Store: leases(db), after: func(context.Context, []lease.Row) {
		writeWatermark(t, db, "h", f.Fire)
	}}
	c := newCoordOver(t, hook, lease.Options{Owner: "pod-a", Lease: 10 * time.Second, Settle: time.Second})
	res, err := c.Claim(ctx, []lease.Fire{f})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.AlreadyRun) != 1 || len(res.Won) != 0 {
		t.Fatalf("result %+v", res)
	}
	if rows := leaseRows(t, db, "h"); len(rows) != 1 || !rows[0].Until.After(rows[0].Claimed.Add(time.Second)) {
		t.Fatalf("want the claim row alone, live, got %+v", rows)
	}
	next := lease.Fire{HuntID: "h", Fire: f.Fire + 1}
	hook.after = nil
	if res, err := c.Claim(ctx, []lease.Fire{next}); err != nil || len(res.Won) != 1 {
		t.Fatalf("the next fire under the spent lease: %+v, %v; want it won", res, err)
	}
}

// Two coordinators claim the same 200 due fires at once: every fire is won exactly once.
func TestConcurrentClaimsWinOnce(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	now := serverNow(t, db)
	fires := make([]lease.Fire, 200)
	for i := range fires {
		fires[i] = lease.Fire{HuntID: fmt.Sprintf("hunt-%03d", i), Fire: now - int64(i%60)}
	}
	for round := range 3 {
		var wg sync.WaitGroup
		results := make([]lease.Result, 2)
		errs := make([]error, 2)
		for i := range 2 {
			// A generous settle: the liveness check below (every fire won once) needs each
			// insert acknowledged within it even on a loaded test machine.
			c := newCoord(t, db, fmt.Sprintf("pod-%d-%d", round, i), time.Minute, 3*time.Second)
			wg.Go(func() { results[i], errs[i] = c.Claim(ctx, fires) })
		}
		wg.Wait()
		wins := map[lease.Fire]int{}
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("round %d claimer %d: %v", round, i, errs[i])
			}
			if got := len(r.Won) + len(r.Lost) + len(r.AlreadyRun) + len(r.Failed); got != len(fires) {
				t.Fatalf("round %d claimer %d accounted for %d of %d fires", round, i, got, len(fires))
			}
			for _, l := range r.Won {
				wins[lease.Fire{HuntID: l.HuntID, Fire: l.Fire}]++
			}
		}
		for f, n := range wins {
			if n > 1 {
				t.Fatalf("round %d: %+v won %d times", round, f, n)
			}
		}
		if round == 0 && len(wins) != len(fires) {
			// Both claimers saw every hunt free; at least one of them must have won each.
			t.Fatalf("round 0: %d of %d fires won", len(wins), len(fires))
		}
		if round > 0 && len(wins) != 0 {
			t.Fatalf("round %d won %d fires that are still leased", round, len(wins))
		}
	}
}

// fakeConnForValidation is a real client pointed nowhere: New must not touch the network.
func fakeConnForValidation() driver.Conn {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{"127.0.0.1:1"}})
	if err != nil {
		panic(err)
	}
	return conn
}
