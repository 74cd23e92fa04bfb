package chtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func TestNewGivesFreshDatabase(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	var cur string
	if err := db.Conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&cur); err != nil {
		t.Fatal(err)
	}
	if cur != db.Name || !strings.HasPrefix(db.Name, "t_") || db.Options.Auth.Database != db.Name {
		t.Fatalf("currentDatabase() = %q, Name %q, Options.Auth.Database %q", cur, db.Name, db.Options.Auth.Database)
	}
	other := chtest.New(t)
	if other.Name == db.Name {
		t.Fatal("two calls returned the same database")
	}
	// The URL reaches the same server from a separate client.
	opts, err := chtest.Options(db.URL, db.Name)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := db.Conn.Exec(ctx, "CREATE TABLE x (a UInt32) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "INSERT INTO x VALUES (?), (?)", 1, 2); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM x").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
}

func TestDatabaseDroppedAtCleanup(t *testing.T) {
	var name, url string
	t.Run("inner", func(t *testing.T) {
		db := chtest.New(t)
		name, url = db.Name, db.URL
	})
	if name == "" {
		t.Skip("no engine")
	}
	opts, err := chtest.Options(url, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.databases WHERE name = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after the test", name)
	}
}

func TestQueriesCountsRoundTrips(t *testing.T) {
	if os.Getenv(chtest.EnvURL) != "" {
		t.Skip("/chlocal/stats is chlocal's")
	}
	db := chtest.New(t)
	// The first request of a new connection is clickhouse-go's handshake,
	// itself a round trip; make it before counting.
	if err := db.Conn.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := chtest.Queries(t, db.URL)
	for range 3 {
		if err := db.Conn.Exec(context.Background(), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	// Other tests of this binary may run in parallel; none do here.
	if got := chtest.Queries(t, db.URL) - before; got != 3 {
		t.Fatalf("Queries grew by %d, want 3", got)
	}
}

// TestPrivateServerRestart stops and restarts a private chlocal: requests
// fail while it is down, and data and address survive the restart.
func TestPrivateServerRestart(t *testing.T) {
	s := chtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func() clickhouse.Conn {
		opts, err := chtest.Options(s.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		opts.DialTimeout = 2 * time.Second
		conn, err := clickhouse.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	conn := open()
	if err := conn.Exec(ctx, "CREATE TABLE default.keep (a UInt32) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "INSERT INTO default.keep VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr
	s.Stop()
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("Ping succeeded while the server was stopped")
	}
	s.Start()
	if s.Addr != addr || s.URL != "http://"+addr {
		t.Fatalf("address changed across restart: %s -> %s", addr, s.Addr)
	}
	var a uint32
	if err := open().QueryRow(ctx, "SELECT a FROM default.keep").Scan(&a); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if a != 7 {
		t.Fatalf("a = %d, want 7", a)
	}
	// The new connection's handshake and the SELECT.
	if got := chtest.Queries(t, s.URL); got != 2 {
		t.Fatalf("restarted server served %d queries, want 2", got)
	}
}

// TestMissingEngine re-runs this binary without an engine: the test is
// skipped locally and fails under CI=true.
func TestMissingEngine(t *testing.T) {
	if os.Getenv("CHTEST_PROBE") == "1" {
		chtest.New(t)
		t.Fatal("New returned without an engine")
	}
	env := func(ci string) []string {
		var out []string
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != chtest.EnvLib && k != chtest.EnvURL && k != "CI" {
				out = append(out, kv)
			}
		}
		return append(out, "CHTEST_PROBE=1", "CI="+ci)
	}
	run := func(ci string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingEngine$", "-test.v", "-test.count=1")
		cmd.Env = env(ci)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	if err != nil || !strings.Contains(out, "--- SKIP: TestMissingEngine") {
		t.Fatalf("without CI: want a skip, got %v\n%s", err, out)
	}
	out, err = run("true")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(out, "CI=true: a missing engine fails") {
		t.Fatalf("with CI=true: want a failure, got %v\n%s", err, out)
	}
}

// TestServerURLFromEnvironment points a re-run of this binary at a server
// through HUNT_RUNNER_TEST_CLICKHOUSE, without the chDB library: New uses
// that server instead of starting chlocal.
func TestServerURLFromEnvironment(t *testing.T) {
	if os.Getenv(chtest.EnvURL) != "" {
		t.Skip("already running against " + chtest.EnvURL)
	}
	s := chtest.Start(t)
	before := chtest.Queries(t, s.URL)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNewGivesFreshDatabase$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != chtest.EnvLib && k != chtest.EnvURL {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, chtest.EnvURL+"="+s.URL)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNewGivesFreshDatabase") {
		t.Fatalf("run against %s: %v\n%s", s.URL, err, out)
	}
	if chtest.Queries(t, s.URL) <= before {
		t.Fatal("the re-run did not use the server from " + chtest.EnvURL)
	}
}

// Fault rules survive a restart of a private server, with their seed; ClearFaults removes them.
func TestFaultsSurviveRestart(t *testing.T) {
	srv := chtest.Start(t)
	seed := srv.SetFaults(t, ctl.FaultRule{Name: "boom", Kind: ctl.KindRead, Match: `boom`, Effect: ctl.FailBefore, Code: 252})
	srv.Stop()
	srv.Start()
	opts, err := chtest.Options(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var ex *clickhouse.Exception
	if err := conn.Exec(context.Background(), "SELECT 'boom'"); !errors.As(err, &ex) || ex.Code != 252 {
		t.Fatalf("after restart: %v, want exception 252", err)
	}
	rs := srv.FaultStats(t)
	if len(rs) != 1 || rs[0].Name != "boom" || rs[0].Fired != 1 {
		t.Fatalf("stats after restart: %+v", rs)
	}
	if st := srv.SetFaultSet(t, ctl.FaultSet{Seed: seed, Rules: []ctl.FaultRule{{Effect: ctl.FailBefore, Match: "boom"}}}); st.Seed != seed {
		t.Fatalf("seed %d, want %d", st.Seed, seed)
	}
	srv.ClearFaults(t)
	if err := conn.Exec(context.Background(), "SELECT 'boom'"); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
	log := srv.StatementLog(t)
	if len(log) == 0 || log[len(log)-1].SQL != "SELECT 'boom'" || log[len(log)-1].Fault != "" {
		t.Fatalf("last logged statement: %+v", log[len(log)-1:])
	}
}
