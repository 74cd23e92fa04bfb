package store

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// The parity test proves DueCountSQL (every form of it) and IsDue agree on the real engine.
//
// Each case is one hunt with its own schedule history, watermark (commit) rows, lease rows,
// hunt_state rows and run-now requests, built around one "now". All cases live in one database; for every distinct now the
// SQL runs once and is compared with IsDue over every hunt in the table (so each hunt is also
// checked at the other cases' nows), per hunt for the production form and by count for the others.

type parityScheduleRow struct {
	schedule.Row
	updated time.Time
}

type parityWatermarkRow struct {
	watermark int64
	updated   time.Time
}

type parityLeaseRow struct {
	leaseUntilMs int64
	fire         int64
	claimed      time.Time
	claimID      uuid.UUID
}

type parityStateRow struct {
	retryAfterMs int64 // 0: the row sets no backoff
	updated      time.Time
}

type parityPauseRow struct {
	paused  bool
	untilMs int64 // 0: until resumed
	updated time.Time
}

// paritySets are the hunt sets the parity test's schedule rows are spread over.
var paritySets = []string{hunt.HuntSetDefault, "team-b"}

type parityHunt struct {
	id         string
	schedule   []parityScheduleRow
	watermarks []parityWatermarkRow // oldest first; row k is inserted in the k-th watermark insert
	leases     []parityLeaseRow
	states     []parityStateRow
	requests   []int64
	pauses     []parityPauseRow
}

// newest resolves the hunt's rows the way docs/contracts.md defines "newest", independently of
// any SQL: max updated for schedule and hunt_state, the greatest watermark (commits only raise
// it, whatever order their rows land in), max (claimed, claim_id) for leases.
func (h parityHunt) newest() (schedule.Row, schedule.State) {
	var row schedule.Row
	var st schedule.State
	var rowAt, stAt time.Time
	for i, r := range h.schedule {
		if i == 0 || r.updated.After(rowAt) {
			row, rowAt = r.Row, r.updated
		}
	}
	for _, w := range h.watermarks {
		if !st.HasWatermark || w.watermark > st.Watermark {
			st.Watermark, st.HasWatermark = w.watermark, true
		}
	}
	for i, s := range h.states {
		if i == 0 || s.updated.After(stAt) {
			st.RetryAfterMs, st.HasRetryAfter, stAt = s.retryAfterMs, s.retryAfterMs > 0, s.updated
		}
	}
	var pauseAt time.Time
	for i, p := range h.pauses {
		if i == 0 || p.updated.After(pauseAt) {
			st.Paused, st.PausedUntilMs, pauseAt = p.paused, p.untilMs, p.updated
		}
	}
	var bestLease parityLeaseRow
	for i, l := range h.leases {
		if i == 0 || l.claimed.After(bestLease.claimed) || (l.claimed.Equal(bestLease.claimed) && clickHouseUUIDCompare(l.claimID, bestLease.claimID) > 0) {
			bestLease = l
			st.LeaseUntilMs, st.LeaseFire, st.HasLease = l.leaseUntilMs, l.fire, true
		}
	}
	for _, rf := range h.requests {
		if !st.HasRequest || rf > st.RequestedFire {
			st.RequestedFire, st.HasRequest = rf, true
		}
	}
	return row, st
}

// Leases with equal claimed are deliberately absent: hunt_lease is ReplacingMergeTree(claimed),
// and the engine itself collapses such rows (on insert with optimize_on_insert, later in a merge)
// to the last inserted, whatever the claim_id — see docs/schedule.md.

// clickHouseUUIDCompare orders UUIDs as ClickHouse does: it stores a UUID as a UInt128 whose
// high half is the UUID's last 8 bytes, so those compare first, then the first 8 bytes.
func clickHouseUUIDCompare(a, b uuid.UUID) int {
	if c := bytes.Compare(a[8:], b[8:]); c != 0 {
		return c
	}
	return bytes.Compare(a[:8], b[:8])
}

