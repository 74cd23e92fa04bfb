package runner

import "github.com/hunt-runner/hunt-runner/hunt"

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
func rowBytes(h *hunt.Hunt) int64 {
	n := int64(findingRowBytes + len(h.Severity))
	for k, v := range h.Labels {
		n += int64(len(k) + len(v))
	}
	return n
}

// Source yields the current hunt set; it is called once per tick and must be cheap. A nil set
// means nothing has loaded yet (the runner claims nothing and is not ready). The runner runs
// the set's enabled hunts (hunt.Set.Enabled).
type Source func() *hunt.Set
