package configsrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// DefaultReloadInterval is used when NewLoader is given a non-positive interval.
const DefaultReloadInterval = 30 * time.Second

// Loader keeps the current set of a source and reloads it with last-good semantics (see the
// package comment). It is safe for concurrent use.
type Loader struct {
	src      Source
	interval time.Duration
	log      *slog.Logger

	// server, when set, has the server parse each new or changed hunt (see WithServerCheck).
	server  *serverChecker
	cache   CheckCache       // verdicts kept across restarts (WithCheckCache)
	checked map[string]error // by hunt hash: the last verdict (nil: accepted)
	// published, when set, reads the live publication's definition hash per hunt id
	// (WithPublished), to settle a duplicate id after a restart.
	published func(ctx context.Context) (map[string]string, error)

	mu      sync.Mutex
	cur     *Set
	changes chan *Set
}

// LoaderOption configures a Loader.
type LoaderOption func(*Loader)

// WithServerCheck has the server parse every hunt before it is accepted (CheckWithServer with
// policy p). A hunt the server refuses is treated like an invalid file: its problem is reported
// with file and line, and a previous definition is kept (Set.Stale). A hunt that could not be
// checked (the server unreachable) is handled the same way, so nothing unchecked ever runs.
// Verdicts are kept by hunt hash: an unchanged hunt is not parsed again on every reload (nor
// on a restart, WithCheckCache). The hunts of a load are parsed CheckConcurrencyDefault at a
// time.
func WithServerCheck(conn driver.Conn, p Policy) LoaderOption {
	return func(l *Loader) { l.server = &serverChecker{conn: conn, policy: p} }
}

// WithPublished gives the loader the published definitions (hunt id → Hunt.Hash, as
// hunt_schedule.config_hash holds them). When a hunt's id is defined by more than one file, the
// copy whose definition is the published one keeps running (listed in Set.Stale, both files
// reported), so a duplicate added anywhere, even in a disabled file, cannot stop the hunt at
// the next restart. A failed read is logged and treated as "nothing published".
func WithPublished(fn func(ctx context.Context) (map[string]string, error)) LoaderOption {
	return func(l *Loader) { l.published = fn }
}

