package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// benchHunts is the size of the published schedule in BenchmarkDueSQL (issue 3); wmGens the
// commit rows per hunt in hunt_watermark, one insert (part) each.
const (
	benchHunts = 100_000
	wmGens     = 4
)

// sqlForm is one way of writing the due query, for the parity test and the benchmark: the two
// production forms and the argMax baseline, which only the tests need.
type sqlForm struct {
	name     string
	core     func(database, nowExpr string) string // one row per due hunt, as dueCore
	settings string
}

func (f sqlForm) countSQL(database, nowExpr string) string {
	return "SELECT toUInt64(count()) AS due FROM (\n" + f.core(database, nowExpr) + "\n)" + f.settings
}

var (
	liveForm   = sqlForm{"live", func(d, n string) string { return dueCore(formLive, d, n, "") }, dueSettings(formLive)}
	newestForm = sqlForm{"newest", func(d, n string) string { return dueCore(formNewest, d, n, "") }, dueSettings(formNewest)}
	argMaxForm = sqlForm{"argmax", func(d, n string) string {
		return joinedDue(d, "toInt64("+n+")", argMaxParts(schema.QuoteIdent(d)))
	}, ""}
	sqlForms = []sqlForm{liveForm, newestForm, argMaxForm}
)

// argMaxParts is the earlier Python runner's shape: argMax … GROUP BY per table (it ignored
// requests and backoff; here they are read the same way). The benchmark's baseline.
func argMaxParts(db string) dueParts {
	return dueParts{
		sched: `SELECT hunt_id, i, p FROM (SELECT hunt_id, argMax(interval_seconds, updated) AS i, argMax(phase_offset, updated) AS p, argMax(enabled, updated) AS e FROM ` + db + `.` + schema.TableSchedule + ` GROUP BY hunt_id) WHERE e = 1 AND i > 0`,
		lease: `SELECT hunt_id, toUInt8(1) AS has_lease, toUnixTimestamp64Milli(argMax(lease_until, (claimed, claim_id))) AS lu_ms, toInt64(argMax(fire, (claimed, claim_id))) AS lf FROM ` + db + `.` + schema.TableLease + ` GROUP BY hunt_id`,
		state: `SELECT hunt_id, toUInt8(1) AS has_st, toUnixTimestamp64Milli(argMax(retry_after, updated)) AS ra_ms FROM ` + db + `.` + schema.TableState + ` GROUP BY hunt_id`,
	}
}

// seedBacklog publishes n hunts (5% of them later tombstoned) with wmGens commit rows and two
// lease rows per hunt, live leases on 1% of hunts (1,000 runs in flight), hunt_state rows for
// 10% of hunts (two each; the newest puts 1% of hunts in backoff) and a few hundred run-now
// requests. Merges are stopped before the inserts, so every run times the same state: one
// unmerged part per insert, parts whose key ranges overlap end to end, as production tables
// are between background merges (a background merge racing the timed loop would otherwise make
// FINAL cheaper part-way through, by chance).
func seedBacklog(ctx context.Context, b testing.TB, conn driver.Conn, database string, n int, now int64) {
	b.Helper()
	db := schema.QuoteIdent(database)
	for _, table := range []string{schema.TableSchedule, schema.TableWatermark, schema.TableLease, schema.TableState} {
		if err := conn.Exec(ctx, "SYSTEM STOP MERGES "+db+"."+table); err != nil {
			b.Fatalf("stop merges on %s: %v", table, err)
		}
	}
	send := func(table, cols string, rows int, row func(i int) []any) {
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+"."+table+" ("+cols+")")
		if err != nil {
			b.Fatal(err)
		}
		for i := range rows {
			if err := batch.Append(row(i)...); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			b.Fatalf("insert %s: %v", table, err)
		}
	}
	intervals := []uint32{60, 300, 600, 3600, 86400}
	id := func(i int) string { return fmt.Sprintf("hunt-%06d", i) }
	t0 := time.Unix(now, 0).UTC()
	send(schema.TableSchedule, "hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated", n, func(i int) []any {
		iv := intervals[i%len(intervals)]
		return []any{id(i), iv, uint32(schedule.PhaseOffset(id(i), int64(iv), schedule.DefaultSpreadFraction)), uint8(1), "h", t0.Add(-time.Hour)}
	})
	send(schema.TableSchedule, "hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated", n/20, func(i int) []any {
		return []any{id(i * 20), uint32(0), uint32(0), uint8(0), "", t0.Add(-time.Minute)}
	})
	for gen := range wmGens {
		send(schema.TableWatermark, "hunt_id, watermark, claim_id, updated", n, func(i int) []any {
			iv := int64(intervals[i%len(intervals)])
			fire := schedule.LatestFire(now, iv, schedule.PhaseOffset(id(i), iv, schedule.DefaultSpreadFraction))
			wm := fire - iv*int64(wmGens-1-gen) // the newest commit covers the latest fire for most hunts
			if i%7 == 0 {
				wm = min(wm, fire-iv)
			}
			return []any{id(i), time.Unix(wm, 0).UTC(), uuid.New(), t0.Add(time.Duration(gen-10) * time.Second)}
		})
	}
	for gen := range 2 {
		send(schema.TableState, "hunt_id, status, consecutive_failures, updated, retry_after", n/10, func(i int) []any {
			retry := time.Unix(0, 0).UTC()
			if gen == 1 && i%10 == 0 {
				retry = t0.Add(time.Minute) // in backoff: 1% of hunts
			} else if gen == 0 {
				retry = t0.Add(-time.Minute)
			}
			return []any{id(i * 10), "failed", uint32(gen + 1), t0.Add(time.Duration(gen-30) * time.Second), retry}
		})
		send(schema.TableLease, "hunt_id, fire, owner, claim_id, claimed, lease_until", n, func(i int) []any {
			until := t0.Add(-time.Duration(i%300) * time.Second)
			if gen == 1 && i%100 == 0 {
				until = t0.Add(5 * time.Minute) // a live lease: 1% of hunts running right now
			}
			return []any{id(i), t0, "pod-a", uuid.New(), t0.Add(time.Duration(gen-20) * time.Second), until}
		})
	}
	send(schema.TableRequest, "hunt_id, requested_fire, request_id, requested_by, requested", 300, func(i int) []any {
		return []any{id(i * 333), t0, uuid.New(), "bench", t0}
	})
}

