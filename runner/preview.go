package runner

import (
	"context"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
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
// store. It writes nothing: `hunt-runner test` and `preview` use it, and the findings of a
// preview must be the findings a run commits.
func Preview(ctx context.Context, conn driver.Conn, h hunt.Hunt, start, end time.Time) (Findings, error) {
	h = h.WithDefaults() // a hunt built by hand runs with the limits a loaded one has
	// The options a run has by default (byte caps, logger), so a preview stores what a fire
	// with default flags would.
	opts := Options{Owner: "preview"}
	if err := opts.setDefaults(); err != nil {
		return Findings{}, err
	}
	r := &Runner{huntConn: conn, opts: opts, log: opts.Logger}
	f, err := r.query(ctx, &h, end.Unix(), uuid.Nil, window{DataStart: start.UTC(), DataEnd: end.UTC()})
	return Findings{Docs: f.docs, Total: f.total, Dropped: f.dropped}, err
}
