package notify

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// A sink muted by a time interval (on a pinned clock) receives nothing while the interval
// holds, though the hunt's fires are committed and an unmuted sink gets them all; its
// deliveries are recorded muted, listed by Status, and never sent after the interval, when
// the sink gets the next fire again.
func TestMutedSinkReceivesNothingDuringItsIntervalAndResumesAfter(t *testing.T) {
	db := testDB(t)
	pager, soc := newReceiver(t), newReceiver(t)
	cfg, err := ParseConfig("notify.yaml", []byte(`
time_intervals:
  - name: quiet
    time_intervals:
      - times: [{start_time: "02:00", end_time: "03:00"}]
        location: UTC
sinks:
  - {name: pager, type: webhook, url: "`+pager.URL+`", lookback: 1h, mute_time_intervals: [quiet]}
  - {name: soc, type: webhook, url: "`+soc.URL+`", lookback: 1h}
routes:
  - sinks: [pager, soc]
`))
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	during, after := time.Date(2026, 3, 4, 2, 30, 0, 0, time.UTC), time.Date(2026, 3, 4, 3, 0, 0, 0, time.UTC)
	clock.Store(during.UnixNano())
	o := testOptions(db, cfg, "pod-a")
	o.Clock = func() time.Time { return time.Unix(0, clock.Load()) }
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute", Severity: "high"}}, o)

	base := baseFire()
	f1, f2, f3 := base, base.Add(5*time.Minute), base.Add(10*time.Minute)
	commit(t, db, "brute", f1, `{"host":"a"}`)
	commit(t, db, "brute", f2, `{"host":"b"}`)
	stop := run(t, d)
	chtest.Eventually(t, 60*time.Second, "both fires settled for both sinks", func() bool {
		ds := deliveryRows(t, db)
		return countStatus(ds, StatusMuted) == 2 && countStatus(ds, StatusDelivered) == 2
	})
	if got := pager.requests(); len(got) != 0 {
		t.Fatalf("the muted sink received %d requests during its interval", len(got))
	}
	if got := len(soc.ok(t)); got != 2 {
		t.Errorf("the unmuted sink received %d notifications, want 2", got)
	}
	for k, dl := range deliveryRows(t, db) {
		if k.Sink == "pager" && (dl.Status != StatusMuted || dl.LastError != "muted by time interval quiet") {
			t.Errorf("pager %s: %s %q, want muted by time interval quiet", time.Unix(k.Fire, 0).UTC(), dl.Status, dl.LastError)
		}
	}
	rep, err := Status(context.Background(), db.Conn, db.Name, base.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Muted != 2 || len(rep.Deliveries) != 2 || rep.Deliveries[0].Status != StatusMuted {
		t.Errorf("status: counts %+v, deliveries %+v; want the 2 muted deliveries listed", rep.Counts, rep.Deliveries)
	}

	clock.Store(after.UnixNano()) // end_time is exclusive: 03:00 is outside
	commit(t, db, "brute", f3, `{"host":"c"}`)
	chtest.Eventually(t, 60*time.Second, "the fire after the interval delivered to the pager", func() bool {
		return len(pager.ok(t)) >= 1
	})
	stop()
	// More polls: a muted delivery must not come back once the interval is over.
	for range 3 {
		if _, err := d.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got := pager.ok(t)
	if len(got) != 1 || got[0].IdempotencyKey != IdempotencyKey("brute", f3.Unix(), "pager") {
		t.Fatalf("after the interval the pager got %d notifications (%+v); want only the fire after it", len(got), got)
	}
	if n := countStatus(deliveryRows(t, db), StatusMuted); n != 2 {
		t.Errorf("%d muted deliveries after the interval, want the 2 of it", n)
	}
}

// A snoozed hunt's deliveries are muted on every sink, its runs still committed; after
// unsnooze the next fire is sent and the muted one is not.
func TestSnoozedHuntIsMutedUntilUnsnoozed(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	cfg := webhookConfig(recv.URL, secret(t))
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute", Severity: "high"}, {ID: "dns", Severity: "low"}}, testOptions(db, cfg, "pod-a"))
	st := store.New(db.Conn, db.Name)
	ctx := context.Background()
	if err := st.Snooze(ctx, store.SnoozeRequest{HuntID: "brute", For: time.Hour, Reason: "change window", By: "ana"}); err != nil {
		t.Fatal(err)
	}
	base := baseFire()
	commit(t, db, "brute", base, `{"host":"a"}`)
	commit(t, db, "dns", base, `{"q":"x"}`)
	stop := run(t, d)
	chtest.Eventually(t, 60*time.Second, "brute muted, dns delivered", func() bool {
		ds := deliveryRows(t, db)
		return countStatus(ds, StatusMuted) == 1 && countStatus(ds, StatusDelivered) == 1
	})
	muted := deliveryRows(t, db)[dk("brute", base.Unix(), "soc")]
	if muted.Status != StatusMuted || !strings.HasPrefix(muted.LastError, "snoozed by ana until ") || !strings.HasSuffix(muted.LastError, ": change window") {
		t.Errorf("brute's delivery: %s %q, want muted by the snooze", muted.Status, muted.LastError)
	}
	if got := recv.ok(t); len(got) != 1 || got[0].HuntID != "dns" {
		t.Fatalf("received %+v; want only dns", got)
	}
	if err := st.Unsnooze(ctx, "brute", "ana"); err != nil {
		t.Fatal(err)
	}
	commit(t, db, "brute", base.Add(5*time.Minute), `{"host":"b"}`)
	chtest.Eventually(t, 60*time.Second, "brute's next fire delivered", func() bool { return len(recv.ok(t)) >= 2 })
	stop()
	got := recv.ok(t)
	if len(got) != 2 || got[1].IdempotencyKey != IdempotencyKey("brute", base.Add(5*time.Minute).Unix(), "soc") {
		t.Errorf("received %+v; want dns, then brute's fire after the unsnooze only", got)
	}
}
