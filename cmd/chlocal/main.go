// Command chlocal serves ClickHouse's HTTP interface over chDB (see
// internal/chlocal) for tests and local development. It loads the library
// named by CHDB_LIB_PATH and prints
//
//	listening on 127.0.0.1:PORT (ClickHouse V, revision R)
//
// as its first line on stdout once it accepts requests. It stops on SIGINT
// or SIGTERM. -rewrite-replicated defaults to true because test and dev
// schemas may use the cluster DDL, which chDB cannot run otherwise.
//
// -faults FILE loads fault rules (JSON, as PUT /chlocal/faults takes them);
// -statement-log N sizes the statement log of GET /chlocal/log; only
// loopback clients naming a loopback Host are answered unless -allow-remote
// is given (see docs/chlocal.md).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hunt-runner/hunt-runner/internal/chlocal"
)

func main() {
	os.Exit(run())
}

func run() int {
	listen := flag.String("listen", "127.0.0.1:0", "TCP address to serve on")
	path := flag.String("path", "", "chDB data directory (default: a temporary directory, removed on exit)")
	rewrite := flag.Bool("rewrite-replicated", true, "rewrite Replicated*MergeTree, Replicated databases and ON CLUSTER into single-node DDL")
	verbose := flag.Bool("v", false, "log every failed query")
	faultsFile := flag.String("faults", "", "JSON file of fault rules ({\"seed\": N, \"rules\": [...]}), as PUT /chlocal/faults takes them")
	logSize := flag.Int("statement-log", 0, "statements kept for GET /chlocal/log (0: the default, negative: off)")
	allowRemote := flag.Bool("allow-remote", false, "answer non-loopback peers and any Host header (for a non-loopback -listen); web pages stay refused")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var faults chlocal.FaultSet
	if *faultsFile != "" {
		var err error
		if faults, err = readFaults(*faultsFile); err != nil {
			fmt.Fprintln(os.Stderr, "chlocal:", err)
			return 2
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := chlocal.Start(ctx, chlocal.Options{
		LibPath:           os.Getenv("CHDB_LIB_PATH"),
		Listen:            *listen,
		DataPath:          *path,
		RewriteReplicated: *rewrite,
		Logger:            log,
		Faults:            faults,
		StatementLog:      *logSize,
		AllowRemote:       *allowRemote,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chlocal:", err)
		return 1
	}
	fmt.Printf("listening on %s (ClickHouse %s, revision %d)\n", srv.Addr(), srv.Version(), srv.Revision())
	<-ctx.Done()
	stop()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "chlocal:", err)
		return 1
	}
	return 0
}

// readFaults reads a fault rule file; unknown fields are errors, so that a
// misspelt field cannot silently widen a rule.
func readFaults(path string) (chlocal.FaultSet, error) {
	var set chlocal.FaultSet
	b, err := os.ReadFile(path)
	if err != nil {
		return set, fmt.Errorf("-faults: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&set); err != nil {
		return set, fmt.Errorf("-faults %s: %w", path, err)
	}
	return set, nil
}
