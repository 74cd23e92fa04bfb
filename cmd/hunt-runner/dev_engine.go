//go:build !nochdb

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/internal/chlocal"
)

// embeddedBuilt: this build can start the embedded engine (validate parses offline with it).
const embeddedBuilt = true

// startEmbedded starts chDB in this process for `hunt-runner dev`. It is the only link from the
// binary to chlocal (and purego, which makes a binary dynamically linked): release builds use
// -tags nochdb (dev_engine_nochdb.go) so the image's binary is fully static.
func startEmbedded(ctx context.Context, lib, listen, data string, log *slog.Logger) (embeddedEngine, error) {
	if lib == "" {
		return nil, cli.Exit("hunt-runner dev needs the embedded ClickHouse library: run `make chdb`, then set "+
			"CHDB_LIB_PATH to the libchdb.so it prints (make dev does both)", exitUsage)
	}
	if _, err := os.Stat(lib); err != nil {
		return nil, cli.Exit(fmt.Sprintf("CHDB_LIB_PATH=%s: %v — run `make chdb` to fetch the library", lib, err), exitUsage)
	}
	srv, err := chlocal.Start(ctx, chlocal.Options{LibPath: lib, Listen: listen, DataPath: data,
		RewriteReplicated: true, Logger: log})
	if errors.Is(err, chlocal.ErrNoLibrary) {
		return nil, cli.Exit(fmt.Sprintf("%v — run `make chdb`", err), exitUsage)
	}
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("embedded ClickHouse: %v", err), exitError)
	}
	return srv, nil
}
