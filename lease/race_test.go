package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/lease"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// barrierStore holds every claimer after its free read until all have read, so all of them
// go on to insert having seen every hunt free: only the server-side re-check in the
// conditional insert stands between them and a double claim.
type barrierStore struct {
	lease.Store
	reads *sync.WaitGroup
	once  sync.Once
}

func (b *barrierStore) Read(ctx context.Context, hunts []string) (lease.View, error) {
	v, err := b.Store.Read(ctx, hunts)
	first := false
	b.once.Do(func() { first = true })
	if first {
		b.reads.Done()
		b.reads.Wait()
	}
	return v, err
}

func TestConditionalInsertStopsRacers(t *testing.T) {
	db := engineDB(t)
	now := serverNow(t, db)
	fires := make([]lease.Fire, 200)
	ids := make([]string, len(fires))
	for i := range fires {
		fires[i] = lease.Fire{HuntID: fmt.Sprintf("race-%03d", i), Fire: now}
		ids[i] = fires[i].HuntID
	}
	const claimers = 3
	var reads sync.WaitGroup
	reads.Add(claimers)
	results := make([]lease.Result, claimers)
	errs := make([]error, claimers)
	var wg sync.WaitGroup
	for i := range claimers {
		c := newCoordOver(t, &barrierStore{Store: leases(db), reads: &reads},
			lease.Options{Owner: fmt.Sprintf("pod-%d", i), Lease: 10 * time.Minute, Settle: 3 * time.Second})
		wg.Go(func() { results[i], errs[i] = c.Claim(context.Background(), fires) })
	}
	wg.Wait()
	wins := map[string]int{}
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("claimer %d: %v", i, errs[i])
		}
		for _, l := range r.Won {
			wins[l.HuntID]++
		}
	}
	for _, f := range fires {
		if wins[f.HuntID] != 1 {
			t.Fatalf("%s won %d times, want exactly once", f.HuntID, wins[f.HuntID])
		}
	}
	// Every claimer attempted every hunt, yet each hunt has exactly one claim (its row, and the
	// winner's extension of it): the later inserts' WHERE saw the first claim and wrote nothing.
	var hunts, maxRows uint64
	err := db.Conn.QueryRow(context.Background(),
		"SELECT count(), max(c) FROM (SELECT hunt_id, uniqExact(claim_id) AS c FROM "+db.Name+".hunt_lease WHERE hunt_id IN {ids:Array(String)} GROUP BY hunt_id)",
		clickhouse.Named("ids", ids)).Scan(&hunts, &maxRows)
	if err != nil {
		t.Fatal(err)
	}
	if hunts != uint64(len(fires)) || maxRows != 1 {
		t.Fatalf("%d hunts with claim rows, at most %d rows per hunt; want %d and 1", hunts, maxRows, len(fires))
	}
}
