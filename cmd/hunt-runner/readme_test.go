package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// installBlocks returns the shell blocks of the README's "## Install" section, in order.
func installBlocks(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Install\n")
	if !ok {
		t.Fatal("README has no \"## Install\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for {
		_, rest, ok := strings.Cut(section, "```sh\n")
		if !ok {
			return blocks
		}
		var block string
		block, section, _ = strings.Cut(rest, "```\n")
		blocks = append(blocks, block)
	}
}

// replaceOnce fails the test unless old occurs exactly once: the README changed shape and this
// test must follow it.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("README install block: %q occurs %d times, want once:\n%s", old, n, s)
	}
	return strings.Replace(s, old, new, 1)
}

// TestREADMEInstallWorksAsWritten runs the README's install section in bash, step by step, the
// way a new operator pastes it, against the engine. Only what cannot run here is changed: the
// clone (this checkout is the clone), the server URL, and `run` goes to the background so the
// second terminal's block can follow it.
func TestREADMEInstallWorksAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if os.Getenv(chtest.EnvURL) != "" {
		t.Skip("the install block logs in as the passwordless default user of the engine")
	}
	for _, tool := range []string{"bash", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := installBlocks(t, string(readme))
	if len(blocks) != 2 {
		t.Fatalf("want the install block and the second terminal's block, got %d blocks", len(blocks))
	}
	db := chtest.New(t)
	name := db.Name + "_readme"
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name) })

	first := blocks[0]
	first = replaceOnce(t, first, "git clone https://github.com/hunt-runner/hunt-runner.git && cd hunt-runner\n", "")
	first = replaceOnce(t, first, "make build ", fmt.Sprintf("make -C %q build BIN=\"$PWD/bin/hunt-runner\" ", root))
	first = replaceOnce(t, first, "HUNT_RUNNER_CLICKHOUSE_URL=http://localhost:8123", "HUNT_RUNNER_CLICKHOUSE_URL="+db.URL)
	first = replaceOnce(t, first, "hunt-runner run --hunts-dir hunts ", "hunt-runner run --hunts-dir hunts --listen 127.0.0.1:0 >run.log 2>&1 & echo $! >run.pid # ")

	dir := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HUNT_RUNNER_") {
			env = append(env, kv)
		}
	}
	// The README's database is hunt_runner; this test's is its own, through the variable the
	// README leaves unset.
	env = append(env, "HUNT_RUNNER_DATABASE="+name)
	sh := func(script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n--- script\n%s\n--- output\n%s", err, script, out)
		}
		return string(out)
	}
	t.Cleanup(func() { stopPIDFile(t, filepath.Join(dir, "run.pid")) })
	out := sh(first)
	for _, want := range []string{"hunt-runner version ", "  created  view " + name + ".hunt_backlog_v1", "1 valid hunt", "\n1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("install block output lacks %q:\n%s", want, out)
		}
	}
	if !chtest.Poll(2*time.Minute, func() bool {
		var n uint64
		if err := db.Conn.QueryRow(t.Context(), "SELECT count() FROM "+name+".hunt_runs WHERE hunt_id = 'hello' AND status = 'succeeded'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}) {
		log, _ := os.ReadFile(filepath.Join(dir, "run.log"))
		t.Fatalf("the runner never ran the hello hunt:\n%s", log)
	}
	// "In another terminal with the same environment": the first block's exports.
	var exports []string
	for _, l := range strings.Split(first, "\n") {
		if _, e, ok := strings.Cut(l, "export "); ok && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			e, _, _ = strings.Cut(e, "#")
			exports = append(exports, "export "+strings.TrimSpace(e))
		}
	}
	if out := sh(strings.Join(exports, "\n") + "\n" + blocks[1]); !strings.Contains(out, "hello") || !strings.Contains(out, "succeeded") {
		t.Errorf("status in the second terminal:\n%s", out)
	}
}

// stopPIDFile stops the process whose id the script wrote (the runner it started) as a pod's
// SIGTERM would (a background job of a script ignores SIGINT), and waits until it is gone.
func stopPIDFile(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if chtest.Poll(30*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("the runner (pid %d) did not stop on SIGTERM", pid)
}
