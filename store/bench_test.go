package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// BenchmarkSnapshot measures Snapshot over 10,000 hunts whose rows are spread over several
// unmerged parts, as between merges in production.
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
	// The test machine is shared and noisy: report the minimum and median, which load inflates
	// far less than the mean.
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		snap, err := s.Snapshot(ctx)
		took = append(took, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if len(snap.Hunts) != hunts {
			b.Fatalf("%d hunts", len(snap.Hunts))
		}
		h := snap.Hunts["h10"]
		if h.Watermark != 1700000000+60*(parts-1) || h.ConsecutiveFailures != parts-1 || !h.HasRequest || h.LeaseFire != h.Watermark {
			b.Fatalf("h10 = %+v", h)
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[0].Microseconds())/1000, "min-ms")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
}
