package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// TestMain stops the embedded engine validate started in this process (run does so for the
// CLI), so that its data directory does not outlive the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	closeOfflineEngine()
	os.Exit(code)
}

const offlineWindow = "  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"

// validateLevel runs validate --json with args and returns its sql_check and errors.
func validateLevel(t *testing.T, args ...string) (validateJSON, int) {
	t.Helper()
	out, err := runApp(t, append([]string{"validate", "--json"}, args...)...)
	var got validateJSON
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil {
		t.Fatalf("validate --json %v: %v (exit %d)\n%s", args, jerr, exitCode(err), out)
	}
	return got, exitCode(err)
}

// TestValidateOfflineParser: without a server, ClickHouse's own parser (the embedded engine)
// checks each query. A syntax error the lexical check passes is refused at its file:line:col,
// a call the lexer does not see as one is held to the function allowlist with the flag that
// allows it, and the output says "parser" and that no names were looked up; the hunt's code
// never runs; --offline-parser=false is the lexical check again.
func TestValidateOfflineParser(t *testing.T) {
	chtest.LibPath(t)
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	// "+ FROM" makes FROM a column and sample its alias: the parser fails at the '.'.
	writeTestFile(t, typo, "interval: 5m\nquery: |\n  SELECT count() + FROM sample.auth_events\n"+offlineWindow)

	out, err := runApp(t, "validate", "--offline-parser=false", dir)
	if err != nil || !strings.Contains(out, "note: only a lexical check of the SQL ran (no server, --offline-parser=false)") {
		t.Fatalf("the lexical check is expected to pass this syntax error (the premise): %v\n%s", err, out)
	}
	if got, code := validateLevel(t, "--offline-parser=false", dir); code != exitOK || got.SQLCheck != checkLexical {
		t.Errorf("--offline-parser=false: exit %d, sql_check %q, want lexical", code, got.SQLCheck)
	}
	t.Setenv("HUNT_RUNNER_OFFLINE_PARSER", "false")
	if got, _ := validateLevel(t, dir); got.SQLCheck != checkLexical {
		t.Errorf("HUNT_RUNNER_OFFLINE_PARSER=false: sql_check %q, want lexical", got.SQLCheck)
	}
	os.Unsetenv("HUNT_RUNNER_OFFLINE_PARSER")

	out, err = runApp(t, "validate", dir)
	if exitCode(err) != exitError || !strings.Contains(out, typo+":3:31: ClickHouse's parser (the embedded engine, no server) says: Syntax error: failed at line 1, column 29 of the query (.)") {
		t.Errorf("the parser level did not place the syntax error: exit %d\n%s", exitCode(err), out)
	}
	// The level is named even when every hunt was refused.
	if !strings.Contains(out, "note: ClickHouse's parser (embedded engine 26.") || !strings.Contains(out, "no table or column was looked up") {
		t.Errorf("the output does not say the parser ran and names were not resolved:\n%s", out)
	}
	got, code := validateLevel(t, dir)
	if code != exitError || got.SQLCheck != checkParser || len(got.Errors) != 1 || got.Errors[0].Line != 3 || got.Errors[0].Column != 31 {
		t.Errorf("--json: exit %d, sql_check %q, errors %+v; want parser and one error at 3:31", code, got.SQLCheck, got.Errors)
	}

	// The lexer reads "FROM numbers(1)" inside EXTRACT as a table function (an allowed
	// generator); the parser sees a scalar call, which is off the function allowlist.
	os.Remove(typo)
	call := filepath.Join(dir, "call.yaml")
	writeTestFile(t, call, "interval: 5m\nquery: |\n  SELECT EXTRACT(DAY FROM numbers(1)) AS d FROM sample.auth_events\n"+offlineWindow)
	if got, code := validateLevel(t, "--offline-parser=false", dir); code != exitOK {
		t.Fatalf("the lexical check is expected to pass the hidden call (the premise): exit %d %+v", code, got.Errors)
	}
	out, err = runApp(t, "validate", dir)
	if exitCode(err) != exitError || !strings.Contains(out, call+":3:3: query calls numbers(), which is not on hunt-runner's function allowlist") ||
		!strings.Contains(out, "--allow-functions numbers") {
		t.Errorf("the parser level did not hold the call to the allowlist: exit %d\n%s", exitCode(err), out)
	}
	// Allowed, it passes; sample.auth_events does not exist on the engine: names are not
	// resolved. The subquery would raise if anything evaluated it.
	writeTestFile(t, filepath.Join(dir, "raise.yaml"), "interval: 5m\nquery: |\n  SELECT user FROM sample.auth_events\n"+offlineWindow+
		"  AND user = toString((SELECT throwIf(1, 'hunt code was evaluated')))\n")
	if got, code := validateLevel(t, "--allow-functions", "numbers,throwIf", dir); code != exitOK || got.SQLCheck != checkParser || len(got.Hunts) != 2 {
		t.Errorf("allowed calls over an unknown table: exit %d, sql_check %q, %d hunts, errors %+v", code, got.SQLCheck, len(got.Hunts), got.Errors)
	}
}

