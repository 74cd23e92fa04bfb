package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// A workload class the server does not know refuses start-up, naming the flag and the SQL
// that creates it (the server itself would accept the setting and schedule nothing by it);
// one it knows starts. preview and test check their class the same way.
func TestWorkloadMissingRefusesStartup(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	dir := t.TempDir()
	hunt := "interval: 1h\nquery: |\n  SELECT toString(getSetting('workload')) AS wl\n  WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
	if err := os.WriteFile(filepath.Join(dir, "wl.yaml"), []byte(hunt), 0o644); err != nil {
		t.Fatal(err)
	}
	// getSetting is not on the default allowlist: this hunt is allowed it to read its class back.
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name, "--allow-functions", "getSetting"}
	sfx := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	missing := "hr_missing_" + sfx
	runArgs := []string{"run", "--hunts-dir", dir, "--tick", "200ms", "--settle", "100ms", "--lease", "10s",
		"--listen", "127.0.0.1:0", "--owner", "wl-test"}

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := runAppContext(cctx, append(append(runArgs, "--workload-backfill", missing), common...)...)
	if err == nil || !strings.Contains(err.Error(), `--workload-backfill "`+missing+`"`) ||
		!strings.Contains(err.Error(), "CREATE WORKLOAD "+missing+" IN ") {
		t.Fatalf("run with an unknown workload: %v %s, want a refusal naming the flag and the CREATE WORKLOAD", err, out)
	}
	for _, args := range [][]string{
		{"preview", "--hunts-dir", dir, "--from", "2h", "--workload-preview", missing},
		{"test", "--workload-preview", missing},
	} {
		full := append(append(args[:len(args):len(args)], common...), "wl")
		if args[0] == "test" {
			full = append(append(args[:len(args):len(args)], common...), dir)
		}
		out, err := runAppContext(cctx, full...)
		if err == nil || !strings.Contains(err.Error(), `--workload-preview "`+missing+`"`) {
			t.Fatalf("%s with an unknown workload: %v %s", args[0], err, out)
		}
	}

	// Created, the class is accepted and the hunt runs in it.
	live := "hr_live_" + sfx
	for _, q := range []string{"CREATE WORKLOAD IF NOT EXISTS all", "CREATE WORKLOAD " + live + " IN all"} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP WORKLOAD IF EXISTS "+live) })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(runCtx, append(append(runArgs, "--workload-live", live), common...)...)
		done <- err
	}()
	var got string
	ok := chtest.Poll(time.Minute, func() bool {
		_ = db.Conn.QueryRow(ctx, "SELECT JSONExtractString(any(finding), 'wl') FROM hunt_findings_committed").Scan(&got)
		return got != ""
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run with a known workload: %v", err)
	}
	if !ok || got != live {
		t.Fatalf("the hunt ran in workload %q, want %q", got, live)
	}
}
