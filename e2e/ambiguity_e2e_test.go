package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// ambiguityHunts is smaller than the outage test's load: every refused or unknown answer costs
// retries and read-backs on chlocal's one engine thread.
const ambiguityHunts = 20

// TestRunnersThroughAmbiguousAnswers runs three `hunt-runner run` processes for 40 s while a
// sixth of the commits land and then answer UNKNOWN_STATUS_OF_INSERT (319, what a quorum
// timeout answers) and a quarter of the other coordination inserts are refused before they run
// (UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE, 286), then lets them run clean. Afterwards: no fire
// committed twice, windows tile, findings are exact, no run is recorded both succeeded and
// failed, every hunt kept committing, and none ends failed or backed off.
func TestRunnersThroughAmbiguousAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, conn, intervals, args := setupE2E(t, ctx, ambiguityHunts)
	procs := startRunners(t, "amb", args)
	// The first rule sees every commit (the compare-and-set insert into hunt_watermark) and
	// lets five in six through to the second, which refuses a quarter of every insert into our
	// tables: claims, findings, commits, run records, state, heartbeats.
	srv.SetFaults(t,
		ctl.FaultRule{Name: "commit-unknown", Kind: ctl.KindInsert, Match: `INTO\s+\S*hunt_watermark`,
			Probability: 1.0 / 6, Effect: ctl.FailAfter, Code: 319},
		ctl.FaultRule{Name: "insert-refused", Kind: ctl.KindInsert, Match: `INTO\s+\S*hunt_`,
			Probability: 0.25, Effect: ctl.FailBefore, Code: 286})
	time.Sleep(40 * time.Second)
	fired := map[string]int64{}
	for _, r := range srv.FaultStats(t) {
		fired[r.Name] = r.Fired
	}
	srv.ClearFaults(t)
	t.Logf("faults fired: %v", fired)
	if fired["commit-unknown"] == 0 || fired["insert-refused"] == 0 {
		t.Fatalf("the faults did not fire (%v): the test would prove nothing", fired)
	}
	var clean uint32
	if err := conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&clean); err != nil {
		t.Fatal(err)
	}
	// Every hunt goes on committing: its watermark passes the first fire owed after the
	// faults stopped.
	if !chtest.Poll(recoverWithin, func() bool { return recovered(ctx, conn, intervals, int64(clean)) }) {
		t.Errorf("the hunts did not all commit within %v of the faults stopping", recoverWithin)
	}
	var now uint32
	if err := conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if code, _ := p.term(20 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", p.name, code)
		}
	}
	st := verify(t, ctx, conn, intervals, int64(clean), int64(now))
	if st.runs == 0 {
		t.Fatal("no run succeeded")
	}

	// No run is recorded both succeeded (its commit row) and failed or lost (a hunt_run row).
	// (A gap is recorded under the id of the run that found it, beside its success.)
	both, err := conn.Query(ctx, "SELECT toString(run_id), groupArray(toString(status)) FROM "+coordDB+".hunt_runs GROUP BY run_id "+
		"HAVING countIf(status = 'succeeded') > 0 AND countIf(status IN ('failed', 'lost')) > 0")
	if err != nil {
		t.Fatal(err)
	}
	for both.Next() {
		var id string
		var statuses []string
		if err := both.Scan(&id, &statuses); err != nil {
			t.Fatal(err)
		}
		t.Errorf("run %s is recorded %v", id, statuses)
	}
	both.Close()
	// No hunt ends failed or backed off: each one's newest state, after the clean runs, is a
	// success with no retry pending.
	rows, err := conn.Query(ctx, "SELECT hunt_id, toString(t.1), t.2, toInt64(toUnixTimestamp64Milli(t.3)) FROM (SELECT hunt_id, "+
		"argMax((status, consecutive_failures, retry_after), updated) AS t FROM "+coordDB+".hunt_state GROUP BY hunt_id) ORDER BY hunt_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, status string
		var fails uint32
		var retryMs int64
		if err := rows.Scan(&id, &status, &fails, &retryMs); err != nil {
			t.Fatal(err)
		}
		if status != "succeeded" || fails != 0 || retryMs > int64(now)*1000 {
			t.Errorf("%s ends %s with %d failures, retry after %d ms: a healthy hunt must not end failed or backed off",
				id, status, fails, retryMs)
		}
	}
	var failed uint64
	_ = conn.QueryRow(ctx, "SELECT count() FROM "+coordDB+".hunt_runs WHERE status = 'failed'").Scan(&failed)
	t.Logf("%d failed runs recorded while the answers were ambiguous", failed)
}
