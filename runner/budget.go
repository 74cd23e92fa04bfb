package runner

import (
	"errors"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

// The server's answers to a statement that passed its read budget (read_overflow_mode =
// 'throw'). They are final (lease/outcome.go retries neither): the same window reads the same
// rows again.
const (
	codeTooManyRows  = 158 // TOO_MANY_ROWS: max_rows_to_read
	codeTooManyBytes = 307 // TOO_MANY_BYTES: max_bytes_to_read
)

// budgetSettings adds h's read budget to the settings of its statement: the server stops the
// statement when it would read more, and says so with codeTooManyRows or codeTooManyBytes.
// A hunt without a budget leaves the server's own limits in force.
func budgetSettings(h *hunt.Hunt, s clickhouse.Settings) {
	if h.MaxRowsRead > 0 {
		s["max_rows_to_read"] = h.MaxRowsRead
	}
	if h.MaxBytesRead > 0 {
		s["max_bytes_to_read"] = h.MaxBytesRead
	}
	if h.MaxRowsRead > 0 || h.MaxBytesRead > 0 {
		s["read_overflow_mode"] = "throw"
	}
}

// overBudget reports whether err is the server stopping a statement at its read budget.
func overBudget(err error) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && (ex.Code == codeTooManyRows || ex.Code == codeTooManyBytes)
}

// skipWindow is run as committed by on_budget: skip: its whole window (and any gap before it)
// becomes a recorded gap, and no findings are kept.
func skipWindow(run store.Run) store.Run {
	if run.GapEnd <= run.GapStart {
		run.GapStart = run.WindowStart
	}
	run.GapEnd, run.WindowStart = run.WindowEnd, run.WindowEnd
	run.RowsWritten, run.FindingsDropped = 0, 0
	return run
}
