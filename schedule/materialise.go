package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// ErrEmptySet is returned by Materialise for a hunt set with no hunts at all, unless
// AllowEmpty: an empty mount or a broken checkout must never tombstone every hunt.
var ErrEmptySet = errors.New("refusing to publish an empty hunt set (it would tombstone every published hunt); use --allow-empty if that is intended")

// ErrInvalidRow is wrapped when the rows given to Materialise cannot be published.
var ErrInvalidRow = errors.New("invalid schedule row")

// Store is where Materialise reads the published schedule and publishes a new one.
// store.Schedule is the implementation; the interface keeps the diffing logic free of SQL.
type Store interface {
	// Published returns the newest hunt_schedule row of every hunt ever published by any set
	// (tombstones included), the server clock and set's newest published hash.
	Published(ctx context.Context, set string) (Published, error)
	// Publish inserts rows into hunt_schedule and then the record into hunt_publish, all with
	// the version rec.At. The record is written only after the rows, so a runner that sees the
	// new set hash also sees the rows.
	Publish(ctx context.Context, rows []Row, rec Publication) error
}

// Published is the current state of hunt_schedule.
type Published struct {
	Rows    map[string]Row // newest row per hunt, of every set
	Newest  time.Time      // greatest updated in the table (zero if empty)
	Now     time.Time      // server clock
	SetHash string         // newest hunt_publish.set_hash of the set asked for, "" if never published
}

// Publication is one hunt_publish row.
type Publication struct {
	Set       string // the hunt set; its rows are written with it too
	SetHash   string
	HuntCount uint32 // enabled hunts in the set
	Source    string
	At        time.Time // hunt_publish.published and hunt_schedule.updated of the rows
}

// MaterialiseOptions tune Materialise. The zero value writes, and refuses an empty set.
type MaterialiseOptions struct {
	// Set is the hunt set published (hunt.HuntSetDefault when empty). Only its hunts are
	// tombstoned; a hunt id live in another set is refused (ErrSetConflict).
	Set        string
	DryRun     bool   // compute and return the diff, write nothing
	AllowEmpty bool   // publish an empty set (tombstoning every published hunt)
	Source     string // recorded in hunt_publish.source, e.g. "dir:/hunts" or "git:…@<commit>"
	// KeepAbsent leaves published hunts that are absent from rows as they are instead of
	// tombstoning them. Set it when some hunt files could not be parsed: such a file may define
	// a published hunt, and a typo must not silently unschedule a detection. Hunts explicitly
	// disabled are still tombstoned.
	KeepAbsent bool
}

// Change is one hunt whose published row changes.
type Change struct {
	Old Row // zero HuntID when the hunt was never published
	New Row
	// Reason, for tombstones: "removed" (not in the set) or "disabled" (enabled: false).
	Reason string `json:",omitempty"`
}

// Diff is what Materialise wrote (or, with DryRun, would write).
type Diff struct {
	Added      []Change // new hunts, or hunts re-enabled after a tombstone
	Changed    []Change // published and enabled, with a different interval, offset or config hash
	Tombstoned []Change // published enabled, now removed or disabled
	Unchanged  int
	Kept       []string // published hunts absent from the set, left as they are (KeepAbsent)
	// SetHash is the hash of the set being published; PublishedHash the one recorded before.
	SetHash       string
	PublishedHash string
	// RowsWritten counts hunt_schedule rows written (0 on a dry run); Recorded tells whether a
	// hunt_publish row was written.
	RowsWritten int
	Recorded    bool
	DryRun      bool
}

// HasChanges reports whether the published state differs from the set: some row to write, or
// a different set hash to record.
func (d Diff) HasChanges() bool {
	return len(d.Added)+len(d.Changed)+len(d.Tombstoned) > 0 || d.SetHash != d.PublishedHash
}

// Rows are the hunt_schedule rows the diff writes, in hunt id order.
func (d Diff) Rows() []Row {
	var rows []Row
	for _, group := range [][]Change{d.Added, d.Changed, d.Tombstoned} {
		for _, c := range group {
			rows = append(rows, c.New)
		}
	}
	slices.SortFunc(rows, func(a, b Row) int { return strings.Compare(a.HuntID, b.HuntID) })
	return rows
}

