package hunt

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"time"
)

// SinkNameRe is the shape of a notify sink name: of the sinks the notify config defines and
// of the names a hunt's notify: list gives. It is here, in the leaf both readers import, so
// the two cannot drift apart.
var SinkNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Defaults of optional hunt fields and the ceilings a hunt may ask for. WithDefaults applies
// the defaults; the decoder refuses values past the ceilings.
const (
	// SeverityDefault is the severity of a hunt that sets none.
	SeverityDefault = "medium"
	// TimeoutDefault is the per-run limit (max_execution_time) of a hunt that sets no timeout.
	TimeoutDefault = 5 * time.Minute
	// CatchUpIntervalsDefault is how many intervals one run covers at most when a hunt sets no
	// max_catchup.
	CatchUpIntervalsDefault = 24
	// MaxFindingsDefault caps the findings one run stores when a hunt sets no max_findings;
	// MaxFindingsCeiling is the most a hunt may ask for.
	MaxFindingsDefault = 1000
	MaxFindingsCeiling = 10000
	// HuntSetDefault is the hunt set of every command that is not given one, and of every row
	// written before hunt sets existed (the hunt_set columns default to it).
	HuntSetDefault = "default"
	// OnBudgetDefault is what a run stopped by its read budget does when a hunt sets no
	// on_budget: it fails, and the window stays owed.
	OnBudgetDefault = OnBudgetFail
)

// What a run stopped by its read budget does (on_budget:).
const (
	// OnBudgetFail keeps the window owed: the run is recorded over_budget and the hunt backs
	// off until its next fire (or a new revision of it).
	OnBudgetFail = "fail"
	// OnBudgetSkip commits the window as a recorded gap, so the hunt moves on.
	OnBudgetSkip = "skip"
)

// Source is one entry of a hunt's sources: a table the hunt reads whose newest time tells
// whether its feed is alive.
type Source struct {
	// Table is db.table or table (the hunts identity's current database), as written.
	Table string
	// TimeColumn is the column whose newest value is the source's last word.
	TimeColumn string
	// MaxSilence is how long the newest row may be older than the run's data window end
	// before the source counts as silent.
	MaxSilence time.Duration
	Line       int // line of the entry in the hunt file
}

// Hunt is one validated hunt definition. Times are whole seconds, as the decoder reads them;
// the *Seconds methods give them on the schedule grid.
type Hunt struct {
	ID          string
	File        string // path relative to the source root, with forward slashes
	Line        int    // line of the id key, or 1 when the id comes from the file name
	QueryLine   int    // line where the query text starts
	QueryColumn int    // column where the query text starts (and its later lines, in a block)
	Description string
	Interval    time.Duration // whole seconds, at least 1s
	Offset      time.Duration // phase offset in [0, Interval): spread by id, or pinned by a cron
	Pinned      bool          // Offset comes from a cron expression, not from the spread hash
	Enabled     bool
	// Query is a single read-only SELECT after {window} expansion. It uses the parameters
	// {window_start:DateTime64(3)} and {window_end:DateTime64(3)} (DateTime types), which the
	// runner binds to the run's window [start, end) in UTC.
	Query      string
	Delay      time.Duration // data window shifted back by this much; default 0
	MaxCatchup time.Duration // longest window one run covers; default CatchUpIntervalsDefault × Interval
	Timeout    time.Duration // per-run limit (max_execution_time); default TimeoutDefault
	Severity   string        // info, low, medium (default), high or critical
	Labels     map[string]string
	// MaxFindings caps the findings one run stores (max_findings; MaxFindingsDefault, at most
	// MaxFindingsCeiling). The runner fetches one row more to know the cap was passed.
	MaxFindings int
	Hash        string // hex SHA-256 of the normalised definition (not of File or Line): see ComputeHash
	// Notify names the notify sinks of this hunt (notify:); nil leaves it to the notify
	// config's routes, an empty list sends nothing.
	Notify []string
	// Suppress is suppress: {by, for}; nil means every fire with findings notifies.
	Suppress *Suppress
	// Sources are the declared sources (sources:), checked for freshness before each run.
	Sources []Source
	// MaxRowsRead and MaxBytesRead are the read budget of one run (max_rows_read,
	// max_bytes_read; the operator's default when unset, 0: none), applied on the server as
	// max_rows_to_read / max_bytes_to_read.
	MaxRowsRead, MaxBytesRead uint64
	// OnBudget is OnBudgetFail (default) or OnBudgetSkip.
	OnBudget string

	// The explain keys, applied to every finding row (Explainer, docs/hunts.md): title: and
	// dedup: are templates over output columns ({{column}}), severity_from: names the column
	// whose value (low|medium|high|critical) is the row's severity, falling back to Severity.
	Title        string
	Dedup        string
	SeverityFrom string
	Runbook      string   // absolute http(s) URL
	Mitre        []string // ATT&CK ids (MitreRe)

	// Exceptions are the hunt's exceptions: its own (exceptions:) and then those of the shared
	// lists it names (exceptions_from:), resolved when the set is built. See Exception.
	Exceptions []Exception
	// ExceptionsFrom names the shared lists, as written (their items are in Exceptions).
	ExceptionsFrom []string

	// Commit is the git commit the definition was read from ("" for a directory source): with
	// Hash it makes the hunt's Revision. It is not part of Hash.
	Commit string
}

