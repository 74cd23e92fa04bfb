package configsrc

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// BenchmarkStartupCheck measures the server check of a start-up's hunts on the engine, side by
// side: cold (nothing cached: every hunt parsed), one statement per hunt ("cold-single", the
// check before batching), CheckBatchDefault hunts per statement each in the full findings
// wrapper ("cold-full", the batches before batchFindingsQuery) and in the batch wrapper
// ("cold"), and warm (a
// restart with every revision already accepted under the same scope: one read of hunt_check).
// ready_s is the time the check of the whole set takes, ms/hunt that over the hunts and
// s/100k its projection to 100,000 (linear: the cost is per request and per hunt parsed);
// heap_MiB the heap in use after it, with the hunts held. The warm 100,000 is seeded through
// RecordChecked rather than checked.
// go test -run '^$' -bench StartupCheck -benchtime 1x ./configsrc
func BenchmarkStartupCheck(b *testing.B) {
	for _, tc := range []struct {
		n      int
		warm   bool
		single bool
		full   bool
	}{{1_000, false, true, false}, {1_000, false, false, true}, {1_000, false, false, false},
		{10_000, false, true, false}, {10_000, false, false, true}, {10_000, false, false, false},
		{1_000, true, false, false}, {10_000, true, false, false}, {100_000, true, false, false}} {
		name := fmt.Sprintf("hunts=%d/cold", tc.n)
		switch {
		case tc.warm:
			name = fmt.Sprintf("hunts=%d/warm", tc.n)
		case tc.single:
			name = fmt.Sprintf("hunts=%d/cold-single", tc.n)
		case tc.full:
			name = fmt.Sprintf("hunts=%d/cold-full", tc.n)
		}
		b.Run(name, func(b *testing.B) {
			db := chtest.NewWithSchema(b)
			st := store.New(db.Conn, db.Name)
			ctx := context.Background()
			hunts := make([]hunt.Hunt, tc.n)
			hashes := make([]string, tc.n)
			for i := range hunts {
				h := hunt.Hunt{ID: fmt.Sprintf("h%d", i), File: fmt.Sprintf("h%d.yaml", i), Interval: 5 * time.Minute, Enabled: true,
					Query: fmt.Sprintf("SELECT user, '%d' AS version FROM sample.auth_events\nWHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}", i)}
				h.Hash = h.ComputeHash()
				hunts[i], hashes[i] = h, h.Hash
			}
			c := &serverChecker{conn: db.Conn}
			if tc.single {
				c.batch = 1
			}
			if tc.full {
				c.batchWrap = FindingsQuery
			}
			if tc.warm {
				var version string
				if err := db.Conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
					b.Fatal(err)
				}
				if err := st.RecordChecked(ctx, CheckScope(version, Policy{}), hashes); err != nil {
					b.Fatal(err)
				}
			}
			log := slog.New(slog.DiscardHandler)
			for b.Loop() {
				b.StopTimer()
				if !tc.warm {
					if err := db.Conn.Exec(ctx, "TRUNCATE TABLE hunt_check"); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				start := time.Now()
				v := c.verdicts(ctx, hunts, nil, st, log)
				took := time.Since(start)
				b.StopTimer()
				for _, h := range hunts {
					if err := v[h.Hash]; err != nil {
						b.Fatalf("%s: %v", h.ID, err)
					}
				}
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				b.ReportMetric(took.Seconds(), "ready_s")
				b.ReportMetric(took.Seconds()*1000/float64(tc.n), "ms/hunt")
				b.ReportMetric(took.Seconds()*100_000/float64(tc.n), "s/100k")
				b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap_MiB")
				runtime.KeepAlive(hunts)
				b.StartTimer()
			}
		})
	}
}
