package notify

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// A Dispatcher paused after its sink answered (its outcome write held on the server, its
// renewals refused) loses its claim before the outcome lands: the fenced write lands nowhere,
// the read-back says so, and the delivery is not counted delivered but sent again, with the
// same key, by the next holder.
func TestLostClaimOutcomeNotRecordedAsDelivered(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, db.Conn, db.Name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	recv := newReceiver(t)
	fire := baseFire()
	commit(t, db, "brute", fire, `{"host":"a"}`)
	o := testOptions(db, webhookConfig(recv.URL, nil), "pod-a")
	o.Lease = 2 * time.Second
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute"}}, o)
	srv.SetFaults(t,
		// The outcome write (the only delivery write with a backoff) starts only
		// once the lease has certainly run out on the server's clock.
		ctl.FaultRule{Name: "paused-outcome", Kind: ctl.KindInsert, Match: `(?s)hunt_delivery.*backoff_ms`, Times: 1,
			Effect: ctl.DelayStart, Delay: 3 * o.Lease},
		// Renewals (the lease length is literal SQL in them) are refused meanwhile.
		ctl.FaultRule{Name: "no-renewal", Kind: ctl.KindInsert, Match: `(?s)hunt_lease.*toIntervalMillisecond\([0-9]+\)`,
			Effect: ctl.FailBefore, Code: 1001})
	var r PollResult
	chtest.Eventually(t, 60*time.Second, "a poll that wins the claim", func() bool {
		var err error
		r, err = d.Poll(ctx)
		return err == nil && r.Claimed > 0
	})
	if r.Delivered != 0 || r.Lost != 1 || len(recv.ok(t)) != 1 {
		t.Fatalf("poll %+v with %d answered requests: want the sink's answer not recorded (lost)", r, len(recv.ok(t)))
	}
	var n uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM "+schema.QuoteIdent(db.Name)+"."+schema.TableDelivery+
		" WHERE owner = {o:String} AND status = 'delivered'", clickhouse.Named("o", "pod-a")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d delivered rows by the claim that was lost (%v)", n, err)
	}
	srv.ClearFaults(t)
	chtest.Eventually(t, 60*time.Second, "the delivery sent again and recorded", func() bool {
		_, _ = d.Poll(ctx)
		return deliveryRows(t, db)[dk("brute", fire.Unix(), "soc")].Status == StatusDelivered
	})
	oks := recv.ok(t)
	for _, p := range oks[1:] {
		if p.IdempotencyKey != oks[0].IdempotencyKey {
			t.Errorf("answered requests %+v: want one key throughout", oks)
		}
	}
	if row := deliveryRows(t, db)[dk("brute", fire.Unix(), "soc")]; len(oks) < 2 || row.Attempts < 2 {
		t.Errorf("final row %+v after %d answered requests: want it delivered by a later attempt", row, len(oks))
	}
}
