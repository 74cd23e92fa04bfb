package notify

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// pollUntil runs d.Poll until cond holds.
func pollUntil(t *testing.T, d *Dispatcher, what string, cond func() bool) {
	t.Helper()
	chtest.Eventually(t, 60*time.Second, what, func() bool {
		if _, err := d.Poll(context.Background()); err != nil {
			t.Logf("poll: %v", err)
		}
		return cond()
	})
}

// A sink enabled after an hour of history receives none of it by default: only fires
// committed after it was first enabled. The enablement is recorded, not per process: a fire
// committed while no Dispatcher ran is still owed after a restart. A sink with lookback gets
// the history as well, one hunt's fires oldest first.
func TestSinkEnabledAfterHistoryGetsOnlyNewFires(t *testing.T) {
	db := testDB(t)
	recv, hist := newReceiver(t), newReceiver(t)
	now := time.Now().UTC().Truncate(time.Minute)
	var history []time.Time
	for i := range 60 {
		fire := now.Add(time.Duration(i-60) * time.Minute)
		commitAt(t, db, "h", fire, fire.Add(2*time.Second), fmt.Sprintf(`{"n":%d}`, i))
		history = append(history, fire)
	}
	hunts := []hunt.Hunt{{ID: "h", Severity: "high"}}
	// Both sinks are enabled by the same first poll; "hist" asks for two hours of history.
	cfg := &Config{Sinks: []Sink{{Name: "new", Type: TypeWebhook, URLs: []string{recv.URL}, Timeout: 5 * time.Second},
		{Name: "hist", Type: TypeWebhook, URLs: []string{hist.URL}, Timeout: 5 * time.Second, Lookback: 2 * time.Hour}},
		Routes: []Route{{Sinks: []string{"new", "hist"}}}, MaxFindings: NotifyFindingsDefault, Horizon: HorizonDefault}
	o := testOptions(db, cfg, "a")
	o.Concurrency = 8
	d := newDispatcher(t, db, hunts, o)
	if _, err := d.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	commit(t, db, "h", now, `{"n":"new"}`)
	want := append(history, now)
	pollUntil(t, d, "the history and the new fire delivered to the sink with lookback, the new fire to the other",
		func() bool { return len(hist.ok(t)) >= len(want) && len(recv.ok(t)) >= 1 })
	if got := recv.ok(t); len(got) != 1 || got[0].Fire != rfc3339(now) {
		t.Fatalf("a sink enabled after an hour of history got %d notifications (the first of fire %s), want only the new fire", len(got), got[0].Fire)
	}
	for k := range deliveryRows(t, db) {
		if k.Sink == "new" && k.Fire != now.Unix() {
			t.Errorf("history fire %s planned for the new sink", time.Unix(k.Fire, 0).UTC())
		}
	}
	var got []string
	for _, p := range hist.ok(t) {
		got = append(got, p.Fire)
	}
	wantS := make([]string, len(want))
	for i, f := range want {
		wantS[i] = rfc3339(f)
	}
	if !slices.Equal(got, wantS) {
		t.Errorf("fires delivered in the order\n%v\nwant oldest first\n%v", got, wantS)
	}

	// A restart keeps the first enablement: a fire committed while no Dispatcher ran is owed.
	// A batch of 2 reads 8 fires a poll: history that the read did not leave out would crowd
	// the new fire out of every poll.
	later := now.Add(time.Minute)
	commit(t, db, "h", later, `{"n":"while down"}`)
	cfg2 := &Config{Sinks: cfg.Sinks[:1], Routes: []Route{{Sinks: []string{"new"}}}, MaxFindings: NotifyFindingsDefault, Horizon: HorizonDefault}
	o2 := testOptions(db, cfg2, "b")
	o2.Batch = 2
	d2 := newDispatcher(t, db, hunts, o2)
	pollUntil(t, d2, "the fire committed between Dispatchers delivered", func() bool { return len(recv.ok(t)) >= 2 })
}