// scanSQL reads every column the due query reads, with no resolution of newest rows: the floor
// any due query pays for I/O and decoding. hunt_watermark is read as the due query reads it,
// through its per-hunt max projection: every commit row is not a floor the query must pay.
func scanSQL(database string) string {
	db := schema.QuoteIdent(database)
	return fmt.Sprintf(`SELECT
  (SELECT sum(cityHash64(hunt_id, interval_seconds, phase_offset, enabled, updated)) FROM %[1]s.hunt_schedule)
+ (SELECT sum(cityHash64(hunt_id, wm)) FROM (SELECT hunt_id, max(watermark) AS wm FROM %[1]s.hunt_watermark GROUP BY hunt_id))
+ (SELECT sum(cityHash64(hunt_id, claimed, claim_id, lease_until)) FROM %[1]s.hunt_lease)
+ (SELECT sum(cityHash64(hunt_id, requested_fire)) FROM %[1]s.hunt_request)
+ (SELECT sum(cityHash64(hunt_id, updated, retry_after)) FROM %[1]s.hunt_state)`, db)
}

// BenchmarkDueSQL times, side by side in each iteration on the same engine and data, every
// form of the due query, the earlier runner's argMax…GROUP BY + joins form (b) and a plain scan
// of the same columns (c), and reports each as a ratio: ×argmax = argmax time / form time
// (higher is better, goal ≥ 3 for the chosen form), ×scan = form time / scan time (goal ≤ 1.5).
// All forms must return the same count (the parity test checks them per hunt).
func BenchmarkDueSQL(b *testing.B) {
	db := chtest.NewWithSchema(b)
	ctx := context.Background()
	now := time.Now().Unix()
	seedBacklog(ctx, b, db.Conn, db.Name, benchHunts, now)
	nowExpr := fmt.Sprintf("toDateTime(%d, 'UTC')", now)

	counts := map[string]uint64{}
	for _, f := range sqlForms { // warm up, and check the forms agree
		n, err := New(db.Conn, db.Name).countDue(ctx, f.countSQL(db.Name, nowExpr))
		if err != nil {
			b.Fatalf("%s: %v", f.name, err)
		}
		counts[f.name] = n
	}
	for _, f := range sqlForms {
		if counts[f.name] != counts[liveForm.name] {
			b.Fatalf("form %s counts %d, live %d", f.name, counts[f.name], counts[liveForm.name])
		}
	}
	if counts[liveForm.name] == 0 {
		b.Fatal("nothing due in the benchmark data")
	}

	spent := map[string]time.Duration{}
	var scan time.Duration
	b.ResetTimer()
	for b.Loop() {
		for _, f := range sqlForms {
			start := time.Now()
			if _, err := New(db.Conn, db.Name).countDue(ctx, f.countSQL(db.Name, nowExpr)); err != nil {
				b.Fatal(err)
			}
			spent[f.name] += time.Since(start)
		}
		start := time.Now()
		rows, err := db.Conn.Query(ctx, scanSQL(db.Name))
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		rows.Close()
		scan += time.Since(start)
	}
	iters := float64(b.N)
	for _, f := range sqlForms {
		b.ReportMetric(float64(spent[f.name].Milliseconds())/iters, f.name+"-ms")
		if f.name != argMaxForm.name {
			b.ReportMetric(float64(spent[argMaxForm.name])/float64(spent[f.name]), f.name+"-×argmax")
			b.ReportMetric(float64(spent[f.name])/float64(scan), f.name+"-×scan")
		}
	}
	b.ReportMetric(float64(scan.Milliseconds())/iters, "scan-ms")
	b.ReportMetric(float64(counts[liveForm.name]), "due")
}
