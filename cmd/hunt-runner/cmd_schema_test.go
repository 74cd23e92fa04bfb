package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// runApp runs the real app with args and returns what it wrote to stdout.
func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runAppContext(context.Background(), args...)
}

// runAppContext runs the CLI until it returns or ctx is cancelled (as a signal would).
func runAppContext(ctx context.Context, args ...string) (string, error) {
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	// Without a handler, urfave/cli exits the process on a cli.Exit error.
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.RunContext(ctx, append([]string{"hunt-runner"}, args...))
	return out.String(), err
}

func TestSchemaPrintMatchesGoldenWithoutConnecting(t *testing.T) {
	// A URL that nothing listens on: --print must not try it.
	dead := "http://" + closedPort(t)
	for _, topo := range []string{"single", "replicated", "cluster", "cloud"} {
		t.Run(topo, func(t *testing.T) {
			out, err := runApp(t, "schema", "--print", "--topology", topo, "--clickhouse-url", dead, "--clickhouse-connect-timeout", "1ns")
			if err != nil {
				t.Fatal(err)
			}
			golden, err := os.ReadFile(filepath.Join("..", "..", "store", "schema", "testdata", "ddl_"+topo+".golden.sql"))
			if err != nil {
				t.Fatal(err)
			}
			header := "-- hunt-runner schema: database hunt_runner, topology " + topo + "\n\n"
			cluster := ""
			if topo == "cluster" {
				cluster = "default"
			}
			view := "\n-- view hunt_runner.hunt_backlog_v1\n" + store.BacklogViewSQL("hunt_runner", cluster) + ";\n"
			if out != header+string(golden)+view {
				t.Errorf("printed DDL differs from the golden file:\n%s", out)
			}
		})
	}
}

func TestSchemaPrintFlags(t *testing.T) {
	out, err := runApp(t, "schema", "--print", "--topology", "cluster", "--cluster", "main", "--database", "sec")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "CREATE DATABASE IF NOT EXISTS `sec` ON CLUSTER 'main'") ||
		!strings.Contains(out, "'/clickhouse/tables/{shard}/sec/hunt_lease'") {
		t.Errorf("--database/--cluster not honoured:\n%s", out)
	}
	out, err = runApp(t, "schema", "--print", "--clickhouse-url", "clickhouse://ch/fromurl", "--clickhouse-password-file", "/nonexistent")
	if err != nil || !strings.Contains(out, "CREATE DATABASE IF NOT EXISTS `fromurl`") {
		t.Errorf("--print should take the database from the URL and ignore connection settings: %v\n%s", err, out)
	}
	out, err = runApp(t, "schema", "--print")
	if err != nil || !strings.Contains(out, "topology single") || strings.Contains(out, "Replicated") {
		t.Errorf("--print with auto topology should print single: %v\n%s", err, out)
	}
	if _, err := runApp(t, "schema", "--print", "--topology", "sharded"); err == nil {
		t.Error("unknown topology accepted")
	}
	// An unescaped '#' cuts the URL short, so its path cannot be trusted to name the database:
	// refuse rather than print DDL for a default, and keep the password out of the message
	// (a password in the URL is refused in any form, pointing at the env var or file instead).
	pw := "p#" + rand.Text()
	_, err = runApp(t, "schema", "--print", "--clickhouse-url", "http://u:"+pw+"@ch:8123/db")
	if exitCode(err) != exitUsage || strings.Contains(err.Error(), pw[2:]) || !strings.Contains(err.Error(), passwordEnv) {
		t.Errorf("unparseable URL: exit %d, %v", exitCode(err), err)
	}
}

func TestSchemaAppliedTwiceOnEngine(t *testing.T) {
	db := chtest.New(t)
	name := db.Name + "_cli"
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name) })
	t.Setenv(passwordEnv, "")
	args := []string{"schema", "--clickhouse-url", db.URL, "--database", name, "--clickhouse-connect-timeout", "10s"}
	out, err := runApp(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "topology single") || strings.Count(out, "  created  ") != 2+len(schema.ObjectNames()) ||
		!strings.Contains(out, "  created  view "+name+".hunt_backlog_v1\n") {
		t.Errorf("first run should create the database, every table and the backlog view:\n%s", out)
	}
	out, err = runApp(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "schema up to date: nothing to do") {
		t.Errorf("second run changed something:\n%s", out)
	}
}

func TestSchemaReportsTablesWithTheWrongEngine(t *testing.T) {
	db := chtest.New(t)
	t.Setenv(passwordEnv, "")
	base := []string{"schema", "--clickhouse-url", db.URL, "--database", db.Name}
	if _, err := runApp(t, append(base, "--topology", "single")...); err != nil {
		t.Fatal(err)
	}
	// Tables made on one node, then the operator declares a replicated setup: schema must not
	// call that "up to date".
	out, err := runApp(t, append(base, "--topology", "replicated")...)
	if err == nil {
		t.Fatalf("a topology mismatch exited 0:\n%s", out)
	}
	if n := strings.Count(out, "WRONG ENGINE"); n != len(schema.TableNames()) {
		t.Errorf("%d tables flagged, want %d:\n%s", n, len(schema.TableNames()), out)
	}
	t.Logf("%s\n%v", out, err)
}

// Retention settings that would hide committed findings are refused before anything connects;
// a longer findings retention prints the commit rows' ALTER first (the order schema applies).
func TestSchemaRetentionFlags(t *testing.T) {
	dead := "http://" + closedPort(t)
	for _, args := range [][]string{
		{"--findings-ttl", "90d", "--commits-ttl", "30d"},
		{"--findings-ttl", "365d", "--commits-ttl", "90d"},
		{"--commits-ttl", "36h"},
		{"--print", "--findings-ttl", "90d", "--commits-ttl", "30d"},
	} {
		out, err := runApp(t, append([]string{"schema", "--clickhouse-url", dead, "--clickhouse-connect-timeout", "1ns"}, args...)...)
		if exitCode(err) != exitUsage || (args[len(args)-1] == "30d" && !strings.Contains(err.Error(), "at least as long as findings")) {
			t.Errorf("schema %v: exit %d, %v\n%s", args, exitCode(err), err, out)
		}
	}
	out, err := runApp(t, "schema", "--print", "--findings-ttl", "365d")
	if err != nil {
		t.Fatal(err)
	}
	wm := strings.Index(out, "ALTER TABLE `hunt_runner`.`hunt_watermark` MODIFY TTL toDateTime(updated) + INTERVAL 366 DAY GROUP BY hunt_id SET")
	fd := strings.Index(out, "ALTER TABLE `hunt_runner`.`hunt_findings` MODIFY TTL toDateTime(found) + INTERVAL 365 DAY")
	if wm < 0 || fd < wm {
		t.Errorf("schema --print --findings-ttl 365d: want the commit rows lengthened, then the findings:\n%s", out)
	}
}
