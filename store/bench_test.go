package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// BenchmarkSnapshot compares the three ways of reading the newest row per hunt (argMax over a
// version tuple, FINAL, LIMIT 1 BY) for the one-round-trip Snapshot over 10,000 hunts whose
// rows are spread over several unmerged parts, as between merges in production.
func BenchmarkSnapshot(b *testing.B) {
	db := chtest.NewWithSchema(b)
	ctx := context.Background()
	const hunts, parts = 10_000, 5
	for p := range parts {
		for _, q := range []string{
			`INSERT INTO ` + db.Name + `.hunt_lease SELECT concat('h', toString(number)), toDateTime(1700000000 + 60 * {p:UInt32}, 'UTC'), 'pod',
			   generateUUIDv4(), now64(6) + toIntervalSecond({p:UInt32}), now64(3) + toIntervalSecond({p:UInt32}) FROM numbers({n:UInt64})`,
			`INSERT INTO ` + db.Name + `.hunt_watermark (hunt_id, watermark, claim_id, updated) SELECT concat('h', toString(number)), toDateTime(1700000000 + 60 * {p:UInt32}, 'UTC'),
			   generateUUIDv4(), now64(6) + toIntervalSecond({p:UInt32}) FROM numbers({n:UInt64})`,
			`INSERT INTO ` + db.Name + `.hunt_state (hunt_id, status, consecutive_failures, last_error, last_fire, updated)
			   SELECT concat('h', toString(number)), 'ok', {p:UInt32}, '', toDateTime(1700000000, 'UTC'),
			   now64(6) + toIntervalSecond({p:UInt32}) FROM numbers({n:UInt64})`,
			`INSERT INTO ` + db.Name + `.hunt_request SELECT concat('h', toString(number * 10)), toDateTime(1700000000 + 60 * {p:UInt32} + 30, 'UTC'),
			   generateUUIDv4(), 'bench', now64(6) FROM numbers({n:UInt64} / 10)`,
		} {
			err := db.Conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"optimize_on_insert": 0})), q,
				clickhouse.Named("p", uint32(p)), clickhouse.Named("n", uint64(hunts)))
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	s := New(db.Conn, db.Name)
	// The test machine is shared and noisy: run the forms interleaved and report each one's
	// minimum and median, which load inflates far less than the mean.
	forms := snapshotForms
	took := make([][]time.Duration, len(forms))
	round := 0
	for b.Loop() {
		for k := range forms {
			i := (k + round) % len(forms)
			start := time.Now()
			snap, err := s.snapshot(ctx, forms[i].form)
			took[i] = append(took[i], time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if len(snap.Hunts) != hunts {
				b.Fatalf("%s: %d hunts", forms[i].name, len(snap.Hunts))
			}
			h := snap.Hunts["h10"]
			if h.Watermark != 1700000000+60*(parts-1) || h.ConsecutiveFailures != parts-1 || !h.HasRequest || h.LeaseFire != h.Watermark {
				b.Fatalf("%s: h10 = %+v", forms[i].name, h)
			}
		}
		round++
	}
	for i, f := range forms {
		slices.Sort(took[i])
		b.ReportMetric(float64(took[i][0].Microseconds())/1000, f.name+"-min-ms")
		b.ReportMetric(float64(took[i][len(took[i])/2].Microseconds())/1000, f.name+"-median-ms")
	}
}
