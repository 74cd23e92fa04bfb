package main

import (
	"errors"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
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

// loadedSet is the loader's current set as the runner and the notify dispatcher read it
// (runner.Source, notify.Source): the same hunts, nothing converted.
func loadedSet(current func() *configsrc.Set) func() *hunt.Set {
	return func() *hunt.Set {
		if cur := current(); cur != nil {
			return &cur.Set
		}
		return nil
	}
}
