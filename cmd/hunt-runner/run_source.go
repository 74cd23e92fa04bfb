package main

import (
	"errors"
	"log/slog"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/runner"
)

// optionalHuntSource is huntSource for commands where the hunts are optional (status):
// ok is false when neither --hunts-dir nor --git-url is given.
func optionalHuntSource(c *cli.Context, log *slog.Logger) (src configsrc.Source, ok bool, err error) {
	src, err = huntSource(c, log)
	if errors.Is(err, errNoHuntSource) {
		return nil, false, nil
	}
	return src, err == nil, err
}

// setAdapter converts the loader's current configsrc.Set into the runner's HuntSet, once per
// loaded set (the conversion is cached by set pointer, so a tick costs a pointer compare).
type setAdapter struct {
	current func() *configsrc.Set
	mu      sync.Mutex
	from    *configsrc.Set
	to      *runner.HuntSet
}

func (a *setAdapter) Source() runner.Source {
	return func() *runner.HuntSet {
		cur := a.current()
		if cur == nil {
			return nil
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if cur != a.from {
			a.from, a.to = cur, convertSet(cur)
		}
		return a.to
	}
}

// convertSet keeps the enabled hunts: a disabled hunt is tombstoned by materialise and never run.
func convertSet(s *configsrc.Set) *runner.HuntSet {
	out := &runner.HuntSet{Hash: s.Hash, Hunts: make([]runner.Hunt, 0, len(s.Hunts))}
	for _, h := range s.Hunts {
		if !h.Enabled {
			continue
		}
		out.Hunts = append(out.Hunts, runner.HuntOf(h))
	}
	return out
}
