package legacy

import (
	"fmt"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// BenchmarkImport migrates n hunts, each with an earlier watermark and hunt_state, into an
// empty hunt-runner database on the engine: hunts_per_s is the figure docs/runner.md's sizing
// table quotes (the target: 100,000 hunts within 60 s). Run the sizes side by side:
// go test -run '^$' -bench Import -benchtime 1x ./legacy.
func BenchmarkImport(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("hunts=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				f := newFixture(b, true)
				hunts := make([]hunt.Hunt, n)
				w := schedule.LatestFire(f.now, 600, 60) - 600
				f.exec(f.old, "INSERT INTO hunt_watermark (hunt_id, watermark) SELECT concat('h', toString(number)), ? FROM numbers(?)", w, n)
				f.exec(f.old, "INSERT INTO hunt_state (hunt_id, overrun_count, too_aggressive) SELECT concat('h', toString(number)), 2, 1 FROM numbers(?)", n)
				for i := range hunts {
					hunts[i] = hunt.Hunt{ID: fmt.Sprintf("h%d", i), File: fmt.Sprintf("h%d.yaml", i), Interval: 600 * time.Second, Offset: 60 * time.Second, Enabled: true}
				}
				b.StartTimer()
				start := time.Now()
				res := f.importNow(hunts, false)
				took := time.Since(start)
				b.StopTimer()
				if got := res.Count(ActionImport); got != n {
					b.Fatalf("%d hunts imported, want %d", got, n)
				}
				if got := f.count("SELECT count() FROM hunt_state"); got != uint64(n) {
					b.Fatalf("%d states carried, want %d", got, n)
				}
				b.ReportMetric(float64(n)/took.Seconds(), "hunts_per_s")
				b.StartTimer()
			}
		})
	}
}