// Suppress is a hunt's suppress: block. A finding whose By fields (top-level keys of the
// finding object) equal those of a finding already notified for the hunt within For is
// stored but not notified again (notify package, docs/findings.md).
type Suppress struct {
	By  []string
	For time.Duration
}

// WithDefaults returns h with every optional field that is unset given its default. It is the
// one place defaults are applied: the decoder calls it, and so does NewSet for hunts built by
// hand, so every consumer reads a field as it is. It is idempotent.
func (h Hunt) WithDefaults() Hunt {
	h.Severity = cmp.Or(h.Severity, SeverityDefault)
	h.Timeout = cmp.Or(h.Timeout, TimeoutDefault)
	h.MaxCatchup = cmp.Or(h.MaxCatchup, CatchUpIntervalsDefault*h.Interval)
	// The decoder refuses a max_findings past the ceiling; a hunt built by hand is held to it.
	h.MaxFindings = min(cmp.Or(h.MaxFindings, MaxFindingsDefault), MaxFindingsCeiling)
	h.OnBudget = cmp.Or(h.OnBudget, OnBudgetDefault)
	return h
}

// IntervalSeconds is the interval in seconds on the schedule grid.
func (h *Hunt) IntervalSeconds() int64 { return secs(h.Interval) }

// OffsetSeconds is the phase offset in seconds on the schedule grid.
func (h *Hunt) OffsetSeconds() int64 { return secs(h.Offset) }

// DelaySeconds is the delay in whole seconds, rounded up so the data window is never shifted
// less than asked.
func (h *Hunt) DelaySeconds() int64 { return ceilSecs(h.Delay) }

// MaxCatchupSeconds is the longest window, in seconds, one run of h covers: max_catchup
// (its default when unset) rounded up, and never less than one interval.
func (h *Hunt) MaxCatchupSeconds() int64 {
	// A catch-up shorter than one interval would record a gap on every healthy run.
	return max(ceilSecs(h.WithDefaults().MaxCatchup), h.IntervalSeconds())
}

// QueryPos maps a line and column of h.Query (1-based, as in a server's refusal) to the hunt
// file. Line 0 means the query as a whole: its start.
func (h *Hunt) QueryPos(line, col int) (fileLine, fileCol int) {
	if line < 1 || col < 1 {
		return max(h.QueryLine, 1), max(h.QueryColumn, 1)
	}
	return max(h.QueryLine, 1) + line - 1, max(h.QueryColumn, 1) + col - 1
}

// ComputeHash is the value of Hash: a hex SHA-256 over the fields that define how the hunt
// runs, in a fixed encoding. It is published in hunt_schedule.config_hash, so the encoding is
// kept stable: a field added here changes every hunt's hash once, unless it is omitted while
// unset (sources and the read budget are), so hunts that do not use it keep their hash.
func (h *Hunt) ComputeHash() string {
	type source struct {
		Table      string `json:"table"`
		TimeColumn string `json:"time_column"`
		MaxSilence int64  `json:"max_silence"`
	}
	var sources []source
	for _, s := range h.Sources {
		sources = append(sources, source{s.Table, s.TimeColumn, secs(s.MaxSilence)})
	}
	onBudget := h.OnBudget
	if onBudget == OnBudgetDefault {
		onBudget = ""
	}
	norm := struct {
		ID          string            `json:"id"`
		Description string            `json:"description"`
		Interval    int64             `json:"interval"`
		Offset      int64             `json:"offset"`
		Pinned      bool              `json:"pinned"`
		Enabled     bool              `json:"enabled"`
		Query       string            `json:"query"`
		Delay       int64             `json:"delay"`
		MaxCatchup  int64             `json:"max_catchup"`
		Timeout     int64             `json:"timeout"`
		Severity    string            `json:"severity"`
		Labels      map[string]string `json:"labels"` // encoding/json sorts map keys
		MaxFindings int               `json:"max_findings"`
		Sources     []source          `json:"sources,omitempty"`
		MaxRows     uint64            `json:"max_rows_read,omitempty"`
		MaxBytes    uint64            `json:"max_bytes_read,omitempty"`
		OnBudget    string            `json:"on_budget,omitempty"`
		// The explain keys change what a finding row holds. omitempty keeps the hash of a hunt
		// that sets none as it was before they existed.
		Title        string   `json:"title,omitempty"`
		Dedup        string   `json:"dedup,omitempty"`
		SeverityFrom string   `json:"severity_from,omitempty"`
		Runbook      string   `json:"runbook,omitempty"`
		Mitre        []string `json:"mitre,omitempty"`
		// Exceptions change which rows are findings; omitempty as for the explain keys.
		Exceptions []exceptionDigest `json:"exceptions,omitempty"`
	}{h.ID, h.Description, secs(h.Interval), secs(h.Offset), h.Pinned, h.Enabled, h.Query,
		secs(h.Delay), secs(h.MaxCatchup), secs(h.Timeout), h.Severity, h.Labels, h.MaxFindings,
		sources, h.MaxRowsRead, h.MaxBytesRead, onBudget,
		h.Title, h.Dedup, h.SeverityFrom, h.Runbook, h.Mitre, exceptionsDigest(h.Exceptions)}
	b, err := json.Marshal(norm)
	if err != nil { // cannot happen: only strings, ints, bools and a string map
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func secs(d time.Duration) int64 { return int64(d / time.Second) }

func ceilSecs(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
