package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/lease"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// Engine benchmarks and the round-trip count. Round trips are counted at chlocal
// (GET /chlocal/stats), so these need chlocal rather than a real server.

// engineDB is chtest.NewWithSchema on chlocal only: these tests count round trips there.
func engineDB(tb testing.TB) *chtest.DB {
	tb.Helper()
	if os.Getenv(chtest.EnvURL) != "" {
		tb.Skip("round trips are counted at chlocal; a real server is configured")
	}
	return chtest.NewWithSchema(tb)
}

func engineCoord(tb testing.TB, db *chtest.DB, owner string, settle time.Duration) *lease.Coordinator {
	tb.Helper()
	return newCoord(tb, db, owner, 10*time.Minute, settle)
}

// fillLeases writes n expired lease rows for hunts bulk-000000…, one per hunt (one insert of
// distinct keys, so optimize_on_insert collapses nothing), plus a watermark behind fire.
func fillLeases(tb testing.TB, db *chtest.DB, n int, fire int64) {
	tb.Helper()
	ctx := context.Background()
	err := db.Conn.Exec(ctx, `INSERT INTO `+db.Name+`.hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT concat('bulk-', leftPad(toString(number), 6, '0')), toDateTime({fire:Int64} - 60, 'UTC'), 'old-pod', generateUUIDv4(),
       now64(6) - toIntervalMinute(30), now64(3) - toIntervalMinute(20)
FROM numbers({n:UInt64})`, clickhouse.Named("fire", fire), clickhouse.Named("n", n))
	if err != nil {
		tb.Fatal(err)
	}
	err = db.Conn.Exec(ctx, `INSERT INTO `+db.Name+`.hunt_watermark (hunt_id, watermark, claim_id, updated)
SELECT concat('bulk-', leftPad(toString(number), 6, '0')), toDateTime({fire:Int64} - 60, 'UTC'), generateUUIDv4(), now64(6) - toIntervalMinute(25)
FROM numbers({n:UInt64})`, clickhouse.Named("fire", fire), clickhouse.Named("n", n))
	if err != nil {
		tb.Fatal(err)
	}
}

func bulkFires(n int, fire int64) []lease.Fire {
	out := make([]lease.Fire, n)
	for i := range out {
		out[i] = lease.Fire{HuntID: fmt.Sprintf("bulk-%06d", i), Fire: fire}
	}
	return out
}

// TestClaimRoundTripsFlat counts the requests chlocal serves for one Claim of 1, 100 and
// 1,000 due fires: the same number whatever the batch size.
func TestClaimRoundTripsFlat(t *testing.T) {
	db := engineDB(t)
	now := serverNow(t, db)
	fillLeases(t, db, 1000, now)
	c := engineCoord(t, db, "pod-a", time.Second)
	ctx := context.Background()
	// Warm the connection pool so connection set-up queries are not counted.
	if _, err := c.Claim(ctx, []lease.Fire{{HuntID: "warm-up", Fire: now}}); err != nil {
		t.Fatal(err)
	}
	counts := map[int]int64{}
	start := 0
	for _, n := range []int{1, 100, 1000 - 101} {
		fires := bulkFires(start+n, now)[start:]
		start += n
		var res lease.Result
		var err error
		trips := chtest.Trips(t, db, func() { res, err = c.Claim(ctx, fires) })
		if err != nil || len(res.Won) != n {
			t.Fatalf("claim of %d: won %d, %v", n, len(res.Won), err)
		}
		counts[n] = int64(len(trips))
		if len(trips) != 5 {
			for _, st := range trips {
				t.Logf("claim of %d sent %s: %.120s", n, st.Kind, st.SQL)
			}
		}
	}
	t.Logf("round trips per Claim: %v", counts)
	for n, got := range counts {
		if got != 5 {
			t.Errorf("claim of %d fires took %d round trips, want 5 (free read, insert, verify, extend, read-back)", n, got)
		}
	}

	// Again for the next fire of all 1,000, over a table that now has their history.
	fires := bulkFires(1000, now+60)
	if err := releaseAll(ctx, db, c, fires); err != nil {
		t.Fatal(err)
	}
	var res lease.Result
	var err error
	trips := chtest.Trips(t, db, func() { res, err = c.Claim(ctx, fires) })
	if err != nil || len(res.Won) != len(fires) {
		t.Fatalf("second claim: won %d, %v", len(res.Won), err)
	}
	if got := len(trips); got != 5 {
		t.Errorf("claim of 1000 on a table with history took %d round trips, want 5", got)
	}
}

// releaseAll ends every current lease of fires' hunts with one fenced batch release.
func releaseAll(ctx context.Context, db *chtest.DB, c *lease.Coordinator, fires []lease.Fire) error {
	st := leases(db)
	ids := make([]string, len(fires))
	for i, f := range fires {
		ids[i] = f.HuntID
	}
	v, err := st.Read(ctx, ids)
	if err != nil {
		return err
	}
	var ls []lease.Lease
	for _, r := range v.Leases {
		if r.Until.After(v.Now) {
			ls = append(ls, lease.Lease{HuntID: r.HuntID, Fire: r.Fire, ClaimID: r.ClaimID})
		}
	}
	if len(ls) == 0 {
		return nil
	}
	return st.Release(ctx, ls)
}

