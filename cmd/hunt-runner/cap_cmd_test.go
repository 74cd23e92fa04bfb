package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// --cap (HUNT_RUNNER_CAP) reaches the runner: a negative one is refused at start-up.
func TestRunCapFlag(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Setenv("HUNT_RUNNER_CAP", "-1")
	out, err := runAppContext(ctx, "run", "--hunts-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--owner", "cap-test",
		"--clickhouse-url", db.URL, "--database", db.Name)
	if err == nil || !strings.Contains(err.Error(), "cap -1 must not be negative") {
		t.Fatalf("run with HUNT_RUNNER_CAP=-1: %v %s", err, out)
	}
}
