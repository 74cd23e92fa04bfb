//go:build nochdb

package main

import (
	"context"
	"log/slog"

	"github.com/urfave/cli/v2"
)

// embeddedBuilt: this build has no embedded engine, so validate without a server is lexical.
const embeddedBuilt = false

// startEmbedded: release builds (-tags nochdb, the container image) carry no embedded engine,
// so that the binary is fully static; `hunt-runner dev`, and `test` without --clickhouse-url,
// are for a source checkout's build.
func startEmbedded(context.Context, string, string, string, *slog.Logger) (embeddedEngine, error) {
	return nil, cli.Exit("this hunt-runner was built without the embedded engine (-tags nochdb, as in the "+
		"container image): run `make dev` from a source checkout (its bin/hunt-runner-dev also runs `test`), "+
		"or give `test` a --clickhouse-url", exitUsage)
}