// BenchmarkClaimRoundTrips reports round trips per Claim for 1, 100 and 1,000 fires.
func BenchmarkClaimRoundTrips(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("fires=%d", n), func(b *testing.B) {
			db := engineDB(b)
			now := serverNow(b, db)
			fillLeases(b, db, n, now)
			c := engineCoord(b, db, "pod-a", 750*time.Millisecond)
			ctx := context.Background()
			fires := bulkFires(n, now)
			var trips int64
			i := int64(0)
			for b.Loop() {
				b.StopTimer()
				for j := range fires {
					fires[j].Fire = now + i
				}
				i++
				if err := releaseAll(ctx, db, c, fires); err != nil {
					b.Fatal(err)
				}
				before := chtest.Queries(b, db.URL)
				b.StartTimer()
				res, err := c.Claim(ctx, fires)
				b.StopTimer()
				trips += chtest.Queries(b, db.URL) - before
				if err != nil || len(res.Won) != n {
					b.Fatalf("won %d of %d (lost %d, already run %d, failed %d): %v", len(res.Won), n, len(res.Lost), len(res.AlreadyRun), len(res.Failed), err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
		})
	}
}

// BenchmarkClaim1000 compares claiming 1,000 simultaneously due fires over a 100,000-row lease
// table in one batch with the earlier runner's way, one claim (and one settle) at a time.
// One-by-one is measured on the first 20 fires and reported per claim; multiply by 1,000.
func BenchmarkClaim1000(b *testing.B) {
	const settle = 750 * time.Millisecond
	db := engineDB(b)
	now := serverNow(b, db)
	fillLeases(b, db, 100_000, now)
	var rows uint64
	if err := db.Conn.QueryRow(context.Background(), "SELECT count() FROM "+db.Name+".hunt_lease").Scan(&rows); err != nil || rows < 100_000 {
		b.Fatalf("lease table has %d rows: %v", rows, err)
	}
	var trace strings.Builder
	c := newCoordOver(b, leases(db), lease.Options{Owner: "pod-a", Lease: 10 * time.Minute, Settle: settle,
		Logger: slog.New(slog.NewTextHandler(&trace, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := context.Background()
	fires := bulkFires(1000, now)
	var round int64
	next := func() {
		b.StopTimer()
		round++
		for j := range fires {
			fires[j].Fire = now + round
		}
		if err := releaseAll(ctx, db, c, fires); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}

	b.Run("batch", func(b *testing.B) {
		for b.Loop() {
			next()
			res, err := c.Claim(ctx, fires)
			if err != nil || len(res.Won) != len(fires) {
				b.Fatalf("won %d: %v", len(res.Won), err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/1000fires")
		b.Log(strings.TrimSpace(trace.String()))
		trace.Reset()
	})
	b.Run("one-by-one", func(b *testing.B) {
		const sample = 20
		for b.Loop() {
			next()
			for _, f := range fires[:sample] {
				res, err := c.Claim(ctx, []lease.Fire{f})
				if err != nil || len(res.Won) != 1 {
					b.Fatalf("won %d: %v", len(res.Won), err)
				}
			}
		}
		perClaim := float64(b.Elapsed().Milliseconds()) / float64(b.N*sample)
		b.ReportMetric(perClaim, "ms/claim")
		b.ReportMetric(perClaim*1000, "ms/1000fires(extrapolated)")
	})
}

// TestClaimLargeBatch: past lease.MaxStatement hunts per statement a batch is split (URL size
// limits), costing 5 round trips per 2,000 fires and still one settle; every fire is won.
func TestClaimLargeBatch(t *testing.T) {
	db := engineDB(t)
	now := serverNow(t, db)
	const n = 2*lease.MaxStatement + 500
	fillLeases(t, db, n, now)
	c := engineCoord(t, db, "pod-a", 3*time.Second)
	ctx := context.Background()
	if _, err := c.Claim(ctx, []lease.Fire{{HuntID: "warm-up", Fire: now}}); err != nil {
		t.Fatal(err)
	}
	fires := bulkFires(n, now)
	var res lease.Result
	var err error
	trips := chtest.Trips(t, db, func() { res, err = c.Claim(ctx, fires) })
	if err != nil || len(res.Won) != n {
		t.Fatalf("won %d of %d (lost %d): %v", len(res.Won), n, len(res.Lost), err)
	}
	// Three statements of at most 2,000 hunts for each of insert, extend, and each read.
	if got := len(trips); got != 15 {
		t.Fatalf("claim of %d fires took %d round trips, want 15", n, got)
	}
	seen := map[string]bool{}
	for _, l := range res.Won {
		if seen[l.HuntID] {
			t.Fatalf("%s won twice in one batch", l.HuntID)
		}
		seen[l.HuntID] = true
	}
}