// parityCases builds the matrix: ids × intervals × nows × watermarks × leases × schedule
// histories × requests, and one of the hunt_state (backoff) histories per case, taken in turn:
// their count is prime to every other dimension's, so each meets every combination of the
// others across the nows. Every hunt id starts with its now's index ("n007|…"), so that one query
// per now can select exactly the cases built for it.
//
// Times sit around the real clock: hunt_lease and hunt_request have TTLs, and rows that expired
// by the wall clock would be dropped on insert.
func parityCases(wallNow time.Time) (hunts []parityHunt, nows []int64) {
	base := wallNow.Unix() - wallNow.Unix()%86400 // a boundary of every interval in the matrix
	const far = int64(4_000_000_000)
	t0 := wallNow.Truncate(time.Second)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	ids := []string{"post-1682300-71da5fa4", "überwachung-größe"}
	intervals := []int64{1, 2, 30, 60, 300, 3600, 86400}
	nowIndex := map[int64]int{}
	n := 0
	for _, id := range ids {
		for _, iv := range intervals {
			p := schedule.PhaseOffset(id, iv, schedule.DefaultSpreadFraction)
			b := base + 7*iv // a boundary a few intervals ahead
			for _, now := range []int64{b - 1, b, b + 1, b + p - 1, b + p, b + p + 1, b + iv - 1, b + iv + p, b + iv/2} {
				ni, ok := nowIndex[now]
				if !ok {
					ni = len(nows)
					nowIndex[now] = ni
					nows = append(nows, now)
				}
				fire := schedule.LatestFire(now, iv, p)
				wms := []struct {
					name string
					rows []int64 // oldest first
				}{
					{"none", nil}, {"zero", []int64{0}}, {"fire-1", []int64{fire - 1}}, {"fire", []int64{fire}},
					{"fire+1", []int64{fire + 1}}, {"fire+I", []int64{fire + iv}}, {"far", []int64{far}},
					// Several commit rows: the greatest wins, wherever it was inserted. The
					// second row lands in a later insert (part) with a later updated.
					{"far-then-owed", []int64{far, fire - 1}},
					{"advanced", []int64{fire - 1, fire}},
					{"older-landed-later", []int64{fire, fire - 1}},
				}
				leases := []struct {
					name string
					ms   []int64 // oldest first
				}{
					{"none", nil}, {"now-1", []int64{(now - 1) * 1000}}, {"now", []int64{now * 1000}},
					{"now+1", []int64{(now + 1) * 1000}}, {"now+0.5", []int64{now*1000 + 500}},
					{"far", []int64{far * 1000}}, {"superseded", []int64{far * 1000, (now - 1) * 1000}},
					// The newest lease ends exactly at now under an older live one: free, so the
					// lease_until > now test holds on the newest row, not only on the candidates.
					{"superseded-now", []int64{far * 1000, now * 1000}},
				}
				reqs := []struct {
					name string
					rf   []int64
				}{{"none", nil}, {"old", []int64{fire - iv}}, {"now", []int64{fire - iv, now}},
					{"future", []int64{fire - iv, now + 1}}} // owed only once its fire has come
				nowMs := now * 1000
				states := []struct {
					name string
					ms   []int64 // retry_after per hunt_state row, oldest first; 0 = none
				}{
					{"none", nil}, {"cleared", []int64{0}},
					{"before", []int64{nowMs - 1}}, {"at", []int64{nowMs}}, {"after", []int64{nowMs + 1}},
					// The newest row clears an older live backoff (a success), or ends exactly
					// at now under it: retry_after > now must hold on the newest row, not only
					// on the candidates.
					{"far-then-cleared", []int64{far * 1000, 0}}, {"far-then-at", []int64{far * 1000, nowMs}},
				}
				type pz struct {
					paused  bool
					untilMs int64
				}
				pauses := []struct {
					name string
					rows []pz // oldest first
				}{
					{"none", nil}, {"indefinite", []pz{{true, 0}}},
					{"before", []pz{{true, nowMs - 1}}}, {"at", []pz{{true, nowMs}}}, {"after", []pz{{true, nowMs + 1}}},
					{"resumed", []pz{{true, 0}, {false, 0}}},
					{"resumed-then-paused", []pz{{true, 0}, {false, 0}, {true, far * 1000}}},
					{"until-then-resumed", []pz{{true, far * 1000}, {false, 0}}},
					// The newest pause ends exactly at now under an older longer one: the bound
					// holds on the newest row, not on any row.
					{"far-then-at", []pz{{true, far * 1000}, {true, nowMs}}},
				}
				for _, wm := range wms {
					for _, ls := range leases {
						for _, sc := range []string{"live", "tombstoned", "revived", "disabled", "zero-interval"} {
							for _, rq := range reqs {
								n++
								sts := states[n%len(states)]
								pzs := pauses[n%len(pauses)] // 9 histories, prime to 7 and to the other dimensions
								// The lease's fire, 5 choices (prime to 7 and 9): a lease is spent once
								// the watermark reaches its fire, so it meets every watermark.
								lf := []int64{fire, fire - iv, fire + iv, fire - 1, 0}[n%5]
								h := parityHunt{id: fmt.Sprintf("n%03d|%s|I%d|wm=%s|lease=%s@%d|%s|req=%s|state=%s|pause=%s|%d", ni, id, iv, wm.name, ls.name, lf-fire, sc, rq.name, sts.name, pzs.name, n)}
								live := schedule.Row{HuntID: h.id, IntervalSeconds: uint32(iv), PhaseOffset: uint32(p), Enabled: true, ConfigHash: "c1"}
								tomb := schedule.Tombstone(h.id)
								switch sc {
								case "live":
									h.schedule = []parityScheduleRow{{live, at(1)}}
								case "tombstoned":
									h.schedule = []parityScheduleRow{{live, at(1)}, {tomb, at(2)}}
								case "revived":
									// The revived row's offset is beyond its interval, as a
									// hand-written row could be: both sides take it mod I.
									revived := live
									revived.PhaseOffset += uint32(iv)
									h.schedule = []parityScheduleRow{{live, at(1)}, {tomb, at(2)}, {revived, at(3)}}
								case "disabled":
									// enabled=0 with a positive interval: not written by
									// Materialise, but enabled alone must retire the hunt.
									off := live
									off.Enabled = false
									h.schedule = []parityScheduleRow{{live, at(1)}, {off, at(2)}}
								case "zero-interval":
									// An enabled row with interval 0 must never reach intDiv.
									zero := live
									zero.IntervalSeconds, zero.PhaseOffset = 0, 0
									h.schedule = []parityScheduleRow{{live, at(1)}, {zero, at(2)}}
								}
								for k, w := range wm.rows {
									h.watermarks = append(h.watermarks, parityWatermarkRow{w, at(10 + k)})
								}
								for k, ms := range ls.ms {
									h.leases = append(h.leases, parityLeaseRow{ms, lf, at(20 + k), uuid.New()})
								}
								for k, ms := range sts.ms {
									h.states = append(h.states, parityStateRow{ms, at(30 + k)})
								}
								for k, p := range pzs.rows {
									h.pauses = append(h.pauses, parityPauseRow{p.paused, p.untilMs, at(40 + k)})
								}
								h.requests = rq.rf
								hunts = append(hunts, h)
							}
						}
					}
				}
			}
		}
	}
	return hunts, nows
}

