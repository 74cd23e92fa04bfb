package hunt

// RunStatus is the outcome of one run attempt, as written to hunt_run.status, hunt_state and
// the runs metric.
type RunStatus string

// Run statuses. Succeeded, Failed, Lost, Gap and OverBudget are written to hunt_run; NoData
// and OverBudget to hunt_state; Cancelled and Unknown are reported (metrics, logs,
// Options.OnRun) but write nothing.
const (
	RunSucceeded RunStatus = "succeeded"
	RunFailed    RunStatus = "failed"
	RunLost      RunStatus = "lost"
	RunGap       RunStatus = "gap"
	// RunNoData is a run that committed its window while a declared source had been silent
	// longer than its max_silence: the hunt's state stays no_data until the source speaks.
	RunNoData RunStatus = "no_data"
	// RunOverBudget is a run the server stopped at the hunt's read budget (max_rows_read,
	// max_bytes_read): nothing committed (on_budget: fail) or its window recorded as a gap
	// (on_budget: skip).
	RunOverBudget RunStatus = "over_budget"
	// RunCancelled is a run cut short by shutdown: nothing is written, the lease expires.
	RunCancelled RunStatus = "cancelled"
	// RunUnknown is a run whose commit could not be confirmed or refuted within the commit
	// budget (ClickHouse kept answering "unknown" or nothing): nothing more is written.
	RunUnknown RunStatus = "unknown"
)

func (s RunStatus) String() string { return string(s) }

// Kind is what caused a run or a commit, as written to hunt_run.kind and hunt_watermark.kind.
type Kind string

// Run kinds. A row written before kinds existed has the empty kind, read as KindScheduled.
const (
	KindScheduled Kind = "scheduled"
	KindRequest   Kind = "request"
	KindBackfill  Kind = "backfill"
	// KindImported marks a commit row written by `import-legacy`: the earlier runner's
	// progress, from which the first run continues.
	KindImported Kind = "imported"
)

func (k Kind) String() string { return string(k) }
