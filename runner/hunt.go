package runner

import (
	"time"
)

// Hunt is what the runner needs of one hunt definition. Interval and Offset are seconds on the
// schedule grid (Offset already resolved: spread hash or cron-pinned).
type Hunt struct {
	ID         string
	Interval   int64
	Offset     int64
	Delay      time.Duration // data window shifted back by this much
	MaxCatchup time.Duration // longest window one run covers; 0 means 24 intervals
	Timeout    time.Duration // per-run limit and max_execution_time; 0 means DefaultRunTimeout
	Query      string        // one SELECT using {window_start:DateTime64(3)} and {window_end:DateTime64(3)}
	Severity   string
	Labels     map[string]string
	// MaxFindings caps the findings one run stores; 0 means DefaultMaxFindings. The rest are
	// counted as dropped in the run's record.
	MaxFindings int
	ConfigHash  string // content hash of the definition, for logs
}

// DefaultRunTimeout applies to a hunt that sets no timeout.
const DefaultRunTimeout = 5 * time.Minute

// maxCatchupSeconds is the longest window, in seconds, one run of h covers.
func (h *Hunt) maxCatchupSeconds() int64 {
	if h.MaxCatchup <= 0 {
		return 24 * h.Interval
	}
	s := int64((h.MaxCatchup + time.Second - 1) / time.Second)
	if s < h.Interval {
		// A catch-up shorter than one interval would record a gap on every healthy run.
		return h.Interval
	}
	return s
}

// DefaultMaxFindings and MaxFindingsCeiling bound the findings one run stores.
const (
	DefaultMaxFindings = 1000
	MaxFindingsCeiling = 10000
)

// Byte caps on findings (Options.MaxFindingBytes, Options.MaxRunFindingsBytes; run's
// --max-finding-bytes and --max-run-findings-bytes). Rows are capped in bytes because bytes
// are what a run costs the runner: 120 findings of 1 MB once took a pod from 28 MB to 818 MB.
// The client holds a few copies of what a run keeps (the block received, the documents, the
// insert batch and its encoding): measured, a run capped at 1 MiB peaked 6-8 MiB of live heap
// (runner/findings_bytes_test.go), so a pod's worst case is about 6 × concurrency × the run cap.
const (
	DefaultMaxFindingBytes     = 64 << 10
	MinMaxFindingBytes         = 1 << 10
	DefaultMaxRunFindingsBytes = 8 << 20
	// findingRowBytes is what one stored row costs beyond its document and labels (ids,
	// times, severity), counted against the run cap.
	findingRowBytes = 64
)

// rowBytes is what one of h's findings rows costs beyond its document: the labels are copied
// into every row.
func (h *Hunt) rowBytes() int64 {
	n := int64(findingRowBytes + len(h.Severity))
	for k, v := range h.Labels {
		n += int64(len(k) + len(v))
	}
	return n
}

func (h *Hunt) maxFindings() int {
	switch {
	case h.MaxFindings <= 0:
		return DefaultMaxFindings
	case h.MaxFindings > MaxFindingsCeiling:
		return MaxFindingsCeiling
	}
	return h.MaxFindings
}

func (h *Hunt) timeout() time.Duration {
	if h.Timeout <= 0 {
		return DefaultRunTimeout
	}
	return h.Timeout
}

// HuntSet is one loaded, immutable set of hunts. Hash identifies its content (it is compared
// with the hash materialise published); Hunts holds only enabled hunts, sorted by id.
type HuntSet struct {
	Hash  string
	Hunts []Hunt
}

// Source yields the current hunt set; it is called once per tick and must be cheap. A nil set
// means nothing has loaded yet (the runner claims nothing and is not ready).
type Source func() *HuntSet
