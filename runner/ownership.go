package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// Ownership: a hunt id belongs to the hunt set whose publication of it is live (the newest
// hunt_schedule row is enabled with an interval, as schedule.Row.Live says). materialise
// refuses to publish an id another set publishes; the runner must refuse to run one, or a
// runner of team-b loading a file with team-a's id would take fires of team-a's hunt and commit
// its own findings under it. An id no set publishes, or that its set retired, is free.

// ownership keeps the tick from claiming hunts another set publishes. Safe for concurrent use:
// the tick filters, the hunt_runner_hunt_foreign gauge reads.
type ownership struct {
	store StateStore
	opts  *Options

	mu      sync.Mutex
	foreign map[string]string // hunt id → the other hunt set publishing it
}

// foreignOwners reads which of ids are live in another set's publication, and their set
// (store.Store.ForeignPublishers). It is one read of the rows of ids only, made on every tick
// that claims, so a claim is always checked against the publications of that moment.
func (o *ownership) foreignOwners(ctx context.Context, ids []string) (map[string]string, error) {
	out, err := o.store.ForeignPublishers(ctx, o.opts.HuntSet, ids)
	if err != nil {
		return nil, fmt.Errorf("read the hunt sets publishing the due hunts: %w", err)
	}
	return out, nil
}

// ownDue drops the fires of hunts another set publishes, logging each such hunt once (again
// only if its owner changes) and exporting them as hunt_runner_hunt_foreign. When the owners
// cannot be read nothing is claimed this tick: claiming unchecked is what must never happen.
func (o *ownership) ownDue(ctx context.Context, loaded *hunt.Set, due []dueFire) ([]dueFire, error) {
	ids := make([]string, 0, len(due))
	for _, d := range due {
		ids = append(ids, d.Hunt.ID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	foreign, err := o.foreignOwners(ctx, ids)
	if err != nil {
		o.opts.Metrics.clickhouseError(ctx, stageOwnership)
		return nil, err
	}
	o.mu.Lock()
	for _, id := range ids {
		set, isForeign := foreign[id]
		if isForeign && o.foreign[id] != set {
			o.opts.Logger.Warn("hunt not run: another hunt set publishes it; rename it in this set, or retire it from its set first",
				"hunt_id", id, "published_by", set, "hunt_set", o.opts.HuntSet)
		}
		if isForeign {
			o.foreign[id] = set
		} else {
			delete(o.foreign, id)
		}
	}
	for id := range o.foreign {
		if enabledHunt(loaded, id) == nil { // no longer loaded: nothing left to refuse
			delete(o.foreign, id)
		}
	}
	o.mu.Unlock()
	if len(foreign) == 0 {
		return due, nil
	}
	return slices.DeleteFunc(due, func(d dueFire) bool { _, ok := foreign[d.Hunt.ID]; return ok }), nil
}

// foreignHunts is what the hunt_runner_hunt_foreign gauge reads.
func (o *ownership) foreignHunts() map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.foreign)
}