// String renders the diff for people (materialise --dry-run), one line per hunt:
// "+" added, "~" changed with old → new, "-" tombstoned; then a summary line.
func (d Diff) String() string {
	var b strings.Builder
	for _, c := range d.Added {
		fmt.Fprintf(&b, "+ %s  %s\n", c.New.HuntID, describeRow(c.New))
	}
	for _, c := range d.Changed {
		fmt.Fprintf(&b, "~ %s  %s\n", c.New.HuntID, describeChange(c.Old, c.New))
	}
	for _, c := range d.Tombstoned {
		fmt.Fprintf(&b, "- %s  tombstone (%s; was %s)\n", c.Old.HuntID, c.Reason, describeRow(c.Old))
	}
	for _, id := range d.Kept {
		fmt.Fprintf(&b, "= %s  kept as published (absent from a set with unreadable hunt files)\n", id)
	}
	verb := "wrote"
	if d.DryRun {
		verb = "would write"
	}
	fmt.Fprintf(&b, "%d added, %d changed, %d tombstoned, %d unchanged; %s %d row(s)",
		len(d.Added), len(d.Changed), len(d.Tombstoned), d.Unchanged, verb, len(d.Rows()))
	switch {
	case d.SetHash == d.PublishedHash:
		fmt.Fprintf(&b, "; set %s already recorded\n", short(d.SetHash))
	case d.PublishedHash == "":
		fmt.Fprintf(&b, "; set %s (first publication)\n", short(d.SetHash))
	default:
		fmt.Fprintf(&b, "; set %s → %s\n", short(d.PublishedHash), short(d.SetHash))
	}
	return b.String()
}

func describeRow(r Row) string {
	return fmt.Sprintf("every %s at +%s, config %s", FormatInterval(time.Duration(r.IntervalSeconds)*time.Second),
		formatOffset(r.PhaseOffset), short(r.ConfigHash))
}

func describeChange(o, n Row) string {
	var parts []string
	if o.IntervalSeconds != n.IntervalSeconds {
		parts = append(parts, fmt.Sprintf("interval %s → %s", FormatInterval(time.Duration(o.IntervalSeconds)*time.Second), FormatInterval(time.Duration(n.IntervalSeconds)*time.Second)))
	}
	if o.PhaseOffset != n.PhaseOffset {
		parts = append(parts, fmt.Sprintf("offset +%s → +%s", formatOffset(o.PhaseOffset), formatOffset(n.PhaseOffset)))
	}
	if o.ConfigHash != n.ConfigHash {
		parts = append(parts, fmt.Sprintf("config %s → %s", short(o.ConfigHash), short(n.ConfigHash)))
	}
	return strings.Join(parts, ", ")
}

func formatOffset(s uint32) string {
	if s == 0 {
		return "0s"
	}
	return FormatInterval(time.Duration(s) * time.Second)
}

