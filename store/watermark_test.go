package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func coord(t testing.TB, db *chtest.DB, owner string, leaseDur time.Duration) *lease.Coordinator {
	t.Helper()
	c, err := lease.New(New(db.Conn, db.Name).Leases(), lease.Options{Owner: owner, Lease: leaseDur, Settle: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func serverNow(t testing.TB, db *chtest.DB) int64 {
	t.Helper()
	var now time.Time
	if err := db.Conn.QueryRow(context.Background(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now.Unix()
}

// claimOne wins hunt's fire. A claim acknowledged past the settle on a loaded machine is lost
// and its provisional row holds the hunt a while: claim again until one wins, never assuming
// the first does.
func claimOne(t testing.TB, c *lease.Coordinator, hunt string, fire int64) lease.Lease {
	t.Helper()
	var (
		won  lease.Lease
		last lease.Result
		err  error
	)
	if !chtest.Poll(2*time.Minute, func() bool {
		last, err = c.Claim(context.Background(), []lease.Fire{{HuntID: hunt, Fire: fire}})
		if err != nil || len(last.AlreadyRun)+len(last.Failed) > 0 {
			return true // a definite answer that waiting will not change
		}
		if len(last.Won) == 1 {
			won = last.Won[0]
			return true
		}
		return false
	}) || len(last.Won) != 1 {
		t.Fatalf("claim %s@%d: %+v, %v", hunt, fire, last, err)
	}
	return won
}

func watermarkOf(t testing.TB, s *Store, hunt string) (int64, bool) {
	t.Helper()
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := snap.Hunts[hunt]
	return h.Watermark, h.HasWatermark
}

func TestAdvanceFenced(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	a := coord(t, db, "pod-a", 10*time.Second)
	b := coord(t, db, "pod-b", 10*time.Second)

	held := claimOne(t, a, "h", now-1)
	if err := s.Advance(ctx, held, commit(now-1)); err != nil {
		t.Fatalf("holder's advance: %v", err)
	}
	if wm, ok := watermarkOf(t, s, "h"); !ok || wm != now-1 {
		t.Fatalf("watermark = %d, %v", wm, ok)
	}

	// A claim that never won (a loser's id) cannot write.
	loser := held
	loser.ClaimID, loser.Owner = uuid.New(), "pod-b"
	if err := s.Advance(ctx, loser, commit(now+100)); !errors.Is(err, ErrFenced) {
		t.Fatalf("loser's advance: %v, want ErrFenced", err)
	}
	// Nor can the holder write for another fire than the one it holds.
	// (with the right verified watermark, so only the fire check refuses it).
	other := lease.Lease{HuntID: "h", Fire: now + 60, ClaimID: held.ClaimID, Watermark: now - 1, HasWatermark: true}
	if err := s.Advance(ctx, other, commit(now+60)); !errors.Is(err, ErrFenced) {
		t.Fatalf("advance for a fire not held: %v, want ErrFenced", err)
	}

	// After release, a peer claims the next fire; the old holder is fenced out.
	if err := a.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	next := claimOne(t, b, "h", now)
	if err := s.Advance(ctx, held, commit(now+200)); !errors.Is(err, ErrFenced) {
		t.Fatalf("old holder's advance after takeover: %v, want ErrFenced", err)
	}
	nextRun := commit(now)
	nextRun.WindowStart = now - 1 // continues from the holder's commit
	if err := s.Advance(ctx, next, nextRun); err != nil {
		t.Fatalf("new holder's advance: %v", err)
	}
	if wm, _ := watermarkOf(t, s, "h"); wm != now {
		t.Fatalf("watermark = %d, want %d", wm, now)
	}
}

// TestAdvanceIsCompareAndSet: a commit lands only if the watermark is still the one its claim's
// verify read saw, the new one is above it, and the hunt's newest lease row (not merely this
// claim's latest row) is this claim's, live, for this fire. Each case fails without its guard.
func TestAdvanceIsCompareAndSet(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	a := coord(t, db, "pod-a", 20*time.Second)

	first := claimOne(t, a, "h", now-120)
	if first.HasWatermark {
		t.Fatalf("first claim saw a watermark: %+v", first)
	}
	if err := s.Advance(ctx, first, commit(now-120)); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	held := claimOne(t, a, "h", now-60)
	if !held.HasWatermark || held.Watermark != now-120 {
		t.Fatalf("verified watermark = %d/%v, want %d", held.Watermark, held.HasWatermark, now-120)
	}

	// A claim that verified before a peer's commit (it saw no watermark, or an older one) is
	// refused: its window would overlap the commit.
	stale := held
	stale.HasWatermark, stale.Watermark = false, 0
	if err := s.Advance(ctx, stale, commit(now-60)); !errors.Is(err, ErrFenced) {
		t.Fatalf("commit from a stale verify (no watermark): %v, want ErrFenced", err)
	}
	stale.HasWatermark, stale.Watermark = true, now-180
	overlapping := commit(now - 60)
	overlapping.WindowStart = now - 180
	if err := s.Advance(ctx, stale, overlapping); !errors.Is(err, ErrFenced) {
		t.Fatalf("commit from a stale verify (older watermark): %v, want ErrFenced", err)
	}
	// Progress never moves back or stands still.
	if err := s.Advance(ctx, held, commit(now-120)); !errors.Is(err, ErrFenced) {
		t.Fatalf("commit at the current watermark: %v, want ErrFenced", err)
	}
	// A peer's newer row on top of our still-live row: ours is no longer the newest lease.
	peer := uuid.New()
	if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until) "+
		"SELECT 'h', toDateTime(?, 'UTC'), 'pod-b', toUUID(?), now64(6), now64(3) + INTERVAL 20 SECOND", now-60, peer.String()); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, held, commit(now-60)); !errors.Is(err, ErrFenced) {
		t.Fatalf("commit under a peer's newer lease row: %v, want ErrFenced", err)
	}
	if wm, _ := watermarkOf(t, s, "h"); wm != now-120 {
		t.Fatalf("watermark = %d after refused commits, want %d", wm, now-120)
	}
	var rows uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM "+db.Name+".hunt_watermark").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d commit rows (%v), want 1", rows, err)
	}
}

