package runner

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
)

// silentSources checks h's declared sources before its run over w, in one statement on the
// hunts connection, and returns the ones that are silent: no row whose time column is at or
// after w's data end less the source's max_silence. The reference is the data end, not the
// server's now, so a hunt's delay (data expected late) is allowed for. Each source is asked
// for one row past that instant (LIMIT 1 under a filter on the time column): with the column
// in the table's sorting key the server reads only the newest granules, and it stops at the
// first row. A source that cannot be read (no such table or column, no grant) fails the run:
// a missing feed is never zero findings.
func (r *Runner) silentSources(ctx context.Context, h *hunt.Hunt, fire int64, runID uuid.UUID, w window) ([]hunt.Source, error) {
	if len(h.Sources) == 0 {
		return nil, nil
	}
	q, params := sourcesSQL(h.Sources, w.DataEnd)
	// Attributed like the hunt statement (its run's comment, a query id of the run's step).
	settings := clickhouse.Settings{"max_execution_time": int(max(h.Timeout/time.Second, 1)),
		"log_comment": r.comment(h, fire, runID, attrib.Live).String()}
	r.opts.Workloads.Apply(settings, attrib.Live)
	rows, err := r.huntConn.Query(clickhouse.Context(ctx, clickhouse.WithParameters(params), clickhouse.WithSettings(settings),
		clickhouse.WithQueryID(attrib.QueryID(runID, "sources"))), q)
	if err != nil {
		return nil, &runError{stage: "source check", err: err}
	}
	defer rows.Close()
	alive := make([]bool, len(h.Sources))
	for rows.Next() {
		var i, n uint64
		if err := rows.Scan(&i, &n); err != nil {
			return nil, &runError{stage: "source check", err: err}
		}
		if i < uint64(len(alive)) {
			alive[i] = n > 0
		}
	}
	if err := rows.Err(); err != nil {
		return nil, &runError{stage: "source check", err: err}
	}
	var silent []hunt.Source
	for i, s := range h.Sources {
		if !alive[i] {
			silent = append(silent, s)
		}
	}
	return silent, nil
}

// sourcesSQL is one row (i, 0 or 1) per source: whether it has a row at or after end less its
// max_silence. The names were checked by the decoder (plain identifiers) and are quoted.
func sourcesSQL(sources []hunt.Source, end time.Time) (string, clickhouse.Parameters) {
	params := clickhouse.Parameters{}
	parts := make([]string, len(sources))
	for i, s := range sources {
		p := "since_" + strconv.Itoa(i)
		params[p] = EpochParam(end.Add(-s.MaxSilence))
		parts[i] = fmt.Sprintf("SELECT toUInt64(%d) AS i, count() AS n FROM (SELECT 1 FROM %s WHERE %s >= {%s:DateTime64(3)} LIMIT 1)",
			i, quoteTable(s.Table), quoteIdent(s.TimeColumn), p)
	}
	return strings.Join(parts, "\nUNION ALL\n"), params
}

func quoteTable(t string) string {
	db, table, ok := strings.Cut(t, ".")
	if !ok {
		return quoteIdent(t)
	}
	return quoteIdent(db) + "." + quoteIdent(table)
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// noDataMessage says which sources were silent, for hunt_state.last_error. It is stable while
// the sources stay silent, so a hunt staying no_data writes no new state row per run.
func noDataMessage(silent []hunt.Source) string {
	var b strings.Builder
	b.WriteString("no data: ")
	for i, s := range silent {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "source %s has no row with %s within max_silence %s of the window's end", s.Table, s.TimeColumn, s.MaxSilence)
	}
	return b.String()
}
