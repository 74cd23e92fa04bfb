package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store"
)

// EpochParam renders an instant as the value of a window parameter. Epoch seconds are read the
// same whatever the server's or session's time zone, unlike a formatted date. A whole second
// is sent without a fraction: the server parses "946684800" as DateTime and DateTime64 alike,
// but refuses "946684800.000" for a {window_start:DateTime} parameter.
func EpochParam(t time.Time) string {
	ms := t.UnixMilli()
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	if ms%1000 == 0 {
		return fmt.Sprintf("%s%d", sign, ms/1000)
	}
	return fmt.Sprintf("%s%d.%03d", sign, ms/1000, ms%1000)
}

// found is what one run of a hunt found.
type found struct {
	docs      []string      // distinct findings kept, within the hunt's max_findings and the byte caps, in the query's order
	total     uint64        // result rows before any cap
	dropped   uint64        // result rows not stored: past max_findings or past the run's byte cap
	truncated uint64        // findings over the per-finding byte cap, stored as truncation records
	bytes     int64         // what the kept rows cost, documents and labels
	silent    []hunt.Source // declared sources found silent before the run (no_data)
	// hits counts, per exception id, the result rows a live exception removed; nil when none
	// was live.
	hits map[string]uint64
}

// findingCaps bound what one run reads: rows, and bytes per finding and per run.
type findingCaps struct {
	rows       int
	findingMax int64 // one document
	runMax     int64 // all kept rows, rowBytes each beyond their document
	rowBytes   int64
}

func (r *Runner) capsFor(h *hunt.Hunt) findingCaps {
	return findingCaps{rows: h.MaxFindings, findingMax: r.opts.MaxFindingBytes, runMax: r.opts.MaxRunFindingsBytes, rowBytes: rowBytes(h)}
}

// comment is the log_comment of a statement of run runID of h (internal/attrib).
func (r *Runner) comment(h *hunt.Hunt, fire int64, runID uuid.UUID, kind attrib.Kind) attrib.Comment {
	return attrib.Comment{HuntID: h.ID, Fire: time.Unix(fire, 0), RunID: runID, Revision: h.Hash,
		Kind: kind, RunnerID: r.opts.Owner, HuntSet: r.opts.HuntSet}
}

// statement is what a run of h over w sends: configsrc.FindingsQuery, its parameters and its
// settings. `cost --estimate` explains exactly this (Statement).
//
// The exceptions live at the fire's time are applied in the statement (ExceptionsQuery): the
// same fire always sends the same statement, and an exception past its until is no longer in
// it, with no reload.
func (r *Runner) statement(h *hunt.Hunt, fire int64, runID uuid.UUID, w window, kind attrib.Kind) (string, clickhouse.Parameters, clickhouse.Settings) {
	query, params, settings, _ := r.statementLive(h, fire, runID, w, kind)
	return query, params, settings
}

// statementLive is statement with the live exceptions it applies.
func (r *Runner) statementLive(h *hunt.Hunt, fire int64, runID uuid.UUID, w window, kind attrib.Kind) (string, clickhouse.Parameters, clickhouse.Settings, []hunt.Exception) {
	caps := r.capsFor(h)
	live := h.LiveExceptions(time.Unix(fire, 0))
	// The byte caps are parameters of the statement, not max_result_bytes with
	// result_overflow_mode='break': that setting is also applied on the shards running parts
	// of a distributed query, where cutting a partial result silently would change what the
	// hunt finds, and it still sends the whole block that crosses it.
	params := clickhouse.Parameters{
		configsrc.ParamLimit:           strconv.Itoa(caps.rows + 1),
		configsrc.ParamMaxFindingBytes: strconv.FormatInt(caps.findingMax, 10),
		configsrc.ParamMaxRunBytes:     strconv.FormatInt(caps.runMax, 10),
		configsrc.ParamRowBytes:        strconv.FormatInt(caps.rowBytes, 10),
		"window_start":                 EpochParam(w.DataStart),
		"window_end":                   EpochParam(w.DataEnd),
	}
	settings := clickhouse.Settings{
		"max_execution_time": int(h.Timeout / time.Second),
		"log_comment":        r.comment(h, fire, runID, kind).String(),
	}
	budgetSettings(h, settings)
	r.opts.Workloads.Apply(settings, kind)
	query, excParams := configsrc.ExceptionsQuery(h.Query, live)
	for k, v := range excParams {
		params[k] = v
	}
	if len(live) > 0 {
		// The row that carries the hits of the excluded rows comes before the findings.
		params[configsrc.ParamLimit] = strconv.Itoa(caps.rows + 2)
	}
	return query, params, settings, live
}