// A commit row that lands late, or on a lagging replica, with an older watermark but a newer
// updated never moves progress back: the newest is the greatest (watermark, updated).
func TestNewestWatermarkIsTheGreatest(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	for _, q := range []string{
		"INSERT INTO " + db.Name + ".hunt_watermark (hunt_id, watermark, updated) SELECT 'h', toDateTime(?, 'UTC'), now64(6) - INTERVAL 1 MINUTE",
		"INSERT INTO " + db.Name + ".hunt_watermark (hunt_id, watermark, updated) SELECT 'h', toDateTime(?, 'UTC') - 60, now64(6)",
	} {
		if err := db.Conn.Exec(ctx, q, now); err != nil {
			t.Fatal(err)
		}
	}
	if wm, ok := watermarkOf(t, s, "h"); !ok || wm != now {
		t.Fatalf("snapshot watermark = %d, want %d", wm, now)
	}
	res, err := coord(t, db, "pod-a", 10*time.Second).Claim(ctx, []lease.Fire{{HuntID: "h", Fire: now + 60}})
	if err != nil || len(res.Won) != 1 || res.Won[0].Watermark != now {
		t.Fatalf("claim's verified watermark: %+v, %v; want %d", res, err, now)
	}
}

func TestAdvanceExpiredHolderFenced(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	a := coord(t, db, "pod-a", 4*time.Second)
	held := claimOne(t, a, "h", serverNow(t, db))
	for {
		var now time.Time
		if err := db.Conn.QueryRow(ctx, "SELECT now64(3)").Scan(&now); err != nil {
			t.Fatal(err)
		}
		if now.After(held.Until) {
			break
		}
		time.Sleep(held.Until.Sub(now) + 10*time.Millisecond)
	}
	// Nobody took over, but the lease expired: a peer may be claiming right now.
	if err := s.Advance(ctx, held, commit(held.Fire)); !errors.Is(err, ErrFenced) {
		t.Fatalf("expired holder's advance: %v, want ErrFenced", err)
	}
	if _, ok := watermarkOf(t, s, "h"); ok {
		t.Fatal("an expired holder wrote a watermark")
	}
}

