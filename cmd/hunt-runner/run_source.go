package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/runner"
)

// runHuntSource builds the hunt source named by sourceFlags(): --hunts-dir or --git-url.
// ok is false when neither is given.
func runHuntSource(c *cli.Context) (src configsrc.Source, ok bool, err error) {
	f := c.Float64("spread-fraction")
	switch dir, url := c.String("hunts-dir"), c.String("git-url"); {
	case dir != "" && url != "":
		return nil, false, cli.Exit("give either --hunts-dir or --git-url, not both", exitUsage)
	case dir != "":
		src, err = configsrc.NewDir(dir, configsrc.Options{SpreadFraction: f})
	case url != "":
		src, err = configsrc.NewGit(configsrc.GitOptions{
			URL: url, Ref: c.String("git-ref"), Path: c.String("git-path"), CacheDir: c.String("git-cache-dir"),
			TokenFile: c.String("git-token-file"), SSHKeyFile: c.String("git-ssh-key-file"),
			KnownHostsFile: c.String("git-known-hosts-file"), SpreadFraction: f,
		})
	default:
		return nil, false, nil
	}
	if err != nil {
		return nil, false, cli.Exit(fmt.Sprintf("hunt source: %v", err), exitUsage)
	}
	return src, true, nil
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
		out.Hunts = append(out.Hunts, runner.Hunt{
			ID: h.ID, Interval: int64(h.Interval / time.Second), Offset: int64(h.Offset / time.Second),
			Delay: h.Delay, MaxCatchup: h.MaxCatchup, Timeout: h.Timeout, Query: h.Query,
			Severity: h.Severity, Labels: h.Labels, ConfigHash: h.Hash,
		})
	}
	return out
}
