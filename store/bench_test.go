package store

import (
	"context"
	"fmt"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/lease"
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

// commitPool is a benchmark's set of hunts that commit one fire per round, each under a lease
// written (untimed) before the round, on top of commitHistory earlier commits per hunt.
type commitPool struct {
	hunts []string
	wm    int64 // every hunt's watermark: the rounds keep them in step
}

// commitHistory is each benchmark hunt's earlier commits: a day of a minutely hunt, in four
// parts, so the compare reads a hunt's history as production's does between merges.
const commitHistory = 1440

func newCommitPool(b *testing.B, db *chtest.DB, name string, n int) *commitPool {
	b.Helper()
	ctx := context.Background()
	p := &commitPool{wm: 1_700_000_000 + 60*(commitHistory-1)}
	for i := range n {
		p.hunts = append(p.hunts, fmt.Sprintf("%s-%d", name, i))
	}
	const parts = 4
	for part := range parts {
		err := db.Conn.Exec(ctx, `INSERT INTO `+db.Name+`.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id)
			SELECT h, toDateTime(1700000000 + 60 * i, 'UTC'), generateUUIDv4(), now64(6), generateUUIDv4()
			FROM (SELECT arrayJoin({hunts:Array(String)}) AS h) ARRAY JOIN range({from:UInt32}, {to:UInt32}) AS i`,
			clickhouse.Named("hunts", p.hunts), clickhouse.Named("from", uint32(part*commitHistory/parts)),
			clickhouse.Named("to", uint32((part+1)*commitHistory/parts)))
		if err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// round writes a fresh lease for every hunt's next fire and returns the commits of that fire.
func (p *commitPool) round(b *testing.B, db *chtest.DB) []Commit {
	b.Helper()
	fire := p.wm + 60
	commits := make([]Commit, len(p.hunts))
	claims := make([]string, len(p.hunts))
	for i, h := range p.hunts {
		l := lease.Lease{HuntID: h, Fire: fire, ClaimID: uuid.New(), Watermark: p.wm, HasWatermark: true}
		run := Run{RunID: uuid.New(), Owner: "bench", WindowStart: p.wm, WindowEnd: fire, Started: time.Now(), Interval: 60}
		commits[i], claims[i] = Commit{Lease: l, Run: run}, l.ClaimID.String()
	}
	err := db.Conn.Exec(context.Background(), `INSERT INTO `+db.Name+`.hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until)
		SELECT r.1, toDateTime({fire:Int64}, 'UTC'), 'bench', toUUID(r.2), now64(6), now64(3) + INTERVAL 1 HOUR
		FROM (SELECT arrayJoin(arrayZip({hunts:Array(String)}, {claims:Array(String)})) AS r)`,
		clickhouse.Named("fire", fire), clickhouse.Named("hunts", p.hunts), clickhouse.Named("claims", claims))
	if err != nil {
		b.Fatal(err)
	}
	p.wm = fire
	return commits
}

// BenchmarkCommit measures the engine's commits per second (compare-and-set and read-back, the
// runner's commit) one fire at a time and in batches, side by side: every iteration runs one
// round of each on its own pool of 64 hunts, so machine load falls on all of them alike.
func BenchmarkCommit(b *testing.B) {
	db := chtest.NewWithSchema(b)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	const hunts = 64
	sizes := []int{1, 8, 32}
	pools := make([]*commitPool, len(sizes))
	took := make([]time.Duration, len(sizes))
	for i, n := range sizes {
		pools[i] = newCommitPool(b, db, fmt.Sprintf("batch%d", n), hunts)
	}
	commits := 0
	for b.Loop() {
		for i, n := range sizes {
			round := pools[i].round(b, db)
			start := time.Now()
			for c := range slices.Chunk(round, n) {
				for j, err := range s.AdvanceAll(ctx, c) {
					if err != nil {
						b.Fatalf("%s: %v", c[j].Lease.HuntID, err)
					}
				}
			}
			took[i] += time.Since(start)
		}
		commits += hunts
	}
	one := float64(commits) / took[0].Seconds()
	for i, n := range sizes {
		rate := float64(commits) / took[i].Seconds()
		b.ReportMetric(rate, fmt.Sprintf("fires/s-batch%d", n))
		if i > 0 {
			b.ReportMetric(rate/one, fmt.Sprintf("x-batch%d", n))
		}
	}
}