// TestValidateOfflineWithoutTheEngine: without the library the check is lexical and says how
// to get the parser; a library that is named but cannot be loaded is an error, not a quiet
// fall back to the weaker check.
func TestValidateOfflineWithoutTheEngine(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "ok.yaml"), "interval: 5m\nquery: |\n  SELECT 1 AS x FROM sample.auth_events\n"+offlineWindow)
	t.Setenv("CHDB_LIB_PATH", "")
	if got, code := validateLevel(t, dir); code != exitOK || got.SQLCheck != checkLexical {
		t.Errorf("no library: exit %d, sql_check %q, want lexical", code, got.SQLCheck)
	}
	out, err := runApp(t, "validate", dir)
	if err != nil || !strings.Contains(out, "note: only a lexical check of the SQL ran (no server, no embedded engine)") ||
		!strings.Contains(out, "set CHDB_LIB_PATH to libchdb.so (make chdb)") {
		t.Errorf("no library: %v\n%s", err, out)
	}
	// No hunt reached a SQL check: no note about one.
	bad := t.TempDir()
	writeTestFile(t, filepath.Join(bad, "bad.yaml"), "interval: nope\n")
	if out, _ := runApp(t, "validate", bad); strings.Contains(out, "note:") {
		t.Errorf("a note about the SQL check, with no hunt checked:\n%s", out)
	}
	missing := filepath.Join(t.TempDir(), "libchdb.so")
	_, err = runApp(t, "validate", "--chdb-lib", missing, dir)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--offline-parser=false") {
		t.Errorf("a missing library: exit %d (%v), want a usage error naming it and --offline-parser=false", exitCode(err), err)
	}
}

// TestValidateOfflineBuilds: the release build (-tags nochdb) says lexical and how to get the
// parser; the build with the engine parses in a process of its own and leaves no engine data
// behind when it exits.
func TestValidateOfflineBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary twice")
	}
	lib := chtest.LibPath(t)
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "typo.yaml"), "interval: 5m\nquery: |\n  SELECT count() + FROM sample.auth_events\n"+offlineWindow)
	for _, tags := range []string{"nochdb", ""} {
		bin := filepath.Join(t.TempDir(), "hunt-runner")
		if out, err := exec.Command("go", "build", "-tags", tags, "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go build -tags %q: %v\n%s", tags, err, out)
		}
		tmp := t.TempDir()
		cmd := exec.Command(bin, "validate", dir)
		cmd.Env = []string{"CHDB_LIB_PATH=" + lib, "TMPDIR=" + tmp}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "HUNT_RUNNER_") && !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, "CHDB_LIB_PATH=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, _ := cmd.CombinedOutput()
		switch {
		case tags == "nochdb" && (cmd.ProcessState.ExitCode() != exitOK || !strings.Contains(string(out), "(no server, and this build has no embedded engine: -tags nochdb)") ||
			!strings.Contains(string(out), "(make dev)")):
			t.Errorf("release build: exit %d\n%s", cmd.ProcessState.ExitCode(), out)
		case tags == "" && (cmd.ProcessState.ExitCode() != exitError || !strings.Contains(string(out), "typo.yaml:3:31: ClickHouse's parser")):
			t.Errorf("build with the engine: exit %d\n%s", cmd.ProcessState.ExitCode(), out)
		}
		if left, _ := filepath.Glob(filepath.Join(tmp, "chlocal-*")); len(left) > 0 {
			t.Errorf("-tags %q: the engine's data outlived validate: %v", tags, left)
		}
	}
}
