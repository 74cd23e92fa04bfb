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
}

// TestControlCommandsRefuseTypos: pause, resume and backfill of an id the published schedule
// does not run are refused with the nearest id and write nothing (no ghost row in status);
// --force writes them with a warning; resuming a paused hunt is allowed even once retired.
func TestControlCommandsRefuseTypos(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) "+
		"SELECT 'hello', 600, 0, 1, 'c', now64(6) UNION ALL SELECT 'retired', 0, 0, 0, '', now64(6)"); err != nil {
		t.Fatal(err)
	}
	var now uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name}
	run := func(args ...string) (string, int) {
		t.Helper()
		out, err := runApp(t, append(args, common...)...)
		if err != nil {
			out += err.Error()
		}
		return out, schedExit(err)
	}
	rows := func() uint64 {
		t.Helper()
		var n uint64
		if err := db.Conn.QueryRow(ctx, "SELECT (SELECT count() FROM hunt_pause) + (SELECT count() FROM hunt_backfill)").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	span := []string{"--from", fmt.Sprint(int64(now) - 3600), "--to", fmt.Sprint(int64(now) - 600), "--chunk", "10m"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "helo"}, `"helo" is not in the published schedule (hunt_schedule); did you mean "hello"?`},
		{[]string{"resume", "nothere"}, `"nothere" is not in the published schedule`},
		{append([]string{"backfill", "helo"}, span...), `did you mean "hello"?`},
		{[]string{"pause", "retired"}, "is disabled or removed"},
		{append([]string{"backfill", "retired"}, span...), "is disabled or removed"},
	} {
		out, code := run(c.args...)
		if code != exitError || !strings.Contains(out, c.want) || !strings.Contains(out, "--force") {
			t.Errorf("%v: exit %d %q, want a refusal naming %q and --force", c.args, code, out, c.want)
		}
	}
	if out, code := run("pause", "nothing-like-it"); strings.Contains(out, "did you mean") || code != exitError {
		t.Errorf("pause of a far id: exit %d %q, want a refusal without a suggestion", code, out)
	}
	if n := rows(); n != 0 {
		t.Fatalf("refused commands wrote %d rows", n)
	}
	if out, _ := run("status"); strings.Contains(out, "helo") || strings.Contains(out, "nothere") {
		t.Errorf("status shows a ghost row:\n%s", out)
	}
	if out, code := run("pause", "helo", "--force"); code != exitOK || !strings.Contains(out, "warning:") || !strings.Contains(out, "paused helo") {
		t.Errorf("pause --force: exit %d %q", code, out)
	}
	if out, code := run("resume", "helo"); code != exitOK || out != "resumed helo\n" {
		t.Errorf("resume of a paused unpublished hunt: exit %d %q", code, out)
	}
	if out, code := run(append([]string{"backfill", "helo", "--force"}, span...)...); code != exitOK || !strings.Contains(out, "warning:") || !strings.Contains(out, "backfill ") {
		t.Errorf("backfill --force: exit %d %q", code, out)
	}
	if out, code := run("backfill", "helo", "--force", "--from", span[1], "--to", span[3]); code != exitUsage || !strings.Contains(out, "give --chunk") {
		t.Errorf("backfill --force of an unpublished hunt without --chunk: exit %d %q", code, out)
	}
	if out, code := run("pause", "hello"); code != exitOK {
		t.Errorf("pause hello: exit %d %q", code, out)
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
		{"backfill", "unpublished", "--force", "--from", fmt.Sprint(from), "--to", fmt.Sprint(to)},
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

// snooze, snooze --list and unsnooze on the engine, with pause's grammar and typo refusal.
func TestSnoozeCommands(t *testing.T) {
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
			out += err.Error()
		}
		return out, schedExit(err)
	}
	if out, code := run("snooze", "h1", "--for", "1h", "--until", "4102444800"); code != exitUsage {
		t.Errorf("--for with --until: exit %d %q", code, out)
	}
	if out, code := run("snooze", "h1", "--until", "1000"); code != exitUsage || !strings.Contains(out, "not in the future") {
		t.Errorf("past --until: exit %d %q", code, out)
	}
	if out, code := run("snooze", "helo"); code == exitOK || !strings.Contains(out, `"helo" is not in the published schedule`) {
		t.Errorf("snooze of a typo: exit %d %q", code, out)
	}
	if out, code := run("snooze", "--list"); code != exitOK || out != "no hunt is snoozed\n" {
		t.Errorf("empty list: exit %d %q", code, out)
	}
	out, code := run("snooze", "h1", "--for", "2h", "--reason", "change window", "--by", "alice")
	if code != exitOK || !regexp.MustCompile(`^snoozed h1 until \S+Z \(for 2h\) by alice\n$`).MatchString(out) {
		t.Fatalf("snooze: exit %d %q", code, out)
	}
	out, code = run("snooze", "--list")
	if code != exitOK || !regexp.MustCompile(`(?m)^h1\s+\S+Z\s+alice\s+\S+Z\s+change window$`).MatchString(out) {
		t.Errorf("snooze --list: exit %d\n%s", code, out)
	}
	// status shows the snooze (text and JSON) while it lasts, and not after unsnooze.
	if out, code := run("status"); code != exitOK || !regexp.MustCompile(`(?m)^snoozed h1: notifications muted by alice since \S+, until \S+: change window$`).MatchString(out) {
		t.Errorf("status of a snoozed hunt: exit %d\n%s", code, out)
	}
	if out, code := run("status", "--json"); code != exitOK || !strings.Contains(out, `"snooze": {`) || !strings.Contains(out, `"reason": "change window"`) {
		t.Errorf("status --json of a snoozed hunt: exit %d\n%s", code, out)
	}
	if out, code := run("unsnooze", "h1", "--by", "bob"); code != exitOK || out != "unsnoozed h1\n" {
		t.Fatalf("unsnooze: exit %d %q", code, out)
	}
	if out, code := run("status"); code != exitOK || strings.Contains(out, "snoozed h1") {
		t.Errorf("status after unsnooze: exit %d\n%s", code, out)
	}
	if out, code := run("snooze", "--list"); code != exitOK || out != "no hunt is snoozed\n" {
		t.Errorf("list after unsnooze: exit %d %q", code, out)
	}
	if out, code := run("snooze", "h1"); code != exitOK || out != "snoozed h1 until unsnoozed by "+defaultRequester()+"\n" {
		t.Errorf("indefinite snooze: exit %d %q", code, out)
	}
	if out, code := run("unsnooze", "nothere"); code == exitOK || !strings.Contains(out, `"nothere" is not in the published schedule`) {
		t.Errorf("unsnooze of an unknown, unsnoozed id: exit %d %q", code, out)
	}
}
