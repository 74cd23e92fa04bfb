package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/status"
)

// trigger queues a request, run serves it (and the scheduled fire), status shows both, and run
// stops cleanly when its context ends (as on SIGTERM).
func TestRunTriggerStatusOnEngine(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	dir := t.TempDir()
	hunt := "interval: 1h\nquery: |\n  SELECT arrayJoin([0, 1, 2]) AS n\n  WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
	if err := os.WriteFile(filepath.Join(dir, "three.yaml"), []byte(hunt), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name}

	out, err := runApp(t, append([]string{"trigger", "three", "--fire", "4102444800"}, common...)...)
	if err == nil || !strings.Contains(err.Error(), "in the future") {
		t.Fatalf("a future fire was accepted: %v %s", err, out)
	}
	var now uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	// Nothing is materialised here: the runner has the hunt loaded, the schedule does not.
	if out, err = runApp(t, append([]string{"trigger", "three", "--requested-by", "tester", "--force"}, common...)...); err != nil {
		t.Fatalf("trigger: %v %s", err, out)
	}
	if !strings.Contains(out, "queued three fire") || !strings.Contains(out, "is not in the published schedule") {
		t.Fatalf("trigger output %q", out)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(runCtx, append([]string{"run", "--hunts-dir", dir, "--tick", "200ms", "--settle", "100ms",
			"--lease", "10s", "--listen", "127.0.0.1:0", "--owner", "cmd-test"}, common...)...)
		done <- err
	}()
	var runs uint64
	chtest.Poll(time.Minute, func() bool {
		_ = db.Conn.QueryRow(ctx, "SELECT count() FROM hunt_runs WHERE status = 'succeeded'").Scan(&runs)
		return runs >= 2
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run ended with %v after its context was cancelled, want a clean stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	if runs < 2 {
		t.Fatalf("%d succeeded runs, want the scheduled fire and the request", runs)
	}

	out, err = runApp(t, append([]string{"status", "--json", "--hunts-dir", dir}, common...)...)
	if err != nil {
		t.Fatalf("status: %v %s", err, out)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(rep.Hunts) != 1 {
		t.Fatalf("status hunts %+v", rep.Hunts)
	}
	h := rep.Hunts[0]
	if h.HuntID != "three" || h.IntervalSeconds != 3600 || !h.Enabled || h.LastRunStatus != "succeeded" ||
		h.LastRunRows != 3 || h.Watermark == "" || h.LeaseLive || h.Due {
		t.Fatalf("status %+v", h)
	}
	// The run's heartbeat, seconds old, lists it as live with the binary's version.
	if len(rep.Runners) != 1 || rep.Runners[0].Owner != "cmd-test" || rep.Runners[0].Version != buildVersion() ||
		rep.Runners[0].Hunts != 1 || rep.Runners[0].HuntSet != "default" || !rep.Runners[0].Live {
		t.Errorf("status runners %+v, want cmd-test at version %s with 1 hunt", rep.Runners, buildVersion())
	}
	if wm, _ := time.Parse(time.RFC3339, h.Watermark); wm.Unix() < int64(now) {
		t.Fatalf("watermark %s is before the request at %d: the request was not served", h.Watermark, now)
	}
	for _, key := range []string{`"now"`, `"hunt_id"`, `"interval_seconds"`, `"offset_seconds"`, `"latest_fire"`, `"next_fire"`,
		`"behind_seconds"`, `"last_run_time"`, `"consecutive_failures"`} {
		if !strings.Contains(out, key) {
			t.Errorf("status --json lacks %s", key)
		}
	}
	text, err := runApp(t, append([]string{"status", "--hunts-dir", dir}, common...)...)
	if err != nil || !strings.Contains(text, "three") || !strings.Contains(text, "succeeded") || !strings.Contains(text, "  cmd-test ") {
		t.Fatalf("status table: %v\n%s", err, text)
	}
}

func TestDevWithoutLibraryTellsToRunMakeChdb(t *testing.T) {
	t.Setenv("CHDB_LIB_PATH", "")
	_, err := runApp(t, "dev")
	if err == nil || !strings.Contains(err.Error(), "make chdb") {
		t.Fatalf("dev without the library: %v", err)
	}
	t.Setenv("CHDB_LIB_PATH", filepath.Join(t.TempDir(), "missing.so"))
	if _, err = runApp(t, "dev"); err == nil || !strings.Contains(err.Error(), "make chdb") {
		t.Fatalf("dev with a missing library: %v", err)
	}
}

func TestParseFireFlag(t *testing.T) {
	for in, want := range map[string]int64{"1700000000": 1700000000, "2026-01-02T15:04:05Z": 1767366245} {
		if got, err := parseFireFlag(in); err != nil || got != want {
			t.Errorf("parseFireFlag(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseFireFlag("yesterday"); err == nil {
		t.Error("parseFireFlag accepted \"yesterday\"")
	}
}