// insertParity writes every case's rows and checks that all of them are stored as separate rows.
// The replacing tables would otherwise collapse a hunt's history to its newest row at once
// (optimize_on_insert) or in a background merge, and the SQL would never face an older enabled
// row under a tombstone, or an older live lease under an expired one.
func insertParity(ctx context.Context, t testing.TB, conn driver.Conn, database string, hunts []parityHunt) {
	t.Helper()
	db := schema.QuoteIdent(database)
	for _, table := range []string{schema.TableSchedule, schema.TableWatermark, schema.TableLease, schema.TableState, schema.TablePause} {
		if err := conn.Exec(ctx, "SYSTEM STOP MERGES "+db+"."+table); err != nil {
			t.Fatalf("stop merges on %s: %v", table, err)
		}
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"optimize_on_insert": 0}))
	built := map[string]int{}
	batch := func(table, cols string, add func(b driver.Batch) error) {
		t.Helper()
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+"."+table+" ("+cols+")")
		if err != nil {
			t.Fatalf("prepare %s: %v", table, err)
		}
		if err := add(b); err != nil {
			t.Fatalf("append %s: %v", table, err)
		}
		built[table] += b.Rows()
		if err := b.Send(); err != nil {
			t.Fatalf("send %s: %v", table, err)
		}
	}
	// Rows of one hunt alternate between hunt sets, so that the newest row's set (not any
	// older row's) must decide which set's count the hunt is in.
	for i, h := range hunts {
		for k := range h.schedule {
			h.schedule[k].Set = paritySets[(i+k)%len(paritySets)]
		}
	}
	batch(schema.TableSchedule, "hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated, hunt_set", func(b driver.Batch) error {
		for _, h := range hunts {
			for _, r := range h.schedule {
				if err := b.Append(r.HuntID, r.IntervalSeconds, r.PhaseOffset, boolToUInt8(r.Enabled), r.ConfigHash, r.updated, r.Set); err != nil {
					return err
				}
			}
		}
		return nil
	})
	// One insert per commit generation, so that a hunt's later rows are in later parts.
	for k := 0; ; k++ {
		more := false
		batch(schema.TableWatermark, "hunt_id, watermark, claim_id, updated", func(b driver.Batch) error {
			for _, h := range hunts {
				if k >= len(h.watermarks) {
					continue
				}
				more = true
				w := h.watermarks[k]
				if err := b.Append(h.id, time.Unix(w.watermark, 0).UTC(), uuid.New(), w.updated); err != nil {
					return err
				}
			}
			return nil
		})
		if !more {
			break
		}
	}
	batch(schema.TableState, "hunt_id, status, updated, retry_after", func(b driver.Batch) error {
		for _, h := range hunts {
			for _, s := range h.states {
				if err := b.Append(h.id, "failed", s.updated, time.UnixMilli(s.retryAfterMs).UTC()); err != nil {
					return err
				}
			}
		}
		return nil
	})
	batch(schema.TableLease, "hunt_id, fire, owner, claim_id, claimed, lease_until", func(b driver.Batch) error {
		for _, h := range hunts {
			for _, l := range h.leases {
				if err := b.Append(h.id, time.Unix(l.fire, 0).UTC(), "pod-a", l.claimID, l.claimed, time.UnixMilli(l.leaseUntilMs).UTC()); err != nil {
					return err
				}
			}
		}
		return nil
	})
	batch(schema.TableRequest, "hunt_id, requested_fire, request_id, requested_by, requested", func(b driver.Batch) error {
		for _, h := range hunts {
			for _, rf := range h.requests {
				if err := b.Append(h.id, time.Unix(rf, 0).UTC(), uuid.New(), "test", time.Now().UTC()); err != nil {
					return err
				}
			}
		}
		return nil
	})
	batch(schema.TablePause, "hunt_id, paused, paused_until, updated", func(b driver.Batch) error {
		for _, h := range hunts {
			for _, p := range h.pauses {
				if err := b.Append(h.id, boolToUInt8(p.paused), time.UnixMilli(p.untilMs).UTC(), p.updated); err != nil {
					return err
				}
			}
		}
		return nil
	})
	for table, want := range built {
		var got uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+"."+table).Scan(&got); err != nil {
			t.Fatalf("count %s: %v", table, err)
		}
		if got != uint64(want) {
			t.Fatalf("%s holds %d rows, %d inserted: the history collapsed before the test could read it", table, got, want)
		}
	}
}

