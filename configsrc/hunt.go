package configsrc

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrUnavailable is wrapped by Source.Load when the source as a whole cannot be read
// (directory missing, git remote unreachable). A Loader keeps the previous set then.
var ErrUnavailable = errors.New("hunt source unavailable")

// Hunt is one validated hunt definition.
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
	MaxCatchup time.Duration // longest window one run covers; default 24 × Interval
	Timeout    time.Duration // per-run limit (max_execution_time); default 5m
	Severity   string        // info, low, medium (default), high or critical
	Labels     map[string]string
	// MaxFindings caps the findings one run stores (max_findings; DefaultMaxFindings, at most
	// MaxFindingsCeiling). The runner fetches one row more to know the cap was passed.
	MaxFindings int
	Hash        string // hex SHA-256 of the normalised definition (not of File or Line)
	// Notify names the notify sinks of this hunt (notify:); nil leaves it to the notify
	// config's routes, an empty list sends nothing.
	Notify []string
	// Suppress is suppress: {by, for}; nil means every fire with findings notifies.
	Suppress *Suppress
}

// Problem is one thing wrong with a hunt file, positioned for an editor.
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
	HuntID  string `json:"hunt_id,omitempty"`
}

func (p Problem) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
}

// Set is one immutable load of hunt definitions. Callers must not modify it.
type Set struct {
	Hunts    []Hunt // valid hunts (and stale ones kept by a Loader), sorted by ID
	Hash     string // hex SHA-256 over the hunts' ids and hashes
	Commit   string // git commit SHA the set was read from, "" for a directory
	Source   string // description of the source, for logs and hunt_publish.source
	Problems []Problem
	// Stale lists hunts kept from the previous set because their file became invalid; the
	// value is the first problem of that file.
	Stale map[string]Problem

	// duplicates holds, per id defined by more than one file, every valid copy: none is in
	// Hunts, and a Loader may keep the one that is running or published (resolveDuplicates).
	duplicates map[string][]Hunt
}

// Get returns the hunt with the given id.
func (s *Set) Get(id string) (Hunt, bool) {
	i, ok := slices.BinarySearchFunc(s.Hunts, id, func(h Hunt, id string) int { return cmp.Compare(h.ID, id) })
	if !ok {
		return Hunt{}, false
	}
	return s.Hunts[i], true
}

// Source is where hunt definitions come from.
type Source interface {
	// Load reads every hunt file. The error is non-nil (wrapping ErrUnavailable) only when the
	// source as a whole cannot be read; problems with single files are in Set.Problems.
	Load(ctx context.Context) (*Set, error)
	String() string
}

// hashHunt computes Hunt.Hash over the fields that define behaviour, in a fixed encoding.
func hashHunt(h Hunt) string {
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
	}{h.ID, h.Description, secs(h.Interval), secs(h.Offset), h.Pinned, h.Enabled, h.Query,
		secs(h.Delay), secs(h.MaxCatchup), secs(h.Timeout), h.Severity, h.Labels, h.MaxFindings}
	b, err := json.Marshal(norm)
	if err != nil { // cannot happen: only strings, ints, bools and a string map
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// QueryPos maps a line and column of h.Query (1-based, as in RefusedError) to the hunt file.
// Line 0 means the query as a whole: its start.
func (h Hunt) QueryPos(line, col int) (fileLine, fileCol int) {
	if line < 1 || col < 1 {
		return max(h.QueryLine, 1), max(h.QueryColumn, 1)
	}
	return max(h.QueryLine, 1) + line - 1, max(h.QueryColumn, 1) + col - 1
}

func secs(d time.Duration) int64 { return int64(d / time.Second) }

// finish sorts hunts and problems and computes the set hash.
func (s *Set) finish() {
	slices.SortFunc(s.Hunts, func(a, b Hunt) int { return cmp.Compare(a.ID, b.ID) })
	sortProblems(s.Problems)
	h := sha256.New()
	for _, hu := range s.Hunts {
		fmt.Fprintf(h, "%s\x00%s\n", hu.ID, hu.Hash)
	}
	s.Hash = hex.EncodeToString(h.Sum(nil))
}

func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
}
