// Package schedule is the schedule arithmetic of hunt-runner, its due predicate, and the diff
// that publishes a hunt set's schedule. It holds no SQL: store writes and reads the rows.
//
// All schedule values are integer epoch seconds on ClickHouse's clock. A hunt with interval I
// and phase offset P fires at every t with t ≡ P (mod I). The offset is either spread (a hash
// of the hunt id over the first fraction f of the interval, [PhaseOffset], bit-compatible with
// the earlier Python runner) or pinned by a cron expression ([ParseCron]).
//
// A fire stays owed until its watermark is written. This is THE statement of the due
// predicate (docs point here; TestDocStatesDuePredicate keeps it and [DueOn] together): a hunt
// is due at now iff its schedule row is live (enabled, interval > 0) and
//
//	(no watermark, or watermark < LatestFire(now),
//	     or a run-now request with watermark < requested_fire <= now)
//	and (no lease, or its newest lease_until <= now,
//	     or that lease is spent: its fire <= watermark)
//	and (no backoff: its newest hunt_state row has retry_after <= now)
//	and (not paused: its newest hunt_pause row resumes it, or its paused_until is set and <= now).
//
// The watermark is the hunt's greatest: commits only raise it. [IsDue] is that predicate in Go
// and the runner plans with it ([Owed], [DueAt], [Behind], [RunSpan]); store.DueCountSQL is the
// same predicate in ClickHouse SQL, used by `hunt-runner due`, the KEDA shim and the backlog view
// so that the backlog is computable with no runner alive. A parity test over a full matrix on the
// real engine (store's TestDueParity) keeps the two identical.
//
// [Materialise] publishes a hunt set into hunt_schedule: [RowsOf] computes the rows, Materialise
// diffs them with what is published and writes only new or changed rows, and tombstones
// (enabled=0, interval 0) for hunts that were removed or disabled. It reads and writes through
// the two-method [Store] port, which store.Schedule implements on the engine.
package schedule
