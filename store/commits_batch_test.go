package store

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// batchLease writes a lease row of hunt for fire lasting life on the server's clock (negative:
// it has ended) and returns the lease a claim verified at watermark wm (has: there is one)
// would hold.
func batchLease(t *testing.T, db *chtest.DB, hunt string, fire int64, life time.Duration, wm int64, has bool) lease.Lease {
	t.Helper()
	l := lease.Lease{HuntID: hunt, Fire: fire, Owner: "pod-a", ClaimID: uuid.New(), Watermark: wm, HasWatermark: has}
	if err := db.Conn.Exec(context.Background(), "INSERT INTO "+db.Name+".hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until) "+
		"SELECT ?, toDateTime(?, 'UTC'), 'pod-a', toUUID(?), now64(6), now64(3) + toIntervalMillisecond(?)",
		hunt, fire, l.ClaimID.String(), life.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	return l
}

// seedCommit writes a commit row of hunt at wm for run.
func seedCommit(t *testing.T, db *chtest.DB, hunt string, wm int64, run uuid.UUID) {
	t.Helper()
	if err := db.Conn.Exec(context.Background(), "INSERT INTO "+db.Name+".hunt_watermark (hunt_id, watermark, claim_id, updated, run_id) "+
		"SELECT ?, toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), toUUID(?)", hunt, wm, run.String()); err != nil {
		t.Fatal(err)
	}
}

// committedRow is what a commit row says of its run.
type committedRow struct {
	hunt, owner        string
	claim              uuid.UUID
	wm, start, gs, ge  int64
	rows               uint64
	hits               map[string]uint64
	runStartedMicrosec int64
}

// commitRows reads the commit rows of the batch's runs, by run id, failing on a run with two.
func commitRows(t *testing.T, db *chtest.DB, commits []Commit) map[uuid.UUID]committedRow {
	t.Helper()
	runs := make([]uuid.UUID, len(commits))
	for i, c := range commits {
		runs[i] = c.Run.RunID
	}
	rows, err := db.Conn.Query(context.Background(), "SELECT run_id, hunt_id, run_owner, claim_id, toInt64(watermark), toInt64(run_start), toInt64(gap_start), "+
		"toInt64(gap_end), run_rows, exception_hits, toUnixTimestamp64Micro(run_started) FROM "+db.Name+".hunt_watermark WHERE run_id IN ?", runs)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]committedRow{}
	for rows.Next() {
		var (
			run uuid.UUID
			r   committedRow
		)
		if err := rows.Scan(&run, &r.hunt, &r.owner, &r.claim, &r.wm, &r.start, &r.gs, &r.ge, &r.rows, &r.hits, &r.runStartedMicrosec); err != nil {
			t.Fatal(err)
		}
		if _, twice := out[run]; twice {
			t.Fatalf("run %s has two commit rows", run)
		}
		out[run] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAdvanceAllGivesEachCommitItsOutcome: one batch in which each fenced commit fails one
// guard alone (claim, fire, moved watermark, ended lease, a lease shorter than the statement's
// bound, a run with a row already: a success that writes nothing), between commits that pass;
// every commit gets its own outcome, and the rows that land carry their own commit's values.
func TestAdvanceAllGivesEachCommitItsOutcome(t *testing.T) {
	db := chtest.NewWithSchema(t)
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	const long = time.Hour

	first := Commit{batchLease(t, db, "first", now, long, 0, false), commit(now)}

	seedCommit(t, db, "next", now-300, uuid.New())
	next := Commit{batchLease(t, db, "next", now, long, now-300, true), commit(now)}
	next.Run.WindowStart, next.Run.GapStart, next.Run.GapEnd = now-120, now-300, now-120
	next.Run.Owner, next.Run.RowsWritten, next.Run.ExceptionHits = "pod-next", 5, map[string]uint64{"quiet#1": 3, "scanners#2": 1}

	claim := Commit{batchLease(t, db, "claim", now, long, 0, false), commit(now)}
	claim.Lease.ClaimID = uuid.New()

	fire := Commit{batchLease(t, db, "fire", now, long, 0, false), commit(now + 60)}
	fire.Lease.Fire = now + 60

	seedCommit(t, db, "moved", now-60, uuid.New())
	moved := Commit{batchLease(t, db, "moved", now, long, now-120, true), commit(now)}
	moved.Run.WindowStart = now - 120

	ended := Commit{batchLease(t, db, "ended", now, -time.Second, 0, false), commit(now)}
	// Three seconds left: less than the statement's bound (DefaultCommitBound, ctx has no deadline).
	short := Commit{batchLease(t, db, "short", now, 3*time.Second, 0, false), commit(now)}

	rerun := Commit{Run: commit(now)}
	seedCommit(t, db, "rerun", now-60, rerun.Run.RunID)
	rerun.Lease = batchLease(t, db, "rerun", now, long, now-60, true)

	last := Commit{batchLease(t, db, "last", now, long, 0, false), commit(now)}
	last.Run.Owner = "pod-last"

	batch := []Commit{first, claim, next, fire, moved, ended, short, rerun, last}
	// rerun's outcome is nil too, from the row it already has (Advance's read-back), but the
	// batch must not write it a second one.
	pass := map[string]bool{"first": true, "next": true, "last": true, "rerun": true}
	errs := s.AdvanceAll(context.Background(), batch)
	if len(errs) != len(batch) {
		t.Fatalf("%d outcomes for %d commits", len(errs), len(batch))
	}
	for i, c := range batch {
		if h := c.Lease.HuntID; pass[h] && errs[i] != nil || !pass[h] && !errors.Is(errs[i], ErrFenced) {
			t.Errorf("%s: %v, want %s", h, errs[i], map[bool]string{true: "nil", false: "ErrFenced"}[pass[h]])
		}
	}
	got := commitRows(t, db, batch)
	want := map[uuid.UUID]committedRow{}
	for _, c := range []Commit{first, next, last} {
		r := c.Run
		want[r.RunID] = committedRow{hunt: c.Lease.HuntID, owner: r.Owner, claim: c.Lease.ClaimID, wm: r.WindowEnd, start: r.WindowStart,
			gs: r.GapStart, ge: r.GapEnd, rows: r.RowsWritten, hits: cmpHits(r.ExceptionHits), runStartedMicrosec: r.Started.UnixMicro()}
	}
	// The seeded row of rerun's run is its only one.
	want[rerun.Run.RunID] = committedRow{hunt: "rerun", wm: now - 60, hits: map[string]uint64{}}
	for run, w := range want {
		g := got[run]
		if run == rerun.Run.RunID {
			g.claim, g.runStartedMicrosec = w.claim, w.runStartedMicrosec // the seed's, not a commit's
		}
		if g.hunt != w.hunt || g.owner != w.owner || g.claim != w.claim || g.wm != w.wm || g.start != w.start || g.gs != w.gs ||
			g.ge != w.ge || g.rows != w.rows || !maps.Equal(g.hits, w.hits) || g.runStartedMicrosec != w.runStartedMicrosec {
			t.Errorf("row of %s = %+v, want %+v", w.hunt, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d rows of the batch's runs, want %d: %+v", len(got), len(want), got)
	}
}

func cmpHits(h map[string]uint64) map[string]uint64 {
	if h == nil {
		return map[string]uint64{}
	}
	return h
}

// A batch with two commits of one hunt is a caller's bug: both would pass the compare against
// the same newest rows and land two rows of one run, or two overlapping windows. It is refused
// whole, before anything is sent. An empty batch sends nothing.
func TestAdvanceAllRefusesDuplicateHunts(t *testing.T) {
	db := chtest.NewWithSchema(t)
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	c := Commit{batchLease(t, db, "h", now, time.Hour, 0, false), commit(now)}
	other := Commit{batchLease(t, db, "other", now, time.Hour, 0, false), commit(now)}
	var errs []error
	sent := chtest.Trips(t, db, func() {
		errs = s.AdvanceAll(context.Background(), []Commit{c, other, c})
		if none := s.AdvanceAll(context.Background(), nil); len(none) != 0 {
			t.Errorf("empty batch: %v", none)
		}
	})
	for i, err := range errs {
		if !errors.Is(err, ErrDuplicateHunt) {
			t.Errorf("commit %d: %v, want ErrDuplicateHunt", i, err)
		}
	}
	if len(errs) != 3 || len(sent) != 0 {
		t.Errorf("%d outcomes, %d statements sent (%+v); want 3 and none", len(errs), len(sent), sent)
	}
	if rows := commitRows(t, db, []Commit{c, other}); len(rows) != 0 {
		t.Errorf("a refused batch wrote %+v", rows)
	}
}

// TestAdvanceAllUnderFaults: the batch's one answer decides nothing alone.
//   - Refused before executing (286): every commit is a refusal, nothing is written, and the
//     same batch commits afterwards.
//   - Executed, then answered 319 (the rows landed, the client does not know): the landed
//     commits are successes, the absent one is unknown (not fenced: the answer settled
//     nothing). The retry of the identical batch carries the same deduplication token, writes
//     nothing twice, and now settles the absent one as fenced; a batch of other runs has
//     another token.
func TestAdvanceAllUnderFaults(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, db.Conn, db.Name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	s := New(db.Conn, db.Name)
	now := serverNow(t, db)
	const commitInsert = `INSERT INTO .*hunt_watermark`

	t.Run("refused", func(t *testing.T) {
		batch := []Commit{
			{batchLease(t, db, "r1", now, time.Hour, 0, false), commit(now)},
			{batchLease(t, db, "r2", now, time.Hour, 0, false), commit(now)},
		}
		srv.SetFaults(t, ctl.FaultRule{Name: "quorum", Kind: ctl.KindInsert, Match: commitInsert, Times: 1, Effect: ctl.FailBefore, Code: 286})
		for i, err := range s.AdvanceAll(ctx, batch) {
			if !lease.Refused(err) || errors.Is(err, ErrUnknown) || errors.Is(err, ErrFenced) {
				t.Errorf("commit %d refused before executing: %v, want a refusal", i, err)
			}
		}
		srv.ClearFaults(t)
		if rows := commitRows(t, db, batch); len(rows) != 0 {
			t.Fatalf("a refused batch wrote %+v", rows)
		}
		for i, err := range s.AdvanceAll(ctx, batch) {
			if err != nil {
				t.Errorf("commit %d sent again after the refusal: %v", i, err)
			}
		}
	})

	t.Run("lost answer", func(t *testing.T) {
		batch := []Commit{
			{batchLease(t, db, "a", now, time.Hour, 0, false), commit(now)},
			{batchLease(t, db, "b", now, time.Hour, 0, false), commit(now)},
			{batchLease(t, db, "c", now, time.Hour, 0, false), commit(now)},
		}
		batch[1].Lease.ClaimID = uuid.New() // fenced: not b's claim
		srv.SetFaults(t, ctl.FaultRule{Name: "lost", Kind: ctl.KindInsert, Match: commitInsert, Times: 1, Effect: ctl.FailAfter, Code: 319})
		var firstErrs, retryErrs []error
		trips := chtest.Trips(t, db, func() {
			firstErrs = s.AdvanceAll(ctx, batch)
			retryErrs = s.AdvanceAll(ctx, batch)
		})
		if firstErrs[0] != nil || firstErrs[2] != nil || !errors.Is(firstErrs[1], ErrUnknown) {
			t.Errorf("after a lost answer: %v; want nil, ErrUnknown, nil", firstErrs)
		}
		if retryErrs[0] != nil || retryErrs[2] != nil || !errors.Is(retryErrs[1], ErrFenced) {
			t.Errorf("the retry: %v; want nil, ErrFenced, nil", retryErrs)
		}
		rows := commitRows(t, db, batch) // fails on a run with two rows
		if _, ok := rows[batch[1].Run.RunID]; len(rows) != 2 || ok {
			t.Errorf("rows %+v, want a's and c's", rows)
		}
		tokens := insertTokens(t, trips)
		if len(tokens) != 2 || tokens[0] == "" || tokens[0] != tokens[1] {
			t.Errorf("deduplication tokens of the attempt and its retry: %q, want one token twice", tokens)
		}
		others := []Commit{{batchLease(t, db, "d", now, time.Hour, 0, false), commit(now)}, batch[0], batch[2]}
		trips = chtest.Trips(t, db, func() {
			if err := s.AdvanceAll(ctx, others)[0]; err != nil {
				t.Errorf("a batch with another run: %v", err)
			}
		})
		if other := insertTokens(t, trips); len(other) != 1 || len(tokens) == 0 || other[0] == tokens[0] {
			t.Errorf("token of another batch %q, first batch's %q: want a new one", other, tokens)
		}
	})
}

// insertTokens are the deduplication tokens of the commit inserts among trips, in order.
func insertTokens(t *testing.T, trips []ctl.Statement) []string {
	t.Helper()
	var out []string
	for _, st := range trips {
		if st.Kind == ctl.KindInsert {
			out = append(out, st.Settings["insert_deduplication_token"])
		}
	}
	return out
}

// A fire's overrun rides on its commit row: OverrunCounts counts the rows that overran, once
// per fire (a retry of a landed commit writes no second row), on top of nothing else.
func TestOverrunsCountedOnCommitRows(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := New(db.Conn, db.Name)
	const start = int64(1_700_000_000)
	wm, has := start, false
	for i, over := range []bool{true, false, true} {
		fire := start + 60*int64(i+1)
		l := batchLease(t, db, "h", fire, time.Hour, wm, has)
		run := Run{HuntID: "h", Fire: fire, RunID: uuid.New(), Owner: "pod-a", WindowStart: wm, WindowEnd: fire,
			Started: time.Now(), Overran: over}
		for range 2 { // the second is a retry after a lost answer: it must find the row, not add one
			if err := s.Advance(ctx, l, run); err != nil {
				t.Fatal(err)
			}
		}
		wm, has = fire, true
	}
	got, err := s.OverrunCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["h"] != 2 {
		t.Fatalf("overrun counts %v, want h: 2 (two of three fires overran)", got)
	}
}
