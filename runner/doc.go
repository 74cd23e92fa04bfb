// Package runner is hunt-runner's worker loop: every tick it reads ClickHouse's clock and the
// coordination state in one snapshot, plans the due fires with the schedule arithmetic, claims
// them in one batch through the lease protocol, runs the winners with bounded concurrency, and
// commits each one with fenced writes.
//
// # A tick
//
//  1. Snapshot (one round trip): server now, newest watermark, lease, state and pending run-now
//     request of every hunt.
//  2. Plan (pure, [planner.plan]): for each loaded, enabled hunt the latest fire is owed while the
//     watermark is below it (or there is none); a pending request is run only when nothing
//     scheduled is owed. A hunt with a live lease, one already held by this runner, or one in
//     per-hunt backoff is skipped. A live lease on an earlier fire than the owed one is an overrun,
//     counted once per (hunt, fire); a lease on the same fire is a healthy peer and is not.
//     Fires are ordered most overdue first (oldest owed fire), ties by hunt id.
//  3. Claim all planned fires in one batch ([Claimer.Claim], a constant number of round trips).
//  4. Queue the winners; at most Options.Concurrency run at once. Each held lease is renewed
//     every lease/3 from the moment it is won; a renewal that reports the lease lost cancels the
//     run, which then writes nothing more than its `lost` audit row.
//
// The number of round trips per tick is therefore constant in the number of hunts and due fires:
// snapshot + claim (+ a published-set hash check every few ticks).
//
// # A run
//
// The hunt query runs inside ClickHouse as one INSERT … SELECT into hunt_findings, each result
// row turned into a JSON document and keyed by its hash, with the data window bound as
// DateTime64(3) parameters and shifted back by the hunt's delay. A window longer than the hunt's
// max_catchup is cut to its newest max_catchup and the skipped range is written to hunt_run as a
// `gap` row. The insert carries an insert_deduplication_token derived from (hunt, fire, window)
// and the table's ReplacingMergeTree key absorbs any re-run, so a fire that runs twice (a crash
// after insert, or a claim race beyond the lease protocol's bound) adds nothing.
//
// Success commits in this order: watermark (fenced on claim_id), release (fenced), hunt_run row,
// hunt_state. A failure leaves the watermark, records the error in hunt_state, backs the hunt off
// (tick, 2×tick, … capped at its interval) and releases. If the fenced watermark write finds the
// lease is no longer ours the run is recorded as `lost`.
//
// # Shutdown
//
// When Start's context ends the runner stops claiming, lets running hunts finish for up to
// Options.Grace, then cancels them; a cancelled run commits nothing (its lease expires and a
// peer re-runs the fire, which the idempotent output absorbs). Leases won but not yet started
// are released.
package runner
