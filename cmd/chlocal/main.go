// Command chlocal serves ClickHouse's HTTP interface over chDB (see
// internal/chlocal) for tests and local development. It loads the library
// named by CHDB_LIB_PATH and prints
//
//	listening on 127.0.0.1:PORT (ClickHouse V, revision R)
//
// as its first line on stdout once it accepts requests. It stops on SIGINT
// or SIGTERM. -rewrite-replicated defaults to true because test and dev
// schemas may use the cluster DDL, which chDB cannot run otherwise.
package main

import (
	"context"
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
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := chlocal.Start(ctx, chlocal.Options{
		LibPath:           os.Getenv("CHDB_LIB_PATH"),
		Listen:            *listen,
		DataPath:          *path,
		RewriteReplicated: *rewrite,
		Logger:            log,
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
