package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/chstore"
)

// findingsSQL wraps a hunt query so that ClickHouse writes its rows straight into
// hunt_findings: every result row becomes one JSON document (formatRowNoNewline keeps the
// column names and ClickHouse's own JSON rendering of every type), keyed by its cityHash64, so
// the same row found again for the same fire collapses under the ReplacingMergeTree key.
// The runner's own parameters are prefixed hr_ so they cannot collide with a hunt's.
func findingsSQL(database, query string) string {
	return "INSERT INTO " + chstore.QuoteIdent(database) + ".hunt_findings " +
		"(hunt_id, fire, finding_id, finding, severity, labels, run_id, found)\n" +
		"SELECT {hr_hunt:String}, toDateTime({hr_fire:UInt32}, 'UTC'), cityHash64(hr_finding), hr_finding, " +
		"{hr_severity:String}, JSONExtract({hr_labels:String}, 'Map(String, String)'), {hr_run_id:UUID}, now64(6)\n" +
		"FROM (SELECT formatRowNoNewline('JSONEachRow', *) AS hr_finding FROM (\n" + trimQuery(query) + "\n))"
}

// trimQuery drops trailing semicolons and blanks, which a subquery cannot hold.
func trimQuery(q string) string {
	return strings.TrimRight(strings.TrimSpace(q), "; \t\r\n")
}

// epochParam renders an instant as a DateTime64(3) parameter value. Epoch seconds are read the
// same whatever the server's or session's time zone, unlike a formatted date.
func epochParam(t time.Time) string {
	ms := t.UnixMilli()
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	return fmt.Sprintf("%s%d.%03d", sign, ms/1000, ms%1000)
}

// dedupToken names one (hunt, fire, window): a re-run of the same fire over the same window
// is dropped by ClickHouse's insert deduplication (replicated tables, or non-replicated ones with
// non_replicated_deduplication_window), and its rows collapse under the table key regardless.
func dedupToken(huntID string, fire int64, w window) string {
	return "hunt-runner:" + huntID + ":" + strconv.FormatInt(fire, 10) + ":" +
		strconv.FormatInt(w.Start, 10) + ":" + strconv.FormatInt(w.End, 10)
}

// insertFindings runs the hunt for one fire and reports how many distinct findings the fire
// now has (a re-run counts what is there, not what it added) and how many findings belong to
// uncommitted attempts: rows keyed with a fire in (lower, fire) can only come from an attempt
// that crashed or lost its lease before committing (a committed fire moves the watermark, which
// is lower), and their data is covered again by this run. One query answers both.
func (r *Runner) insertFindings(ctx context.Context, h *Hunt, fire, lower int64, runID uuid.UUID, w window) (rows, orphans uint64, err error) {
	labels := h.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	lj, err := json.Marshal(labels)
	if err != nil {
		return 0, 0, fmt.Errorf("labels: %w", err)
	}
	timeout := h.timeout()
	// Client-side limit a little past the server's. Not a context deadline: clickhouse-go
	// turns any deadline it sees into its own max_execution_time, overriding the hunt's, so the
	// parent's deadline is stripped and only its cancellation kept.
	parent := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	defer cancel()
	stopParent := context.AfterFunc(parent, cancel)
	defer stopParent()
	stop := time.AfterFunc(timeout+5*time.Second, cancel)
	defer stop.Stop()
	qctx := clickhouse.Context(ctx,
		clickhouse.WithParameters(clickhouse.Parameters{
			"hr_hunt":      h.ID,
			"hr_fire":      strconv.FormatInt(fire, 10),
			"hr_severity":  h.Severity,
			"hr_labels":    string(lj),
			"hr_run_id":    runID.String(),
			"window_start": epochParam(w.DataStart),
			"window_end":   epochParam(w.DataEnd),
		}),
		clickhouse.WithSettings(clickhouse.Settings{
			"max_execution_time":         int(timeout / time.Second),
			"log_comment":                fmt.Sprintf("hunt-runner hunt_id=%s fire=%d run_id=%s", h.ID, fire, runID),
			"insert_deduplicate":         1,
			"insert_deduplication_token": dedupToken(h.ID, fire, w),
		}),
	)
	if err := r.conn.Exec(qctx, findingsSQL(r.opts.Database, h.Query)); err != nil {
		return 0, 0, fmt.Errorf("hunt query: %w", err)
	}
	cctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
		"hr_hunt": h.ID, "hr_fire": strconv.FormatInt(fire, 10), "hr_lower": strconv.FormatInt(max(lower, 0), 10)}))
	row := r.conn.QueryRow(cctx, "SELECT uniqExactIf(finding_id, fire = toDateTime({hr_fire:UInt32}, 'UTC')), "+
		"countIf(fire != toDateTime({hr_fire:UInt32}, 'UTC')) FROM "+chstore.QuoteIdent(r.opts.Database)+".hunt_findings "+
		"WHERE hunt_id = {hr_hunt:String} AND fire > toDateTime({hr_lower:UInt32}, 'UTC') AND fire <= toDateTime({hr_fire:UInt32}, 'UTC')")
	if err := row.Scan(&rows, &orphans); err != nil {
		// The findings are written; only the count is missing. Not a failure of the run.
		r.log.Warn("counting findings failed", "hunt_id", h.ID, "fire", fire, "error", err)
		return 0, 0, nil
	}
	return rows, orphans, nil
}

// deleteOrphans removes findings of uncommitted attempts (see insertFindings) once this run
// has committed: their windows are covered by this run, so keeping them would count the same
// data twice under two fires. Best effort: a failure leaves them, and is logged.
func (r *Runner) deleteOrphans(ctx context.Context, h *Hunt, fire, lower int64) error {
	return r.conn.Exec(clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
		"hr_hunt": h.ID, "hr_fire": strconv.FormatInt(fire, 10), "hr_lower": strconv.FormatInt(max(lower, 0), 10)})),
		"DELETE FROM "+chstore.QuoteIdent(r.opts.Database)+".hunt_findings WHERE hunt_id = {hr_hunt:String} "+
			"AND fire > toDateTime({hr_lower:UInt32}, 'UTC') AND fire < toDateTime({hr_fire:UInt32}, 'UTC')")
}