func TestDueParity(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	hunts, nows := parityCases(time.Now())
	insertParity(ctx, t, db.Conn, db.Name, hunts)
	want := make([][]string, len(nows)) // due hunt ids per now index, by schedule.IsDue
	cases := make([]int, len(nows))
	for _, h := range hunts {
		var ni int
		fmt.Sscanf(h.id, "n%03d|", &ni)
		cases[ni]++
		row, st := h.newest()
		if schedule.IsDue(nows[ni], row, st) {
			want[ni] = append(want[ni], h.id)
		}
	}
	compared := 0
	for ni, now := range nows {
		sort.Strings(want[ni])
		nowExpr := fmt.Sprintf("toDateTime(%d, 'UTC')", now)
		prefix := fmt.Sprintf("n%03d|", ni)
		for _, form := range sqlForms {
			name := form.name
			query := "SELECT * FROM (\n" + form.core(db.Name, nowExpr) + "\n) WHERE startsWith(hunt_id, '" + prefix + "')" + form.settings
			got, err := New(db.Conn, db.Name).dueHunts(ctx, query)
			if err != nil {
				t.Fatalf("form %s: %v", name, err)
			}
			ids := make([]string, len(got))
			for i, h := range got {
				ids[i] = h.HuntID
			}
			sort.Strings(ids)
			if !slices.Equal(ids, want[ni]) {
				t.Errorf("now %d, form %s: SQL due set differs from IsDue: %s", now, name, setDiff(ids, want[ni]))
			}
		}
		compared += cases[ni]
	}
	if compared != len(hunts) {
		t.Fatalf("compared %d of %d cases", compared, len(hunts))
	}
	// The production count query itself, over the whole table at one now.
	var total uint64
	for _, h := range hunts {
		row, st := h.newest()
		if schedule.IsDue(nows[0], row, st) {
			total++
		}
	}
	// Also under a profile that moves WHERE into PREWHERE on FINAL reads: the query pins the
	// setting, so tombstones still hide older enabled rows.
	for _, settings := range []clickhouse.Settings{nil, {"optimize_move_to_prewhere_if_final": 1}} {
		qctx := clickhouse.Context(ctx, clickhouse.WithSettings(settings))
		got, err := New(db.Conn, db.Name).countDue(qctx, DueCountSQL(db.Name, fmt.Sprintf("toDateTime(%d, 'UTC')", nows[0])))
		if err != nil {
			t.Fatal(err)
		}
		if got != total {
			t.Errorf("DueCountSQL at now %d with settings %v = %d, IsDue counts %d", nows[0], settings, got, total)
		}
	}
	// Per hunt set: DueCountSetSQL counts exactly the due hunts whose newest row is in the set.
	for _, set := range paritySets {
		var want uint64
		for _, h := range hunts {
			row, st := h.newest()
			if row.Set == set && schedule.IsDue(nows[0], row, st) {
				want++
			}
		}
		got, err := New(db.Conn, db.Name).countDue(ctx, DueCountSetSQL(db.Name, fmt.Sprintf("toDateTime(%d, 'UTC')", nows[0]), set))
		if err != nil {
			t.Fatal(err)
		}
		if got != want || want == 0 || want == total {
			t.Errorf("DueCountSetSQL(%q) at now %d = %d, IsDue counts %d of %d in the set", set, nows[0], got, want, total)
		}
	}
	t.Logf("%d cases at %d nows, each compared per hunt in %d SQL forms; whole-table count %d", len(hunts), len(nows), len(sqlForms), total)
}

func setDiff(got, want []string) string {
	var extra, missing []string
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok {
			extra = append(extra, g)
		}
	}
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok {
			missing = append(missing, w)
		}
	}
	trim := func(s []string) []string {
		if len(s) > 10 {
			return append(s[:10:10], fmt.Sprintf("… %d more", len(s)-10))
		}
		return s
	}
	return fmt.Sprintf("SQL only (%d): %v; IsDue only (%d): %v", len(extra), trim(extra), len(missing), trim(missing))
}
