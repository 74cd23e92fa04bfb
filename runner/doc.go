// Package runner is hunt-runner's worker loop: every tick it reads ClickHouse's clock and the
// coordination state of the hunts that can be due in one snapshot, plans the due fires with
// schedule's predicate, claims them in one batch through the lease protocol (at most --cap
// runs of the hunt set in flight across pods, when set), runs the winners with bounded
// concurrency, and commits each one with a compare-and-set (docs/runner.md has the operator's
// view).
//
// # Parts
//
// A Runner composes parts that each own their state: the planner (plan.go) and the memory of
// earlier ticks (memory.go), ownership of hunt ids (ownership.go), the claim protocol (the
// Claimer), the executor with the run slots and queue (executor.go), one job per won fire
// (job.go), the committer (commit.go), the heartbeater and the publication check. The tick
// (runner.go) composes them; nothing else holds the runner's state.
//
// # A tick
//
//  1. Snapshot (store.Store.SnapshotOf: a constant number of round trips): server now, every
//     pause, pending run-now request and backfill still to run, and the newest watermark, lease
//     and state (with the persisted retry_after of a failing hunt) of the hunts the runner's
//     memory (memory.go) says may be owed and of those the small tables name. A hunt remembered
//     as caught up is neither read nor planned until its next fire comes.
//  2. Plan: schedule's due predicate (stated once, in schedule's package comment) decides which
//     fire each owed hunt has and whether it may be claimed now; the runner adds only that a
//     hunt it already holds is not claimed again. Fires are ordered most overdue first, hunts
//     that never ran before any other.
//  3. Claim all planned fires in one batch ([Claimer.Claim], or ClaimCapped under --cap; a
//     constant number of round trips),
//     at most as many as the run slots plus the queue target (queueTarget: what the slots finish
//     during two claim cycles, within a third of a lease).
//  4. Queue the winners; at most Options.Concurrency run at once. Each held lease is renewed
//     every lease/3; a renewal that reports the lease lost, or a lease that can no longer be
//     trusted, cancels the run, which then writes nothing more than its `lost` record. When runs
//     finish while fires were left unclaimed and the queue is down to half its target, the next
//     tick starts at once instead of waiting for the timer.
//
// # A run
//
// The window starts at the watermark the claim's verify read saw (Lease.Watermark), not at the
// tick's snapshot. The hunt's SELECT (configsrc.FindingsQuery) runs on the hunts connection;
// the runner keeps at most the hunt's max_findings distinct rows, in a deterministic order, and
// stores them under the attempt's run id (store.Store.InsertFindings). The commit is one
// compare-and-set insert, shared with the commits of runs that finished meanwhile
// (store.Store.AdvanceAll): each row lands only while its lease is this claim's and live and
// its watermark is still where the window starts, and the row is the run's record; each
// attempt is made only while the lease is trusted. Findings become visible through
// hunt_findings_committed exactly when the commit lands, and the commit spends the lease: the
// hunt is free for its next fire without a release (renewals end before it). A failure
// records the error and a retry_after in hunt_state (every pod honours it) and releases the
// lease; a refused commit is recorded `lost`.
//
// # Shutdown
//
// When Start's context ends the runner stops claiming, lets running hunts finish for up to
// Options.Grace, then cancels them; a cancelled run commits nothing (its lease expires and a
// peer runs the fire). Leases won but not yet started are released.
package runner
