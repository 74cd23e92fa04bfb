package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// coordinationRe finds statements that read or write a coordination table or view.
var coordinationRe = regexp.MustCompile(`\bhunt_(lease|watermark|state|run|runs|findings|findings_committed|request|schedule|publish)\b`)

// TestQuorumSettingsOnEveryCoordinationStatement runs `trigger` and `run --consistency quorum`
// against a private chlocal and reads back, from the server's statement log, the settings each
// statement arrived with: every statement touching a coordination table (claims, verify reads,
// commits, snapshots, findings, state, the SELECT inside conditional inserts) carries
// insert_quorum, insert_quorum_parallel=0 and select_sequential_consistency=1. chDB accepts the
// settings on its non-replicated tables (ClickHouse ignores them there), so this is the real
// request path, not a stripped one.
func TestQuorumSettingsOnEveryCoordinationStatement(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	opts, err := chtest.Options(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := schema.Apply(ctx, admin, "hr", schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hunt := "interval: 1h\nquery: |\n  SELECT arrayJoin([1, 2, 3]) AS n\n  WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
	if err := os.WriteFile(filepath.Join(dir, "three.yaml"), []byte(hunt), 0o644); err != nil {
		t.Fatal(err)
	}
	var mark uint64
	if log := srv.StatementLog(t); len(log) > 0 {
		mark = log[len(log)-1].Seq // the fixture's own statements carry no settings
	}
	common := []string{"--clickhouse-url", srv.URL, "--database", "hr", "--consistency", "quorum"}
	if out, err := runApp(t, append([]string{"trigger", "three", "--force"}, common...)...); err != nil {
		t.Fatalf("trigger: %v %s", err, out)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(runCtx, append([]string{"run", "--hunts-dir", dir, "--tick", "200ms", "--settle", "100ms",
			"--lease", "10s", "--listen", "127.0.0.1:0", "--owner", "quorum-test"}, common...)...)
		done <- err
	}()
	// Wait on the server's record, not on a query of ours: two commits (the scheduled fire
	// and the request) and their findings.
	committed := func(log []ctl.Statement) bool {
		commits, findings := 0, 0
		for _, st := range log {
			if st.Kind != ctl.KindInsert || !st.Done || st.ErrorCode != 0 {
				continue
			}
			switch {
			case strings.Contains(st.SQL, "hunt_watermark"):
				commits++
			case strings.Contains(st.SQL, "hunt_findings"):
				findings++
			}
		}
		return commits >= 2 && findings >= 2
	}
	var log []ctl.Statement
	committedTwice := chtest.Poll(time.Minute, func() bool { log = srv.StatementsSince(t, mark); return committed(log) })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run ended with %v after its context was cancelled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	if !committedTwice {
		t.Fatalf("no two commits with findings within a minute; %d statements logged", len(log))
	}
	log = srv.StatementsSince(t, mark) // with the release and state writes of the shutdown

	want := chstore.ConsistencyQuorum.Settings()
	seen := map[string]int{}
	for _, st := range log {
		m := coordinationRe.FindString(st.SQL)
		if m == "" || strings.Contains(st.SQL, "FROM system.tables") {
			continue // the start-up check names the tables, on the probe that decides the settings
		}
		seen[string(st.Kind)+" "+m]++
		for k, v := range want {
			if got, ok := st.Settings[k]; !ok || got != fmt.Sprint(v) {
				t.Errorf("statement %d (%s) carries %s=%q (set: %t), want %v:\n%s", st.Seq, st.Kind, k, got, ok, v, st.SQL)
			}
		}
	}
	// The log must hold the statements the guarantee is about, or the loop above proves nothing.
	for _, k := range []string{"insert hunt_lease", "insert hunt_watermark", "insert hunt_findings", "insert hunt_request",
		"read hunt_lease", "read hunt_watermark"} {
		if seen[k] == 0 {
			t.Errorf("no %q statement in the log; seen %v", k, seen)
		}
	}
	t.Logf("coordination statements checked: %v", seen)
}

// Every command with the ClickHouse flags takes --consistency (and its environment variable).
func TestConsistencyFlagOnEveryClickHouseCommand(t *testing.T) {
	n := 0
	for _, cmd := range newApp().Commands {
		var url, consistency bool
		for _, f := range cmd.Flags {
			for _, name := range f.Names() {
				url = url || name == "clickhouse-url"
				consistency = consistency || name == "consistency"
			}
		}
		if url {
			n++
			if !consistency {
				t.Errorf("%s takes --clickhouse-url but not --consistency", cmd.Name)
			}
		}
	}
	if n < 8 {
		t.Fatalf("only %d commands take --clickhouse-url", n)
	}
}

// single-endpoint with two hosts stops before connecting, with the usage exit code and the fix;
// the environment variable is read like the flag.
func TestConsistencyRefusedAtStartup(t *testing.T) {
	dead := "clickhouse://" + closedPort(t) + ",localhost:1"
	for _, args := range [][]string{
		{"status", "--clickhouse-url", dead, "--consistency", "single-endpoint"},
		{"due", "--clickhouse-url", dead},
	} {
		if args[0] == "due" {
			t.Setenv("HUNT_RUNNER_CONSISTENCY", "single-endpoint")
		}
		_, err := runApp(t, args...)
		var ec cli.ExitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != exitUsage || !strings.Contains(err.Error(), "list one host") {
			t.Errorf("%v: %v, want exit %d naming the fix", args, err, exitUsage)
		}
	}
	// Decided on the server: auto finds plain tables (single-endpoint), which two hosts
	// contradict. The first host (127.0.0.2:8123) is closed, so the driver reaches the engine.
	db := chtest.NewWithSchema(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = "127.0.0.2," + u.Host
	t.Setenv("HUNT_RUNNER_CONSISTENCY", "")
	_, err = runApp(t, "due", "--clickhouse-url", u.String(), "--database", db.Name, "--clickhouse-connect-timeout", "20s")
	var ec cli.ExitCoder
	if !errors.As(err, &ec) || ec.ExitCode() != exitUsage || !strings.Contains(err.Error(), "not replicated") && !strings.Contains(err.Error(), "list one host") {
		t.Errorf("auto with two hosts on plain tables: %v, want exit %d naming the fix", err, exitUsage)
	}
	t.Setenv("HUNT_RUNNER_CONSISTENCY", "strict")
	if _, err := runApp(t, "due", "--clickhouse-url", "clickhouse://"+closedPort(t)); err == nil || !strings.Contains(err.Error(), "unknown consistency") {
		t.Errorf("unknown mode from the environment: %v", err)
	}
}

// The shim logs the mode but sends no settings: its scaler profile (readonly = 1) would refuse
// every query that carried one.
func TestShimSendsNoConsistencySettings(t *testing.T) {
	srv := chtest.Start(t)
	opts, err := chtest.Options(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := schema.Apply(context.Background(), admin, "hr", schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	var mark uint64
	if log := srv.StatementLog(t); len(log) > 0 {
		mark = log[len(log)-1].Seq
	}
	listen := closedPort(t)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(ctx, "shim", "--clickhouse-url", srv.URL, "--database", "hr", "--consistency", "quorum",
			"--listen", listen, "--timeout", "2s")
		done <- err
	}()
	answered := chtest.Poll(20*time.Second, func() bool {
		resp, err := http.Get("http://" + listen + "/keda/hunt-backlog")
		if err != nil {
			return false
		}
		resp.Body.Close()
		for _, st := range srv.StatementsSince(t, mark) {
			if st.Done && strings.Contains(st.SQL, "hunt_schedule") {
				return true
			}
		}
		return false
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("shim: %v", err)
	}
	if !answered {
		t.Fatal("the shim never read the backlog")
	}
	for _, st := range srv.StatementsSince(t, mark) {
		for k := range chstore.ConsistencyQuorum.Settings() {
			if _, ok := st.Settings[k]; ok {
				t.Errorf("shim statement %d carries %s:\n%s", st.Seq, k, st.SQL)
			}
		}
	}
}
