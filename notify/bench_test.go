package notify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

// BenchmarkDelivery measures what notifications cost per committed fire, side by side with the
// runner's per-tick state read (store.Store.Snapshot, one round trip), and reports ratios:
//
//	fire/tick       one fire delivered by one Poll (read, plan, claim, settle, verify, findings,
//	                POST, outcome) ÷ one runner tick's snapshot
//	idle-poll/tick  a Poll with nothing to send ÷ a tick's snapshot: the standing overhead
//
// The settle is 10ms here (750ms by default; it is a wait, not work). "batch" commits 64 fires
// of 16 hunts before one Poll, so the claim round trips and the settle are shared.
func BenchmarkDelivery(b *testing.B) {
	db := testDB(b)
	recv := newReceiver(b)
	cfg := webhookConfig(recv.URL, nil)
	var hunts []hunt.Hunt
	for i := range 16 {
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("h%02d", i), Severity: "high"})
	}
	o := testOptions(db, cfg, "bench")
	o.Batch = 64
	d := newDispatcher(b, db, hunts, o)
	ctx := context.Background()
	wm := store.New(db.Conn, db.Name)
	avg := func(n int, f func()) time.Duration {
		start := time.Now()
		for range n {
			f()
		}
		return time.Since(start) / time.Duration(n)
	}
	next := baseFire().Add(-40 * time.Hour)
	fire := func() time.Time { next = next.Add(time.Minute); return next }
	tick := avg(20, func() {
		if _, err := wm.Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
	})
	idle := avg(20, func() {
		if _, err := d.Poll(ctx); err != nil {
			b.Fatal(err)
		}
	})

	b.Run("one", func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			commit(b, db, hunts[i%len(hunts)].ID, fire(), `{"host":"a"}`, `{"host":"b"}`)
			start := time.Now()
			res, err := d.Poll(ctx)
			total += time.Since(start)
			if err != nil || res.Delivered != 1 {
				b.Fatalf("poll %+v %v", res, err)
			}
		}
		perFire := total / time.Duration(b.N)
		b.ReportMetric(float64(perFire)/float64(tick), "fire/tick")
		b.ReportMetric(float64(idle)/float64(tick), "idle-poll/tick")
	})
	b.Run("batch", func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			f := fire()
			for j := range 64 {
				commit(b, db, hunts[j%len(hunts)].ID, f.Add(time.Duration(j/len(hunts))*time.Second), `{"host":"a"}`)
			}
			start := time.Now()
			res, err := d.Poll(ctx)
			total += time.Since(start)
			if err != nil || res.Delivered != 64 {
				b.Fatalf("poll %+v %v", res, err)
			}
		}
		perFire := total / time.Duration(b.N*64)
		b.ReportMetric(float64(perFire)/float64(tick), "fire/tick")
	})
}
