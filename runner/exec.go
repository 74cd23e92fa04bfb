package runner

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/go-faster/city"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/configsrc"
)

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

// found is what one run of a hunt found.
type found struct {
	docs    []string // distinct findings kept, at most the hunt's max_findings, in the query's order
	total   uint64   // result rows before the cap
	dropped uint64   // result rows past the cap, not stored
}

// query runs the hunt's SELECT (configsrc.FindingsQuery, the statement the server-side check
// parsed) over the window w, on the hunts connection, and returns at most max_findings
// distinct rows as JSON documents. The hunt only reads: the runner writes its findings (storeFindings).
func (r *Runner) query(ctx context.Context, h *Hunt, fire int64, runID uuid.UUID, w window) (found, error) {
	timeout := h.timeout()
	limit := h.maxFindings()
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
			configsrc.ParamLimit: strconv.Itoa(limit + 1),
			"window_start":       epochParam(w.DataStart),
			"window_end":         epochParam(w.DataEnd),
		}),
		clickhouse.WithSettings(clickhouse.Settings{
			"max_execution_time": int(timeout / time.Second),
			"log_comment":        fmt.Sprintf("hunt-runner hunt_id=%s fire=%d run_id=%s", h.ID, fire, runID),
		}),
	)
	rows, err := r.huntConn.Query(qctx, configsrc.FindingsQuery(h.Query))
	if err != nil {
		return found{}, fmt.Errorf("hunt query: %w", err)
	}
	defer rows.Close()
	var out found
	seen := map[string]bool{}
	n := 0
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc, &out.total); err != nil {
			return found{}, fmt.Errorf("hunt query: %w", err)
		}
		if n++; n > limit {
			break
		}
		if !seen[doc] { // identical rows are one finding, as their shared finding_id says
			seen[doc] = true
			out.docs = append(out.docs, doc)
		}
	}
	if err := rows.Err(); err != nil {
		return found{}, fmt.Errorf("hunt query: %w", err)
	}
	if out.total > uint64(limit) {
		out.dropped = out.total - uint64(limit)
	}
	return out, nil
}

// storeFindings writes one attempt's findings into hunt_findings under its run id, with the runner's
// own identity. They are visible through hunt_findings_committed only once the run commits;
// the deduplication token (the run id) makes a retry of the same insert a no-op on replicated
// tables, and the table's key collapses it on any other.
func (r *Runner) storeFindings(ctx context.Context, h *Hunt, fire int64, runID uuid.UUID, docs []string) error {
	if len(docs) == 0 {
		return nil
	}
	labels := h.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"async_insert": 0, "insert_deduplication_token": "findings:" + runID.String()}))
	ctx, insert := chstore.Insert(ctx, r.opts.Database, chstore.TableFindings,
		"hunt_id", "fire", "finding_id", "finding", "severity", "labels", "run_id", "found")
	batch, err := r.conn.PrepareBatch(ctx, insert)
	if err != nil {
		return fmt.Errorf("store findings: %w", err)
	}
	defer func() { _ = batch.Abort() }()
	when := time.Unix(fire, 0).UTC()
	now := time.Now().UTC()
	for _, d := range docs {
		// city.CH64 is ClickHouse's cityHash64, so finding_id = cityHash64(finding) as before.
		if err := batch.Append(h.ID, when, city.CH64([]byte(d)), d, h.Severity, labels, runID, now); err != nil {
			return fmt.Errorf("store findings: %w", err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("store findings: %w", err)
	}
	return nil
}
