package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/status"
)

func statusJSON(t *testing.T, common []string) status.Hunt {
	t.Helper()
	out, err := runApp(t, append([]string{"status", "--json"}, common...)...)
	if err != nil {
		t.Fatalf("status: %v %s", err, out)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Hunts) != 1 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return rep.Hunts[0]
}

// pause, resume and status on the engine: who, why and until when, and "paused" in JSON.
func TestPauseResumeCommands(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) SELECT 'h1', 600, 0, 1, 'c', now64(6)"); err != nil {
		t.Fatal(err)
	}
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name}
	run := func(args ...string) (string, int) {
		t.Helper()
		out, err := runApp(t, append(args, common...)...)
		if err != nil {
			out += err.Error() // main prints an exit error's message to stderr
		}
		return out, schedExit(err)
	}
	if out, code := run("pause", "h1", "--for", "1h", "--until", "4102444800"); code != exitUsage {
		t.Errorf("--for with --until: exit %d %s", code, out)
	}
	if out, code := run("pause", "h1", "--until", "1000"); code != exitUsage || !strings.Contains(out, "not in the future") {
		t.Errorf("--until in the past: exit %d %s", code, out)
	}
	if st := statusJSON(t, common); st.Paused {
		t.Fatalf("paused before any pause: %+v", st)
	}
	out, code := run("pause", "h1", "--for", "1h", "--reason", "too noisy", "--by", "alice")
	if code != exitOK || !regexp.MustCompile(`^paused h1 until \S+Z \(for 1h\) by alice\n$`).MatchString(out) {
		t.Fatalf("pause: exit %d %q", code, out)
	}
	st := statusJSON(t, common)
	if !st.Paused || st.Pause == nil || st.Pause.By != "alice" || st.Pause.Reason != "too noisy" || st.Pause.Until == "" || st.Pause.Since == "" || st.Due || st.State != status.StatePaused {
		t.Fatalf("status of a paused hunt: %+v", st)
	}
	out, _ = run("status")
	if !strings.Contains(out, "paused h1: by alice since ") || !strings.Contains(out, ": too noisy") {
		t.Errorf("status text does not show the pause:\n%s", out)
	}
	raw, _ := runApp(t, append([]string{"status", "--json"}, common...)...)
	if !strings.Contains(raw, `"paused": true`) {
		t.Errorf(`status --json lacks "paused": true:\n%s`, raw)
	}
	if out, code := run("resume", "h1", "--by", "bob"); code != exitOK || out != "resumed h1\n" {
		t.Fatalf("resume: exit %d %q", code, out)
	}
	if st := statusJSON(t, common); st.Paused || st.Pause != nil {
		t.Fatalf("status after resume: %+v", st)
	}
	if out, code := run("pause", "h1"); code != exitOK || out != "paused h1 until resumed by "+defaultRequester()+"\n" {
		t.Errorf("indefinite pause: exit %d %q", code, out)
	}
	if st := statusJSON(t, common); !st.Paused || st.Pause == nil || st.Pause.Until != "" {
		t.Errorf("status of an indefinite pause: %+v", st)
	}
	if out, code := run("pause", "nope"); code != exitOK || !strings.Contains(out, "not an enabled hunt of the published schedule") {
		t.Errorf("pause of an unpublished hunt: exit %d %q, want a warning", code, out)
	}
}

// backfill requests, lists, repeats (not requested twice), gaps and cancel on the engine.
func TestBackfillCommands(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) SELECT 'h1', 600, 0, 1, 'c', now64(6)"); err != nil {
		t.Fatal(err)
	}
	var now uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	from, to := int64(now)-3600, int64(now)-600
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name}
	run := func(args ...string) (string, int) {
		t.Helper()
		out, err := runApp(t, append(args, common...)...)
		if err != nil {
			out += err.Error() // main prints an exit error's message to stderr
		}
		return out, schedExit(err)
	}
	for _, bad := range [][]string{
		{"backfill", "h1"},
		{"backfill", "h1", "--from", fmt.Sprint(from)},
		{"backfill", "h1", "--gaps", "--from", fmt.Sprint(from), "--to", fmt.Sprint(to)},
		{"backfill", "h1", "--from", fmt.Sprint(to), "--to", fmt.Sprint(from)},
		{"backfill", "h1", "--from", fmt.Sprint(from), "--to", "4102444800"},
		{"backfill", "unpublished", "--from", fmt.Sprint(from), "--to", fmt.Sprint(to)},
	} {
		if out, code := run(bad...); code != exitUsage {
			t.Errorf("%v: exit %d %s, want a usage error", bad, code, out)
		}
	}
	out, code := run("backfill", "h1", "--from", fmt.Sprint(from), "--to", fmt.Sprint(to), "--by", "alice")
	m := regexp.MustCompile(`^backfill ([0-9a-f]{12}): h1 \[\S+, \S+\) in 5 chunk\(s\) of 10m\n$`).FindStringSubmatch(out)
	if code != exitOK || m == nil {
		t.Fatalf("backfill: exit %d %q", code, out)
	}
	id := m[1]
	if out, code := run("backfill", "h1", "--from", fmt.Sprint(from), "--to", fmt.Sprint(to)); code != exitOK || !strings.Contains(out, "backfill "+id+" already covers h1") {
		t.Errorf("repeated backfill: exit %d %q", code, out)
	}
	st := statusJSON(t, common)
	if len(st.Backfills) != 1 || st.Backfills[0].ID != id || st.Backfills[0].Chunks != 5 || st.Backfills[0].ChunksDone != 0 || st.Backfills[0].RequestedBy != "alice" {
		t.Errorf("status backfills %+v", st.Backfills)
	}
	if out, _ := run("status"); !strings.Contains(out, "backfill "+id+" of h1: 0/5 chunks") {
		t.Errorf("status text lacks the backfill:\n%s", out)
	}
	if out, _ := run("backfill", "list", "h1"); !regexp.MustCompile(id + `  h1  active +\[\S+, \S+\)  0/5 chunks  requested \S+ by alice`).MatchString(out) {
		t.Errorf("backfill list: %q", out)
	}
	if out, code := run("backfill", "cancel", id, "--by", "bob"); code != exitOK || out != "cancelled backfill "+id+"\n" {
		t.Errorf("cancel: exit %d %q", code, out)
	}
	if out, code := run("backfill", "cancel", id); code != exitUsage {
		t.Errorf("second cancel: exit %d %q, want a usage error", code, out)
	}
	if st := statusJSON(t, common); len(st.Backfills) != 0 {
		t.Errorf("a cancelled backfill still in status: %+v", st.Backfills)
	}

	// A recorded gap: a live commit that skipped [from, from+1200).
	if err := db.Conn.Exec(ctx, `INSERT INTO hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, gap_start, gap_end, kind)
SELECT 'h1', toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), generateUUIDv4(), 'pod', toDateTime(?, 'UTC'), toDateTime(?, 'UTC'), toDateTime(?, 'UTC'), 'scheduled'`,
		to, from+1200, from, from+1200); err != nil {
		t.Fatal(err)
	}
	out, code = run("backfill", "h1", "--gaps", "--chunk", "5m")
	if code != exitOK || !regexp.MustCompile(`^backfill [0-9a-f]{12}: h1 \[\S+, \S+\) in 4 chunk\(s\) of 5m\n$`).MatchString(out) {
		t.Fatalf("backfill --gaps: exit %d %q", code, out)
	}
	if out, code := run("backfill", "h1", "--gaps", "--chunk", "5m"); code != exitOK || !strings.Contains(out, "already covers") {
		t.Errorf("second --gaps: exit %d %q", code, out)
	}
}
