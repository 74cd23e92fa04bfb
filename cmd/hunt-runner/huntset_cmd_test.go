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

func writeHunts(t *testing.T, ids ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, id := range ids {
		hunt := "interval: 1m\nquery: SELECT 1 AS n WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
		if err := os.WriteFile(filepath.Join(dir, id+".yaml"), []byte(hunt), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Two hunt sets materialised into one database through the CLI: neither tombstones the other,
// a duplicate id is refused naming both sets, due counts both unless --hunt-set narrows it,
// status shows its own set, and a runner's hash check reads its own set's publication.
func TestHuntSetsOnEngine(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	t.Setenv("HUNT_RUNNER_HUNT_SET", "")
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name}
	teamA, teamB := writeHunts(t, "a-one", "a-two"), writeHunts(t, "b-one")

	out, err := runApp(t, append([]string{"materialise", "--hunts-dir", teamA, "--hunt-set", "team-a"}, common...)...)
	if err != nil || !strings.Contains(out, "2 added") {
		t.Fatalf("team-a: %v\n%s", err, out)
	}
	// The set may come from the environment, as the chart sets it.
	t.Setenv("HUNT_RUNNER_HUNT_SET", "team-b")
	out, err = runApp(t, append([]string{"materialise", "--hunts-dir", teamB}, common...)...)
	if err != nil || !strings.Contains(out, "1 added, 0 changed, 0 tombstoned") {
		t.Fatalf("team-b tombstoned team-a's hunts: %v\n%s", err, out)
	}
	t.Setenv("HUNT_RUNNER_HUNT_SET", "")

	dup := writeHunts(t, "b-one", "a-two")
	out, err = runApp(t, append([]string{"materialise", "--hunts-dir", dup, "--hunt-set", "team-b"}, common...)...)
	if exitCode(err) != exitError || !strings.Contains(err.Error(), `"team-a"`) || !strings.Contains(err.Error(), `"team-b"`) {
		t.Fatalf("duplicate id across sets: exit %d, %v\n%s", exitCode(err), err, out)
	}

	for args, want := range map[string]string{"": "3", "--hunt-set team-a": "2", "--hunt-set team-b": "1", "--hunt-set default": "0"} {
		a := append([]string{"due"}, common...)
		if args != "" {
			a = append(a, strings.Fields(args)...)
		}
		if out, err := runApp(t, a...); err != nil || strings.TrimSpace(out) != want {
			t.Errorf("due %s = %q, %v; want %s", args, out, err, want)
		}
	}
	if _, err := runApp(t, append([]string{"due", "--hunt-set", "a b"}, common...)...); exitCode(err) != exitUsage {
		t.Errorf("due with a bad set name: exit %d, %v", exitCode(err), err)
	}

	out, err = runApp(t, append([]string{"status", "--json", "--hunt-set", "team-b"}, common...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(rep.Hunts) != 1 || rep.Hunts[0].HuntID != "b-one" {
		t.Errorf("status --hunt-set team-b: %+v", rep.Hunts)
	}

	// The runner's published-hash check: each set reads its own publication, and the default
	// set, never published here, has none (another set's hash must not stand in for it).
	ctx := context.Background()
	hashes := map[string]string{}
	for _, set := range []string{"team-a", "team-b", ""} {
		h, err := publishedHash(db.Conn, db.Name, set)(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hashes[set] = h
	}
	if hashes["team-a"] == "" || hashes["team-b"] == "" || hashes["team-a"] == hashes["team-b"] || hashes[""] != "" {
		t.Errorf("published hashes per set: %v", hashes)
	}
}

// --findings-ttl changes hunt_findings' TTL once, reports it, and is a no-op the second time.
func TestSchemaFindingsTTLOnEngine(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	args := []string{"schema", "--clickhouse-url", db.URL, "--database", db.Name}
	out, err := runApp(t, append(args, "--findings-ttl", "30d")...)
	if err != nil || !strings.Contains(out, "upgraded  changed hunt_findings TTL from toDateTime(found) + toIntervalDay(90) to toDateTime(found) + toIntervalDay(30)") {
		t.Fatalf("first --findings-ttl 30d: %v\n%s", err, out)
	}
	var engine string
	if err := db.Conn.QueryRow(context.Background(), "SELECT engine_full FROM system.tables WHERE database = ? AND name = 'hunt_findings'", db.Name).Scan(&engine); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(engine, "toIntervalDay(30)") {
		t.Fatalf("hunt_findings after --findings-ttl 30d: %s", engine)
	}
	out, err = runApp(t, append(args, "--findings-ttl", "30d")...)
	if err != nil || !strings.HasPrefix(out, "schema up to date: nothing to do") {
		t.Fatalf("second --findings-ttl 30d changed something: %v\n%s", err, out)
	}
	printed, err := runApp(t, "schema", "--print", "--findings-ttl", "30d", "--topology", "cluster", "--cluster", "main")
	if err != nil || !strings.HasSuffix(printed, "ALTER TABLE `hunt_runner`.`hunt_findings` ON CLUSTER 'main' MODIFY TTL toDateTime(found) + INTERVAL 30 DAY SETTINGS materialize_ttl_after_modify = 0;\n") {
		t.Errorf("schema --print --findings-ttl 30d: %v\n%s", err, printed)
	}
	for _, bad := range []string{"36h", "0d", "soon"} {
		if _, err := runApp(t, append(args, "--findings-ttl", bad)...); exitCode(err) != exitUsage {
			t.Errorf("--findings-ttl %s: exit %d, %v", bad, exitCode(err), err)
		}
	}
}

// `run --hunt-set` compares the set it loaded with its own set's publication: another set,
// published into the same database with another hash, raises no mismatch warning.
func TestRunChecksItsOwnSetsHash(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	t.Setenv("HUNT_RUNNER_HUNT_SET", "")
	ctx := context.Background()
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name}
	mine, other := writeHunts(t, "b-one"), writeHunts(t, "d-one", "d-two")
	if out, err := runApp(t, append([]string{"materialise", "--hunts-dir", mine, "--hunt-set", "team-b"}, common...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := runApp(t, append([]string{"materialise", "--hunts-dir", other}, common...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	logs := &lockedBuffer{}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runLogged(runCtx, logs, append([]string{"run", "--hunts-dir", mine, "--hunt-set", "team-b", "--tick", "200ms",
			"--settle", "100ms", "--lease", "10s", "--listen", "127.0.0.1:0", "--owner", "set-test"}, common...)...)
		done <- err
	}()
	// The hash is checked on the first tick, before its claims: a committed run of b-one
	// means the check has happened.
	ran := chtest.Poll(time.Minute, func() bool {
		var runs uint64
		_ = db.Conn.QueryRow(ctx, "SELECT count() FROM hunt_runs WHERE hunt_id = 'b-one' AND status = 'succeeded'").Scan(&runs)
		return runs > 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if !ran {
		t.Fatalf("b-one never ran:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "differs from the one materialise published") {
		t.Errorf("the runner of team-b compared with another set's hash:\n%s", logs.String())
	}
	// Its heartbeat names the set it runs (the beat is written beside the first tick).
	if !chtest.Poll(30*time.Second, func() bool {
		var beats uint64
		err := db.Conn.QueryRow(ctx, "SELECT count() FROM hunt_runner_heartbeat WHERE owner = 'set-test' AND hunt_set = 'team-b'").Scan(&beats)
		return err == nil && beats > 0
	}) {
		t.Error("no heartbeat of set-test names hunt set team-b")
	}
}
