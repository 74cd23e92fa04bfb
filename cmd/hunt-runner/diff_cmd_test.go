package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// diff on a change that widens a hunt's filter lists the findings it adds; a new hunt and a
// deleted one are reported as such. The base is a commit of a real git repository.
func TestDiffListsAddedFindings(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	db := chtest.New(t)
	ctx := context.Background()
	src := "src_" + strings.TrimPrefix(db.Name, "t_")
	for _, q := range []string{
		"CREATE DATABASE " + src,
		"CREATE TABLE " + src + ".auth (ts DateTime64(3, 'UTC'), user String, outcome String) ENGINE = MergeTree ORDER BY ts",
		"INSERT INTO " + src + ".auth VALUES (now64(3) - INTERVAL 3 HOUR, 'alice', 'failure'), (now64(3) - INTERVAL 5 HOUR, 'bob', 'locked'), " +
			"(now64(3) - INTERVAL 6 HOUR, 'carol', 'success')",
	} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+src) })
	hunt := func(id, filter string) string {
		return "id: " + id + "\ninterval: 1h\nquery: |\n  SELECT user, outcome FROM " + src + ".auth\n" +
			"  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} AND " + filter + "\n"
	}
	repo := t.TempDir()
	dir := filepath.Join(repo, "hunts")
	write := func(name, body string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	write("failures.yaml", hunt("failures", "outcome = 'failure'"))
	write("retired.yaml", hunt("retired", "outcome = 'success'"))
	write("same.yaml", hunt("same", "user = 'alice'"))
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	// The change under review: the filter widens, a hunt goes, one arrives.
	write("failures.yaml", hunt("failures", "outcome IN ('failure', 'locked')"))
	if err := os.Remove(filepath.Join(dir, "retired.yaml")); err != nil {
		t.Fatal(err)
	}
	write("fresh.yaml", hunt("fresh", "user = 'carol'"))

	common := []string{"--clickhouse-url", db.URL, "--base", "main", "--days", "1"}
	out, err := runApp(t, append(append([]string{"diff"}, common...), dir)...)
	if err != nil {
		t.Fatalf("diff: %v\n%s", err, out)
	}
	for _, want := range []string{
		"## hunt-runner diff: 1 changed, 1 new, 1 deleted",
		"### `failures` (changed)\n\n**+1** added, **−0** removed.",
		`{"user":"bob","outcome":"locked"}`,
		"### `fresh` (new)\n\n**+1** added",
		"### `retired` (deleted)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "`same`") {
		t.Errorf("an unchanged hunt is reported:\n%s", out)
	}

	out, err = runApp(t, append(append([]string{"diff", "--json"}, common...), dir)...)
	if err != nil {
		t.Fatalf("diff --json: %v\n%s", err, out)
	}
	var rep struct {
		Hunts []struct {
			Hunt    string   `json:"hunt"`
			Change  string   `json:"change"`
			Added   []string `json:"added"`
			Removed []string `json:"removed"`
		} `json:"hunts"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Hunts) != 3 || rep.Hunts[0].Hunt != "failures" || len(rep.Hunts[0].Added) != 1 || len(rep.Hunts[0].Removed) != 0 ||
		!strings.Contains(rep.Hunts[0].Added[0], "bob") || rep.Hunts[2].Change != "deleted" {
		t.Fatalf("JSON report %+v", rep)
	}

	// --base-dir compares with a directory, the other way round: the widening removes.
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "failures.yaml"), []byte(hunt("failures", "outcome IN ('failure', 'locked')")), 0o644); err != nil {
		t.Fatal(err)
	}
	narrow := t.TempDir()
	if err := os.WriteFile(filepath.Join(narrow, "failures.yaml"), []byte(hunt("failures", "outcome = 'failure'")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runApp(t, "diff", "--clickhouse-url", db.URL, "--base-dir", base, "--days", "1", narrow)
	if err != nil || !strings.Contains(out, "**+0** added, **−1** removed.") {
		t.Fatalf("--base-dir: %v\n%s", err, out)
	}
	if _, err := runApp(t, "diff", "--clickhouse-url", db.URL, narrow); exitCode(err) != exitUsage {
		t.Fatalf("diff without a base: %v", err)
	}
}