func short(h string) string {
	if h == "" {
		return "(none)"
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Materialise publishes a hunt set into hunt_schedule, writing only the difference from what
// is published: rows for new, re-enabled and changed hunts, and tombstones (enabled=0,
// interval 0, offset 0) for hunts published enabled that are now absent or disabled. rows holds
// every hunt of the set: enabled rows (NewRow) and, for disabled hunts, rows with Enabled false
// (their interval is ignored). The set hash goes to hunt_publish when anything was written or
// it differs from the recorded one, so a second run with the same set writes nothing.
//
// Only hunts of opts.Set are compared and tombstoned, so sets published by other teams or
// releases into the same database are left alone. A hunt id whose newest row is live in
// another set is refused with ErrSetConflict naming both sets; one that set tombstoned may be
// taken over.
func Materialise(ctx context.Context, store Store, rows []Row, setHash string, opts MaterialiseOptions) (Diff, error) {
	set := opts.Set
	if set == "" {
		set = hunt.HuntSetDefault
	}
	if err := ValidateHuntSet(set); err != nil {
		return Diff{}, err
	}
	if len(rows) == 0 && !opts.AllowEmpty {
		return Diff{}, ErrEmptySet
	}
	want := make(map[string]Row, len(rows))
	enabled := 0
	for _, r := range rows {
		if r.HuntID == "" {
			return Diff{}, fmt.Errorf("%w: empty hunt id", ErrInvalidRow)
		}
		if _, dup := want[r.HuntID]; dup {
			return Diff{}, fmt.Errorf("%w: hunt %q appears twice", ErrInvalidRow, r.HuntID)
		}
		if r.Enabled {
			if r.IntervalSeconds == 0 || r.PhaseOffset >= r.IntervalSeconds {
				return Diff{}, fmt.Errorf("%w: hunt %q: interval %d s, offset %d s (want interval > 0 and offset < interval)",
					ErrInvalidRow, r.HuntID, r.IntervalSeconds, r.PhaseOffset)
			}
			enabled++
		}
		r.Set = set
		want[r.HuntID] = r
	}
	pub, err := store.Published(ctx, set)
	if err != nil {
		return Diff{}, fmt.Errorf("materialise: read published schedule: %w", err)
	}
	own := make(map[string]Row, len(pub.Rows))
	var conflicts []string
	for id, old := range pub.Rows {
		switch {
		case old.Set == set:
			own[id] = old
		case !old.Live():
			// Retired by its set: free to be taken over, and never this set's to tombstone.
		default:
			if _, ok := want[id]; ok {
				conflicts = append(conflicts, fmt.Sprintf("hunt %q is published by hunt set %q, not %q", id, old.Set, set))
			}
		}
	}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		return Diff{}, fmt.Errorf("%w: %s; rename the hunt or retire it from its set first; nothing written",
			ErrSetConflict, strings.Join(conflicts, "; "))
	}
	d := diff(own, want, opts.KeepAbsent, set)
	d.SetHash, d.PublishedHash, d.DryRun = setHash, pub.SetHash, opts.DryRun
	if opts.DryRun || !d.HasChanges() {
		return d, nil
	}
	// Versions must beat every published row even if the server clock stepped back.
	at := pub.Now
	if !at.After(pub.Newest) {
		at = pub.Newest.Add(time.Microsecond)
	}
	out := d.Rows()
	rec := Publication{Set: set, SetHash: setHash, HuntCount: uint32(enabled), Source: opts.Source, At: at}
	if err := store.Publish(ctx, out, rec); err != nil {
		return d, fmt.Errorf("materialise: publish %d row(s): %w", len(out), err)
	}
	d.RowsWritten, d.Recorded = len(out), true
	return d, nil
}

// diff compares the published newest rows with the wanted ones.
func diff(published, want map[string]Row, keepAbsent bool, set string) Diff {
	tomb := func(id string) Row { r := Tombstone(id); r.Set = set; return r }
	var d Diff
	for id, w := range want {
		old, seen := published[id]
		switch {
		case !w.Enabled:
			if seen && old.Live() {
				d.Tombstoned = append(d.Tombstoned, Change{Old: old, New: tomb(id), Reason: "disabled"})
			} else {
				d.Unchanged++
			}
		case !seen || !old.Live():
			d.Added = append(d.Added, Change{Old: old, New: w})
		case old.IntervalSeconds != w.IntervalSeconds || old.PhaseOffset != w.PhaseOffset || old.ConfigHash != w.ConfigHash:
			d.Changed = append(d.Changed, Change{Old: old, New: w})
		default:
			d.Unchanged++
		}
	}
	for id, old := range published {
		if _, ok := want[id]; ok || !old.Live() {
			continue
		}
		if keepAbsent {
			d.Kept = append(d.Kept, id)
			continue
		}
		d.Tombstoned = append(d.Tombstoned, Change{Old: old, New: tomb(id), Reason: "removed"})
	}
	slices.Sort(d.Kept)
	byID := func(a, b Change) int { return strings.Compare(a.New.HuntID, b.New.HuntID) }
	slices.SortFunc(d.Added, byID)
	slices.SortFunc(d.Changed, byID)
	slices.SortFunc(d.Tombstoned, byID)
	return d
}
