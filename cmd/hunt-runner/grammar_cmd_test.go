package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// TestOneCLIGrammar: a usage error exits 2 with one line naming the problem and the help (not
// the help page); every duration flag reads 7d; an unknown unit is named; the global flags are
// taken after the command name as before it.
func TestOneCLIGrammar(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	if err := db.Conn.Exec(context.Background(), "INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) SELECT 'h1', 600, 0, 1, 'c', now64(6)"); err != nil {
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
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--bogus"}, "status: flag provided but not defined: --bogus (see `hunt-runner status --help`)"},
		{[]string{"backfill", "list", "--bogus"}, "backfill list: flag provided but not defined: --bogus (see `hunt-runner backfill list --help`)"},
		{[]string{"findings", "--since", "7x"}, `invalid value "7x" for flag --since: unknown unit "x"`},
		{[]string{"notify", "status", "--since", "2w"}, `unknown unit "w"`},
		{[]string{"pause", "h1", "--for", "3fortnights"}, `unknown unit "fortnights"`},
		{[]string{"run", "--tick", "5 secs"}, `unknown unit`},
		{[]string{"stauts"}, `unknown command "stauts"; did you mean "status"?`},
	} {
		out, code := run(c.args...)
		if code != exitUsage || !strings.Contains(out, c.want) || strings.Contains(out, "USAGE:") || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("%v: exit %d\n%s\nwant exit 2 and one line containing %q", c.args, code, out, c.want)
		}
	}
	for _, args := range [][]string{
		{"findings", "--since", "7d"},
		{"notify", "status", "--since", "7d"},
		{"findings", "--since", "1d12h"},
		{"findings", "--since", "90m", "--clickhouse-connect-timeout", "1d"},
	} {
		if out, code := run(args...); code != exitOK {
			t.Errorf("%v: exit %d %s", args, code, out)
		}
	}
	if out, code := run("pause", "h1", "--for", "1d"); code != exitOK || !strings.Contains(out, "(for 1d)") {
		t.Errorf("pause --for 1d: exit %d %s", code, out)
	}
	if out, code := run("backfill", "h1", "--from", "1000", "--to", "2000", "--chunk", "1500ms"); code != exitUsage || !strings.Contains(out, "whole number of seconds") {
		t.Errorf("backfill --chunk 1500ms: exit %d %s", code, out)
	}
	for _, args := range [][]string{
		{"--log-level", "debug", "due"},
		{"due", "--log-level", "debug"},
	} {
		var logs lockedBuffer
		if _, err := runLogged(t.Context(), &logs, append(args, common...)...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(logs.String(), "connected to ClickHouse") {
			t.Errorf("%v: not at debug:\n%s", args, logs.String())
		}
	}
	var logs lockedBuffer
	if _, err := runLogged(t.Context(), &logs, append([]string{"--log-level", "debug", "due", "--log-level", "warn"}, common...)...); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "connected to ClickHouse") {
		t.Errorf("the command's --log-level warn did not win over the global debug:\n%s", logs.String())
	}
}

// TestValidateNamesTheUnknownUnit: a hunt file's unknown unit is named (it was "unknown unit …").
func TestValidateNamesTheUnknownUnit(t *testing.T) {
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: a\ninterval: 5min\n"+huntQuery)
	writeHunt(t, dir, "b.yaml", "id: b\ninterval: 5m\ntimeout: 30secs\n"+huntQuery)
	out, err := runApp(t, "validate", "--hunts-dir", dir)
	if schedExit(err) != exitError || !strings.Contains(out, `interval: invalid interval: unknown unit "min"`) ||
		!strings.Contains(out, `timeout: invalid duration: unknown unit "secs"`) {
		t.Errorf("validate: exit %d\n%s", schedExit(err), out)
	}
}

// TestParseDurationIsOneGrammar: the hunt files' grammar plus Go's sub-second forms, nothing
// negative.
func TestParseDurationIsOneGrammar(t *testing.T) {
	for in, want := range map[string]string{"7d": "168h0m0s", "1d12h": "36h0m0s", "90": "1m30s", "500ms": "500ms",
		"1.5h": "1h30m0s", "0": "0s", "168h0m0s": "168h0m0s"} {
		if d, err := parseDuration(in); err != nil || d.String() != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"-1s", "7x", "", "1w"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) accepted", in)
		}
	}
}

// TestRunRefusesAnUnprotectedStatusPageBeyondLoopback: without --status-token-file, run and
// dev refuse a --listen beyond loopback unless --status-unauthenticated; loopback, the flag or
// a token go on (to the connection, which fails here: nothing listens).
func TestRunRefusesAnUnprotectedStatusPageBeyondLoopback(t *testing.T) {
	t.Setenv(passwordEnv, "")
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: a\ninterval: 1h\n"+huntQuery)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--hunts-dir", dir, "--clickhouse-url", "http://" + closedPort(t), "--clickhouse-connect-timeout", "1ms"}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--listen", ":0"}, exitUsage},
		{[]string{"--listen", "0.0.0.0:0"}, exitUsage},
		{[]string{"--listen", "10.1.2.3:0"}, exitUsage},
		{[]string{"--listen", ":0", "--status-token-file", empty}, exitUsage},
		{[]string{"--listen", "127.0.0.1:0"}, exitError},
		{[]string{"--listen", "localhost:0"}, exitError},
		{[]string{"--listen", ":0", "--status-unauthenticated"}, exitError},
		{[]string{"--listen", ":0", "--status-token-file", token}, exitError},
	} {
		_, err := runApp(t, append(append([]string{"run"}, c.args...), common...)...)
		if schedExit(err) != c.code {
			t.Errorf("%v: exit %d (%v), want %d", c.args, schedExit(err), err, c.code)
		}
		if c.code == exitUsage && len(c.args) == 2 && (err == nil || !strings.Contains(err.Error(), "--status-token-file") || !strings.Contains(err.Error(), "--status-unauthenticated")) {
			t.Errorf("%v: the refusal does not name both ways out: %v", c.args, err)
		}
	}
}
