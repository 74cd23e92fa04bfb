package runner

import (
	"context"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
)

// Findings is what one run of a hunt found: the distinct rows a fire would store (JSON
// documents, at most the hunt's max_findings) and the result rows past that cap.
type Findings struct {
	Docs    []string
	Total   uint64 // result rows before the cap
	Dropped uint64
}

// Preview runs h over the data window [start, end) on conn exactly as a fire does — the same
// statement, parameters, settings and max_findings cap — and returns what the fire would
// store. It writes nothing: `hunt-runner test` (kind attrib.Test) and `preview` (attrib.Preview)
// use it, and the findings of a preview must be the findings a run commits. Each call is a
// run of its own in the server's query log: a fresh run id, the host as the runner id.
// workload is the preview class (`--workload-preview`, which `test` shares); empty sends none.
func Preview(ctx context.Context, conn driver.Conn, h hunt.Hunt, start, end time.Time, kind attrib.Kind, workload string) (Findings, error) {
	h = h.WithDefaults() // a hunt built by hand runs with the limits a loaded one has
	r, err := previewRunner(conn)
	if err != nil {
		return Findings{}, err
	}
	r.opts.Workloads = attrib.Workloads{Preview: workload}
	f, err := r.query(ctx, &h, end.Unix(), uuid.New(), window{DataStart: start.UTC(), DataEnd: end.UTC()}, kind)
	return Findings{Docs: f.docs, Total: f.total, Dropped: f.dropped}, err
}

// Statement is the statement a fire of h over the data window [start, end) sends, as Preview
// sends it: the SQL, its parameters and its settings (log_comment of the given kind, for a run
// of its own). `cost --estimate` explains it.
func Statement(h hunt.Hunt, start, end time.Time, kind attrib.Kind) (string, clickhouse.Parameters, clickhouse.Settings, error) {
	h = h.WithDefaults()
	r, err := previewRunner(nil)
	if err != nil {
		return "", nil, nil, err
	}
	q, p, s := r.statement(&h, end.Unix(), uuid.New(), window{DataStart: start.UTC(), DataEnd: end.UTC()}, kind)
	return q, p, s, nil
}

// previewRunner has the options a run has by default (byte caps, logger), so a preview stores
// what a fire with default flags would. The hunt set is unknown here: the comment leaves it out.
func previewRunner(conn driver.Conn) (*Runner, error) {
	opts := Options{Owner: attrib.Host()}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	opts.HuntSet = ""
	return &Runner{huntConn: conn, opts: opts, log: opts.Logger}, nil
}