// query runs the hunt's SELECT (configsrc.FindingsQuery, the statement the server-side check
// parsed) over the window w, on the hunts connection, and returns at most max_findings
// distinct rows as JSON documents, bounded in bytes (findingCaps). The hunt only reads: the
// runner writes its findings (storeFindings).
func (r *Runner) query(ctx context.Context, h *hunt.Hunt, fire int64, runID uuid.UUID, w window, kind attrib.Kind) (found, error) {
	timeout := h.Timeout
	caps := r.capsFor(h)
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
	query, params, settings, live := r.statementLive(h, fire, runID, w, kind)
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(params), clickhouse.WithSettings(settings),
		clickhouse.WithQueryID(attrib.QueryID(runID, "")))
	rows, err := r.huntConn.Query(qctx, query)
	if err != nil {
		return found{}, &runError{stage: "hunt query", err: err}
	}
	defer rows.Close()
	out, err := readFindings(rows, caps, live)
	if err != nil {
		return found{}, &runError{stage: "hunt query", err: err}
	}
	if out.truncated > 0 || out.bytes >= caps.runMax {
		r.log.Warn("hunt findings over a byte cap", "hunt_id", h.ID, "fire", fire, "run_id", runID,
			"findings_truncated", out.truncated, "max_finding_bytes", caps.findingMax,
			"findings_bytes", out.bytes, "max_run_findings_bytes", caps.runMax, "findings_dropped", out.dropped)
		r.opts.Metrics.findingsTruncated(ctx, h.ID, out.truncated)
	}
	return out, nil
}

// readFindings reads FindingsQuery's rows and keeps them while the run is within caps. The
// server already truncates long documents and stops at the run's byte cap; the reader applies
// the same caps itself, so a server that did not (an older statement, a proxy) still cannot
// make the runner hold more than the cap: reading stops there, and closing the rows cancels
// the rest. A document over the per-finding cap here is not stored (the server should have
// truncated it) and counts as dropped. dropped is every row of hr_total not kept.
//
// With live exceptions (configsrc.ExceptionsQuery) every row also carries the hits of each
// exception, and a row that an exception matched (at most one, first) is no finding.
func readFindings(rows driver.Rows, caps findingCaps, live []hunt.Exception) (found, error) {
	var out found
	seen := map[string]bool{}
	var kept uint64
	if len(live) > 0 {
		out.hits = make(map[string]uint64, len(live))
		for _, e := range live {
			out.hits[e.ID] = 0 // live, if nothing matched
		}
	}
	for rows.Next() {
		var doc string
		var before uint64 // the server's own count, read to keep the columns in step
		if len(live) == 0 {
			if err := rows.Scan(&doc, &out.total, &out.truncated, &before); err != nil {
				return found{}, err
			}
		} else {
			var exc uint16
			var hits []uint64
			if err := rows.Scan(&doc, &out.total, &out.truncated, &before, &exc, &hits); err != nil {
				return found{}, err
			}
			for i, n := range hits[:min(len(hits), len(live))] {
				out.hits[live[i].ID] = n
			}
			if exc > 0 {
				continue // the row that carried the excluded rows' hits
			}
		}
		if kept == uint64(caps.rows) || out.bytes >= caps.runMax {
			break
		}
		if int64(len(doc)) > caps.findingMax {
			continue
		}
		kept++
		out.bytes += int64(len(doc)) + caps.rowBytes
		if !seen[doc] { // identical rows are one finding, as their shared finding_id says
			seen[doc] = true
			out.docs = append(out.docs, doc)
		}
	}
	if err := rows.Err(); err != nil {
		return found{}, err
	}
	if out.total > kept {
		out.dropped = out.total - kept
	}
	return out, nil
}