// One (hunt, sink)'s fires are one queue under one claim, sent oldest first. The claim is
// renewed from the win until the queue is done, so fires waiting behind a delivery slower than
// the whole lease are still sent under it, once each and in order, and no peer takes the
// (hunt, sink) meanwhile.
func TestQueueSentUnderOneRenewedClaim(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	recv.hold = make(chan struct{})
	recv.arrived = make(chan string, 16)
	fire := baseFire()
	var want []string
	for i := range 3 {
		f := fire.Add(time.Duration(i) * time.Minute)
		commit(t, db, "q", f, fmt.Sprintf(`{"n":%d}`, i))
		want = append(want, rfc3339(f))
	}
	o := testOptions(db, webhookConfig(recv.URL, nil), "a")
	o.Lease = 2 * time.Second
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "q"}}, o)
	done := make(chan PollResult, 1)
	go func() {
		for { // until a poll wins the claim: the first need not
			r, err := d.Poll(context.Background())
			if err != nil {
				t.Log(err)
			}
			if r.Claimed > 0 {
				done <- r
				return
			}
		}
	}()
	<-recv.arrived // the oldest fire is in flight; the others wait in its queue
	_, first := claimOf(t, db, "q", "soc")
	// Hold it until the claim has been renewed past twice its first length.
	chtest.Eventually(t, 30*time.Second, "the claim renewed past two leases", func() bool {
		_, until := claimOf(t, db, "q", "soc")
		return until.After(first.Add(2 * o.Lease))
	})
	peer := testOptions(db, webhookConfig(recv.URL, nil), "b")
	if r, err := newDispatcher(t, db, []hunt.Hunt{{ID: "q"}}, peer).Poll(context.Background()); err != nil || r.Claimed != 0 {
		t.Errorf("a peer's poll while the queue is held: %+v %v, want nothing claimed", r, err)
	}
	close(recv.hold)
	r := <-done
	if r.Claimed != 3 || r.Delivered != 3 || r.Deferred != 0 {
		t.Errorf("poll result %+v, want the three fires claimed and delivered in one poll", r)
	}
	var got []string
	for _, p := range recv.ok(t) {
		got = append(got, p.Fire)
	}
	if !slices.Equal(got, want) {
		t.Errorf("fires delivered %v, want once each oldest first %v", got, want)
	}
}

// A sink that already has deliveries when its enablement is first recorded (it was in use
// before: an upgrade) counts as enabled from its first delivery, so fires committed since
// then, and not yet planned, are still owed to it.
func TestSinkInUseBeforeEnablementKeepsItsFires(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	now := time.Now().UTC().Truncate(time.Minute)
	// The earlier version planned and delivered a fire two hours ago...
	old := now.Add(-2 * time.Hour)
	commitAt(t, db, "h", old, old.Add(time.Second), `{"n":"old"}`)
	err := db.Conn.Exec(context.Background(), "INSERT INTO "+schema.QuoteIdent(db.Name)+"."+schema.TableDelivery+
		" (hunt_id, fire, sink, run_id, idempotency_key, status, attempts, last_error, next_attempt, created, delivered, claim_id, owner, lease_until, updated) SELECT 'h', toDateTime({f:Int64}, 'UTC'), 'soc', generateUUIDv4(), 'k', 'delivered', 1, '',"+
		" toDateTime64(0, 3, 'UTC'), fromUnixTimestamp64Micro({c:Int64}, 'UTC'), fromUnixTimestamp64Micro({c:Int64}, 'UTC'),"+
		" generateUUIDv4(), 'old-version', toDateTime64(0, 3, 'UTC'), fromUnixTimestamp64Micro({c:Int64}, 'UTC')",
		clickhouse.Named("f", old.Unix()), clickhouse.Named("c", old.Add(2*time.Second).UnixMicro()))
	if err != nil {
		t.Fatal(err)
	}
	// ...and then stopped; these fires committed while no Dispatcher ran.
	for i := range 3 {
		f := now.Add(time.Duration(i-30) * time.Minute)
		commitAt(t, db, "h", f, f.Add(time.Second), fmt.Sprintf(`{"n":%d}`, i))
	}
	cfg := &Config{Sinks: []Sink{{Name: "soc", Type: TypeWebhook, URLs: []string{recv.URL}, Timeout: 5 * time.Second}},
		Routes: []Route{{Sinks: []string{"soc"}}}, MaxFindings: NotifyFindingsDefault, Horizon: HorizonDefault}
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "h"}}, testOptions(db, cfg, "a"))
	pollUntil(t, d, "the fires committed while stopped delivered", func() bool { return len(recv.ok(t)) >= 3 })
	if n := len(recv.ok(t)); n != 3 {
		t.Errorf("%d notifications, want the 3 unplanned fires (the delivered one is not sent again)", n)
	}
}