// NewLoader returns a loader polling src every interval (DefaultReloadInterval if ≤ 0).
// log may be nil.
func NewLoader(src Source, interval time.Duration, log *slog.Logger, opts ...LoaderOption) *Loader {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Loader{src: src, interval: interval, log: log, changes: make(chan *Set, 1)}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Current is the newest set, nil before the first successful load.
func (l *Loader) Current() *Set {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// Changes delivers each new set (only the newest if the reader falls behind).
func (l *Loader) Changes() <-chan *Set { return l.changes }

// Load reads the source once, merging with the current set. Use it for the first load; it
// fails only when the source cannot be read and there is no previous set to keep. changed
// reports whether the hash, problems or commit differ from the previous set.
func (l *Loader) Load(ctx context.Context) (set *Set, changed bool, err error) {
	next, err := l.src.Load(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.cur
	if err == nil && len(next.duplicates) > 0 {
		next = l.resolveDuplicates(ctx, prev, next)
	}
	if err == nil && l.server != nil {
		next = l.serverCheck(ctx, next)
	}
	if err == nil && prev != nil && len(prev.Hunts) > 0 && len(next.Hunts) == 0 && len(next.Problems) == 0 {
		// A source that suddenly has no hunt files at all is far more often an empty mount or
		// a bad sync than a decision to stop every detection; materialise refuses the same
		// case. Removing the last hunt on purpose takes a restart.
		err = fmt.Errorf("%w: %s now has no hunt files", ErrUnavailable, l.src)
	}
	if err != nil {
		if prev != nil {
			l.log.Warn("hunt source unreadable; keeping the previous hunts", "source", l.src.String(), "error", err, "hunts", len(prev.Hunts))
			return prev, false, err
		}
		return nil, false, err
	}
	merged := merge(prev, next)
	changed = prev == nil || prev.Hash != merged.Hash || prev.Commit != merged.Commit ||
		!slices.Equal(prev.Problems, merged.Problems)
	if !changed {
		return prev, false, nil
	}
	l.cur = merged
	for _, p := range merged.Problems {
		l.log.Warn("hunt file problem", "problem", p.Error())
	}
	for id, p := range merged.Stale {
		l.log.Warn("hunt kept at its last good definition", "hunt_id", id, "problem", p.Error())
	}
	l.log.Info("hunts loaded", "source", l.src.String(), "hunts", len(merged.Hunts), "problems", len(merged.Problems),
		"stale", len(merged.Stale), "hash", merged.Hash, "commit", merged.Commit)
	select {
	case <-l.changes: // drop an unread older set
	default:
	}
	l.changes <- merged
	return merged, true, nil
}

// Start reloads every interval until ctx is done; it returns nil then. Errors of single
// reloads are logged and the previous set kept.
func (l *Loader) Start(ctx context.Context) error {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, _, err := l.Load(ctx); err != nil && !errors.Is(err, context.Canceled) {
				l.log.Debug("reload failed", "error", err)
			}
		}
	}
}

// merge applies last-good: a hunt of prev that is missing from next because its file now has
// problems keeps its previous definition; a hunt whose file is gone is dropped.
func merge(prev, next *Set) *Set {
	out := &Set{Set: hunt.Set{Hunts: slices.Clone(next.Hunts), Commit: next.Commit, Source: next.Source},
		Problems: slices.Clone(next.Problems), Stale: maps.Clone(next.Stale)}
	if prev != nil {
		broken := map[string]Problem{}
		for _, p := range next.Problems {
			if _, ok := broken[p.File]; !ok {
				broken[p.File] = p
			}
		}
		for _, h := range prev.Hunts {
			if _, ok := next.Get(h.ID); ok {
				continue
			}
			p, ok := broken[h.File]
			if !ok {
				continue // file deleted, or it now defines another id
			}
			if out.Stale == nil {
				out.Stale = map[string]Problem{}
			}
			p.HuntID = h.ID
			out.Stale[h.ID] = p
			out.Hunts = append(out.Hunts, h)
		}
	}
	out.finish()
	if out.Stale != nil {
		out.Stale = maps.Clone(out.Stale)
	}
	return out
}

// resolveDuplicates keeps, for each id several files define, the copy that is running (its
// definition in prev) or else the published one, as a stale hunt: its file's duplicate problem
// stays reported, with the other file's. Neither copy is new code: the one kept is exactly what
// was already running or published, so a duplicate can take nothing over.
func (l *Loader) resolveDuplicates(ctx context.Context, prev, next *Set) *Set {
	var published map[string]string
	if l.published != nil {
		var err error
		if published, err = l.published(ctx); err != nil {
			l.log.Warn("cannot read the published definitions to settle duplicate hunt ids", "error", err)
		}
	}
	out := *next
	out.Hunts = slices.Clone(next.Hunts)
	out.Stale = maps.Clone(next.Stale)
	for id, copies := range next.duplicates {
		want := published[id]
		if prev != nil {
			if h, ok := prev.Get(id); ok {
				want = h.Hash
			}
		}
		i := slices.IndexFunc(copies, func(h hunt.Hunt) bool { return want != "" && h.Hash == want })
		if i < 0 {
			continue
		}
		kept := copies[i]
		for _, p := range next.Problems {
			if p.File == kept.File && p.HuntID == id {
				if out.Stale == nil {
					out.Stale = map[string]Problem{}
				}
				out.Stale[id] = p
				break
			}
		}
		out.Hunts = append(out.Hunts, kept)
	}
	out.finish()
	return &out
}

// serverCheck returns next without the hunts the server refuses (or could not check), each
// replaced by a Problem at its query.
func (l *Loader) serverCheck(ctx context.Context, next *Set) *Set {
	out := *next
	out.Hunts = nil
	out.Problems = slices.Clone(next.Problems)
	all := l.server.verdicts(ctx, next.Hunts, l.checked, l.cache, l.log)
	verdicts := make(map[string]error, len(next.Hunts))
	for _, h := range next.Hunts {
		err := all[h.Hash]
		var refusal *RefusedError
		switch {
		case err == nil:
			verdicts[h.Hash] = nil
			out.Hunts = append(out.Hunts, h)
			continue
		case errors.As(err, &refusal):
			verdicts[h.Hash] = err // a refusal stands until the hunt changes
		}
		line, col := h.QueryPos(0, 0)
		msg := "the server could not check the query, so it is not run yet: " + err.Error()
		if refusal != nil {
			line, col = h.QueryPos(refusal.Line, refusal.Column)
			msg = refusal.Msg
		}
		out.Problems = append(out.Problems, Problem{File: h.File, Line: line, Column: col, Message: msg, HuntID: h.ID})
	}
	l.checked = verdicts
	out.finish()
	return &out
}