// storeFindings writes one attempt's findings into hunt_findings under its run id
// (store.Store.InsertFindings), with the runner's own identity and the run's attribution. They
// are visible through hunt_findings_committed only once the run commits.
func (r *Runner) storeFindings(ctx context.Context, h *hunt.Hunt, fire int64, runID uuid.UUID, docs []string, kind attrib.Kind) error {
	if len(docs) == 0 {
		return nil
	}
	// A statement the server refused before executing it (lease.Refused: a pending quorum
	// insert, too many parts) wrote nothing, so it is sent again. Any other error may come
	// from an insert that landed: it fails the attempt, whose findings stay invisible unless
	// it commits, rather than risk a second copy under the same run id.
	wait := findingsRetryWait
	for attempt := 1; ; attempt++ {
		err := r.insertFindings(ctx, h, fire, runID, docs, kind, attempt)
		var re *runError
		if err == nil || !errors.As(err, &re) || !lease.Refused(re.err) || attempt == findingsRetries ||
			!lease.Sleep(ctx, lease.Jitter(wait)) {
			return err
		}
		wait *= 2
	}
}

// findingsRetries and findingsRetryWait bound the findings insert's retries after refusals.
const (
	findingsRetries   = 5
	findingsRetryWait = 50 * time.Millisecond
)

func (r *Runner) insertFindings(ctx context.Context, h *hunt.Hunt, fire int64, runID uuid.UUID, docs []string, kind attrib.Kind, attempt int) error {
	ex, fellBack, err := explain(h, docs)
	if err != nil {
		return &runError{stage: "store findings", err: err}
	}
	if fellBack > 0 {
		r.log.Warn("severity_from held no low|medium|high|critical value; those findings keep the hunt's severity",
			"hunt_id", h.ID, "fire", fire, "run_id", runID, "findings", fellBack, "severity", h.Severity)
		r.opts.Metrics.severityFallback(ctx, h.ID, fellBack)
	}
	err = r.store.InsertFindings(ctx, store.Findings{HuntID: h.ID, Fire: fire, RunID: runID, Severity: h.Severity,
		Labels: h.Labels, Docs: docs, Found: time.Now(), Explained: ex, Runbook: h.Runbook, Mitre: h.Mitre,
		Revision:   h.Revision(),
		LogComment: r.comment(h, fire, runID, kind).String(), Workload: r.opts.Workloads.For(kind), QueryID: attrib.QueryID(runID, fmt.Sprintf("findings-%d", attempt))})
	if err != nil {
		return &runError{stage: "store findings", err: err}
	}
	return nil
}

// explain applies h's explain keys to every document; fellBack counts the rows whose
// severity_from value was not a severity.
func explain(h *hunt.Hunt, docs []string) (out []hunt.Explained, fellBack int, err error) {
	e, err := h.Explainer()
	if err != nil {
		return nil, 0, err
	}
	out = make([]hunt.Explained, len(docs))
	for i, d := range docs {
		out[i] = e.Explain(d)
		if out[i].SeverityFellBack {
			fellBack++
		}
	}
	return out, fellBack, nil
}

// runError is an error of a hunt's own statement, or of storing what it found. Its text is the
// server's and can quote row values (`Cannot parse string '…'`, a row echoed by an insert
// error), so it is data: Error, the whole text, goes into the run record (hunt_runs.error,
// hunt_state.last_error), shown with the run where its findings are; logs and traces get only
// LogValue, which names the stage and the server's error code (the run id is on the log line).
type runError struct {
	stage string // "hunt query", "store findings"
	err   error
}

func (e *runError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// LogValue makes slog print the summary wherever a runError is logged as a value.
func (e *runError) LogValue() slog.Value { return slog.StringValue(e.summary()) }

// summary quotes only text made here: the server's error code, a network error (addresses
// and the system's reason) or a context error. Anything else is named by its type.
func (e *runError) summary() string {
	var ex *clickhouse.Exception
	var op *net.OpError
	switch {
	case errors.As(e.err, &ex):
		return fmt.Sprintf("%s: ClickHouse error code %d (the server's message can quote row values: it is in the run's record, hunt_runs.error)", e.stage, ex.Code)
	case errors.Is(e.err, context.Canceled):
		return e.stage + ": " + context.Canceled.Error()
	case errors.Is(e.err, context.DeadlineExceeded):
		return e.stage + ": " + context.DeadlineExceeded.Error()
	case errors.As(e.err, &op):
		return e.stage + ": " + op.Error()
	}
	return fmt.Sprintf("%s failed (%T; the message is in the run's record, hunt_runs.error)", e.stage, e.err)
}

// logSafe is err as logs and traces may carry it: a runError's summary, any other error as is
// (the runner's own errors quote no row values).
func logSafe(err error) error {
	var re *runError
	if errors.As(err, &re) {
		return errors.New(re.summary())
	}
	return err
}