func TestSnapshot(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	a := coord(t, db, "pod-a", time.Minute)

	// h1: ran to now-60, now leased for now; failing state.
	l1 := claimOne(t, a, "h1", now-60)
	if err := s.Advance(ctx, l1, commit(now-60)); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, l1); err != nil {
		t.Fatal(err)
	}
	held := claimOne(t, a, "h1", now)
	if err := s.SetState(ctx, State{HuntID: "h1", Status: hunt.RunFailed, LastError: "boom", LastFire: now - 60}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, State{HuntID: "h1", Status: hunt.RunFailed, LastError: "boom twice", LastFire: now - 60}); err != nil {
		t.Fatal(err)
	}
	// h2: two requests, one already covered by its watermark, two pending: the newest counts.
	l2 := claimOne(t, a, "h2", now-30)
	if err := s.Advance(ctx, l2, commit(now-30)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []int64{now - 40, now - 10, now - 5} {
		if err := s.Request(ctx, "h2", f, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	// h3: only a request, never run.
	if err := s.Request(ctx, "h3", now-7, "bob"); err != nil {
		t.Fatal(err)
	}
	// h4: a request fully covered by the watermark is not pending.
	l4 := claimOne(t, a, "h4", now-3)
	if err := s.Advance(ctx, l4, commit(now-3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Request(ctx, "h4", now-3, "carol"); err != nil {
		t.Fatal(err)
	}

	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(snap.Now.Unix()-now) * time.Second; d < 0 || d > time.Minute {
		t.Fatalf("snapshot clock %s vs %d", snap.Now, now)
	}
	h1 := snap.Hunts["h1"]
	want1 := HuntState{Watermark: now - 60, HasWatermark: true, LeaseOwner: "pod-a", LeaseFire: now, LeaseClaimID: held.ClaimID,
		LeaseUntil: held.Until, HasLease: true, Status: hunt.RunFailed, ConsecutiveFailures: 2, LastError: "boom twice", LastFire: now - 60}
	if !h1.LeaseUntil.Equal(want1.LeaseUntil) {
		t.Fatalf("h1 lease until %s, want %s", h1.LeaseUntil, want1.LeaseUntil)
	}
	h1.LeaseUntil = want1.LeaseUntil
	if !reflect.DeepEqual(h1, want1) {
		t.Fatalf("h1 = %+v\nwant %+v", h1, want1)
	}
	if h2 := snap.Hunts["h2"]; !h2.HasRequest || h2.RequestedFire != now-5 || h2.Watermark != now-30 {
		t.Fatalf("h2 = %+v", h2)
	}
	if h3 := snap.Hunts["h3"]; !h3.HasRequest || h3.RequestedFire != now-7 || h3.HasWatermark || h3.HasLease {
		t.Fatalf("h3 = %+v", h3)
	}
	if h4 := snap.Hunts["h4"]; h4.HasRequest {
		t.Fatalf("h4 has a covered request pending: %+v", h4)
	}
}

func TestSnapshotEmpty(t *testing.T) {
	db := chtest.NewWithSchema(t)
	snap, err := New(db.Conn, db.Name).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Now.IsZero() || len(snap.Hunts) != 0 {
		t.Fatalf("empty snapshot = %+v", snap)
	}
}

func TestRecordRun(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	// Near the real clock: hunt_run's TTL drops rows that are already expired when inserted.
	started := time.Now().UTC().Truncate(time.Microsecond)
	run := Run{HuntID: "h", Fire: 1700000000, RunID: uuid.New(), Owner: "pod-a", Status: hunt.RunFailed,
		WindowStart: 1699999940, WindowEnd: 1700000000, RowsWritten: 42, Started: started, Finished: started.Add(1500 * time.Millisecond),
		Error: "boom", FindingsDropped: 3, Kind: hunt.KindRequest}
	if err := s.RecordRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	for _, status := range []hunt.RunStatus{"completed", hunt.RunSucceeded, hunt.RunGap} {
		// Commits are written only by Advance, in hunt_watermark.
		if err := s.RecordRun(ctx, Run{HuntID: "h", Status: status}); err == nil {
			t.Fatalf("status %q was accepted", status)
		}
	}
	if ok, err := s.Recorded(ctx, run); err != nil || !ok {
		t.Fatalf("Recorded = %v, %v", ok, err)
	}
	var got Run
	var status, kind string // the driver scans into plain strings only
	err := db.Conn.QueryRow(ctx, "SELECT hunt_id, toInt64(fire), run_id, owner, toString(status), toInt64(window_start), toInt64(window_end), rows_written, started, finished, error, findings_dropped, toString(kind) FROM "+db.Name+".hunt_runs").
		Scan(&got.HuntID, &got.Fire, &got.RunID, &got.Owner, &status, &got.WindowStart, &got.WindowEnd, &got.RowsWritten, &got.Started, &got.Finished, &got.Error, &got.FindingsDropped, &kind)
	if err != nil {
		t.Fatal(err)
	}
	got.Status, got.Kind = hunt.RunStatus(status), hunt.Kind(kind)
	got.Started, got.Finished = got.Started.UTC(), got.Finished.UTC()
	if !reflect.DeepEqual(got, run) {
		t.Fatalf("hunt_run row = %+v\nwant %+v", got, run)
	}
}

func TestRequestAndStateEscaping(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	odd := "it's a \\ \"hunt\"\twith\nodd chars"
	if err := s.Request(ctx, odd, 1700000000, "o'brien"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, State{HuntID: odd, Status: "ok", LastError: "line1\nline2 'q'"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Request(ctx, "", 1, "x"); err == nil {
		t.Fatal("empty hunt id accepted")
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := snap.Hunts[odd]
	if !ok || !h.HasRequest || h.RequestedFire != 1700000000 || h.LastError != "line1\nline2 'q'" {
		t.Fatalf("snapshot of %q = %+v (hunts %v)", odd, h, keys(snap.Hunts))
	}
	var by string
	if err := db.Conn.QueryRow(ctx, "SELECT requested_by FROM "+db.Name+".hunt_request WHERE hunt_id = {h:String}", clickhouse.Named("h", odd)).Scan(&by); err != nil || by != "o'brien" {
		t.Fatalf("requested_by = %q, %v", by, err)
	}
}

func keys(m map[string]HuntState) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, fmt.Sprintf("%q", k))
	}
	return out
}

// Snapshot is a constant number of round trips whatever the number of hunts (counted at
// chlocal): one statement per row shape.
func TestSnapshotConstantRoundTrips(t *testing.T) {
	if os.Getenv(chtest.EnvURL) != "" {
		t.Skip("round trips are counted at chlocal; a real server is configured")
	}
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	for _, n := range []int{0, 1, 50} {
		for i := range n {
			if err := s.Request(ctx, fmt.Sprintf("rt-%d-%d", n, i), 1700000000, "test"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Snapshot(ctx); err != nil { // warm the connection pool
			t.Fatal(err)
		}
		before := chtest.Queries(t, db.URL)
		snap, err := s.Snapshot(ctx)
		after := chtest.Queries(t, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		if after-before != snapshotStatements {
			t.Fatalf("Snapshot over %d hunts took %d round trips, want %d", len(snap.Hunts), after-before, snapshotStatements)
		}
	}
}

// commit is the run a test commits with Advance: it ends at (and advances the watermark to) wm.
func commit(wm int64) Run {
	return Run{RunID: uuid.New(), Owner: "pod-test", WindowStart: wm - 60, WindowEnd: wm, Started: time.Now()}
}

// TestAdvanceWritesItsRunRows: the commit is its own audit row (hunt_runs reads it), a retried
// Advance of the same run writes nothing more, and a skipped range becomes a gap row. Fenced
// writes produce no rows at all.
func TestAdvanceWritesItsRunRows(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	a := coord(t, db, "pod-a", 10*time.Second)

	held := claimOne(t, a, "h", now-1)
	run := commit(now - 1)
	run.Owner, run.RowsWritten, run.GapStart, run.GapEnd = "pod-a", 7, now-500, now-61
	run.Started = time.Now().UTC().Truncate(time.Microsecond)
	for range 2 { // the second is a retry after a lost answer
		if err := s.Advance(ctx, held, run); err != nil {
			t.Fatal(err)
		}
	}
	loser := held
	loser.ClaimID = uuid.New()
	if err := s.Advance(ctx, loser, commit(now+100)); !errors.Is(err, ErrFenced) {
		t.Fatalf("loser: %v", err)
	}
	rows, err := db.Conn.Query(ctx, "SELECT toString(status), run_id, owner, toInt64(fire), toInt64(window_start), toInt64(window_end), rows_written, started, error FROM "+
		db.Name+".hunt_runs ORDER BY status DESC")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type row struct {
		status       string
		runID        uuid.UUID
		owner        string
		fire, ws, we int64
		rows         uint64
		started      time.Time
		errorText    string
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.status, &r.runID, &r.owner, &r.fire, &r.ws, &r.we, &r.rows, &r.started, &r.errorText); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("hunt_runs rows = %+v, want one succeeded and one gap", got)
	}
	ok, gap := got[0], got[1]
	if ok.status != hunt.RunSucceeded.String() || ok.runID != run.RunID || ok.owner != "pod-a" || ok.fire != now-1 ||
		ok.ws != run.WindowStart || ok.we != now-1 || ok.rows != 7 || !ok.started.Equal(run.Started) || ok.errorText != "" {
		t.Errorf("succeeded row %+v, want run %+v", ok, run)
	}
	if gap.status != hunt.RunGap.String() || gap.runID != run.RunID || gap.ws != now-500 || gap.we != now-61 || gap.rows != 0 ||
		!strings.Contains(gap.errorText, "max_catchup") {
		t.Errorf("gap row %+v", gap)
	}
}

// SetStates writes many hunts' rows in one insert, each with its own fields, and a backoff on
// the server's clock derived from the failure count.
func TestSetStatesOneInsert(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	sts := []State{
		{HuntID: "a", Status: "succeeded", LastFire: 1700000000, TooAggressive: true},
		{HuntID: "b", Status: "failed", LastError: "x'\n\\y", LastFire: 1700000060, BackoffBase: time.Hour, BackoffCap: 2 * time.Hour},
		{HuntID: "c", Status: "succeeded", LastFire: 1700000120},
	}
	before := chtest.Queries(t, db.URL)
	if err := s.SetStates(ctx, sts); err != nil {
		t.Fatal(err)
	}
	if n := chtest.Queries(t, db.URL) - before; n != 1 {
		t.Fatalf("%d statements for three states, want 1", n)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		h := snap.Hunts[st.HuntID]
		failures := uint32(0)
		if st.Status == "failed" {
			failures = 1
		}
		if h.Status != st.Status || h.LastFire != st.LastFire || h.ConsecutiveFailures != failures ||
			h.LastError != st.LastError || h.OverrunCount != 0 || h.TooAggressive != st.TooAggressive {
			t.Errorf("%s: snapshot %+v, wrote %+v", st.HuntID, h, st)
		}
		if h.HasRetryAfter != (st.BackoffBase > 0) {
			t.Errorf("%s: retry_after set %v, backoff %v", st.HuntID, h.HasRetryAfter, st.BackoffBase)
		}
	}
	if b := snap.Hunts["b"]; b.RetryAfter.Sub(snap.Now) < 59*time.Minute || b.RetryAfter.Sub(snap.Now) > 61*time.Minute {
		t.Errorf("b retries after %v, want an hour (the first failure's) past the server's now %v", b.RetryAfter, snap.Now)
	}
}

// Counters are derived on the server and writes are fenced on the fire: a failure counts one
// more than the newest row, a second failure doubles the backoff, a carried overrun count
// (an import's) survives every later row, and a late row of an older fire lands nowhere.
func TestStateCountersDerivedAndFenced(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	state := func() HuntState {
		t.Helper()
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Hunts["h"]
	}
	set := func(st State) {
		t.Helper()
		st.HuntID = "h"
		if err := s.SetState(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	const fire = int64(1700000000)
	if err := s.RaiseOverruns(ctx, []Overruns{{HuntID: "h", Count: 2}}); err != nil {
		t.Fatal(err)
	}
	set(State{Status: hunt.RunSucceeded, LastFire: fire})
	set(State{Status: hunt.RunSucceeded, LastFire: fire + 60})
	failure := State{Status: hunt.RunFailed, LastError: "boom", LastFire: fire + 120, BackoffBase: time.Minute, BackoffCap: time.Hour}
	set(failure)
	set(failure) // the same fire failing again after its backoff
	h := state()
	if h.OverrunCount != 2 || h.ConsecutiveFailures != 2 || time.Until(h.RetryAfter) < 90*time.Second {
		t.Fatalf("state %+v: want 2 overruns kept, 2 failures, a backoff of two minutes", h)
	}
	// Pod A's success row of the previous fire, held until now, lands after the failures.
	set(State{Status: hunt.RunSucceeded, LastFire: fire + 60})
	if got := state(); got.Status != hunt.RunFailed || got.ConsecutiveFailures != 2 || !got.HasRetryAfter || got.OverrunCount != 2 {
		t.Fatalf("after a late row of an older fire: %+v, want the failure and its backoff kept", got)
	}
	set(State{Status: hunt.RunSucceeded, LastFire: fire + 180})
	if got := state(); got.Status != hunt.RunSucceeded || got.ConsecutiveFailures != 0 || got.HasRetryAfter || got.OverrunCount != 2 {
		t.Fatalf("after the next fire succeeded: %+v, want healthy with 2 overruns", got)
	}
}

// An error quoting a huge hunt query is stored cut, not refused: statement parameters travel
// in the request URL, which the server caps.
func TestLongErrorsAreCut(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	long := "Syntax error: " + strings.Repeat("é", 1<<20)
	if err := s.SetState(ctx, State{HuntID: "big", Status: "failed", LastError: long}); err != nil {
		t.Fatal(err)
	}
	run := Run{HuntID: "big", Fire: 1700000000, RunID: uuid.New(), Status: hunt.RunFailed, Error: long,
		Started: time.Now().UTC(), Finished: time.Now().UTC()}
	if err := s.RecordRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SELECT last_error FROM " + db.Name + ".hunt_state", "SELECT error FROM " + db.Name + ".hunt_run"} {
		var got string
		if err := db.Conn.QueryRow(ctx, q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if len(got) > MaxErrorBytes || !strings.HasPrefix(got, "Syntax error: é") || !strings.HasSuffix(got, "(cut)") || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes, valid UTF-8 %v, ends %q", q, len(got), utf8.ValidString(got), got[max(0, len(got)-12):])
		}
	}
}

// Many states with long error text are written in as many inserts as keep each request's URL
// under the server's cap.
func TestSetStatesSplitsLongErrors(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	var sts []State
	for i := range 64 {
		// Quotes take six bytes each once escaped in the array and then in the URL.
		sts = append(sts, State{HuntID: fmt.Sprintf("h%02d", i), Status: "failed", LastError: strings.Repeat("'", MaxErrorBytes)})
	}
	if err := s.SetStates(ctx, sts); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM hunt_state WHERE length(last_error) = ?", MaxErrorBytes).Scan(&n); err != nil || n != 64 {
		t.Fatalf("%d of 64 states stored whole (%v)", n, err)
	}
}

// The commit must be able to finish before its lease ends: the compare-and-set refuses a lease
// that does not outlive the statement's execution bound (CommitBound, its max_execution_time),
// so a commit that passes its fence lands before the next holder can claim the hunt.
func TestAdvanceNeedsTheLeaseToOutliveTheStatement(t *testing.T) {
	db := chtest.NewWithSchema(t)
	s := New(db.Conn, db.Name)
	held := claimOne(t, coord(t, db, "pod-a", 8*time.Second), "h", serverNow(t, db))
	// Half of a 40 s deadline is a 20 s bound: longer than the lease has left.
	long, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := s.Advance(long, held, commit(held.Fire)); !errors.Is(err, ErrFenced) {
		t.Fatalf("a commit that may outlast its lease: %v, want ErrFenced", err)
	}
	if _, ok := watermarkOf(t, s, "h"); ok {
		t.Fatal("a commit that may outlast its lease wrote a watermark")
	}
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Advance(short, held, commit(held.Fire)); err != nil {
		t.Fatalf("a commit bound to 1 s under a lease with seconds left: %v", err)
	}
}

// A run commits at most one row: even an Advance whose compare would pass again (here the same
// run handed a window that starts at its own commit) writes nothing once the run has a row.
func TestAdvanceRefusesASecondRowOfItsRun(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	held := claimOne(t, coord(t, db, "pod-a", time.Minute), "h", serverNow(t, db))
	run := commit(held.Fire)
	if err := s.Advance(ctx, held, run); err != nil {
		t.Fatal(err)
	}
	again, next := held, run
	again.Watermark, again.HasWatermark = run.WindowEnd, true
	next.WindowStart, next.WindowEnd = run.WindowEnd, run.WindowEnd+60
	if err := s.Advance(ctx, again, next); err != nil {
		t.Fatalf("the second Advance of a committed run: %v, want nil (its row is there)", err)
	}
	var n uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM hunt_watermark WHERE run_id = ?", run.RunID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if wm, _ := watermarkOf(t, s, "h"); n != 1 || wm != run.WindowEnd {
		t.Fatalf("%d rows of the run, watermark %d; want 1 row at %d", n, wm, run.WindowEnd)
	}
}

// A hunt that never failed has no hunt_state row to fence on (the runner writes none for its
// successes), so a late failure row of an older fire is fenced on the commits too: it lands
// nowhere once a later fire committed.
func TestLateStateRowAfterANewerCommitLandsNowhere(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	const fire = int64(1_700_000_000)
	seedCommit(t, db, "h", fire+60, uuid.New())
	late := State{HuntID: "h", Status: hunt.RunFailed, LastError: "held", LastFire: fire, BackoffBase: time.Minute, BackoffCap: time.Hour}
	if err := s.SetState(ctx, late); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM "+db.Name+".hunt_state").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d hunt_state rows, want none: a failure of fire %d landed after fire %d committed", n, fire, fire+60)
	}
	late.LastFire = fire + 120 // the next fire's failure is the hunt's news
	if err := s.SetState(ctx, late); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM "+db.Name+".hunt_state").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d hunt_state rows (%v), want the later fire's failure", n, err)
	}
}
