// Package chtest gives tests a real ClickHouse engine: a fresh database on
// either the server named by HUNT_RUNNER_TEST_CLICKHOUSE or a chlocal
// process (chDB, started once per test binary when CHDB_LIB_PATH is set).
// Without either it skips the test, except under CI=true, where it fails,
// so that a missing engine can never pass as "no tests ran".
//
// chlocal serialises every request on one chDB session: tests must not
// rely on session state (SET or USE statements, temporary tables).
package chtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// EnvURL names a real ClickHouse server for tests (clickhouse://host:9000
// native or http://host:8123), used instead of chlocal when set.
const EnvURL = "HUNT_RUNNER_TEST_CLICKHOUSE"

// EnvCluster names the cluster of the EnvURL server (make test-cluster sets it): fresh
// databases are then Replicated on every replica of that cluster, and NewWithSchema creates the
// replicated tables, so a test sees the same database whichever replica a connection reaches.
const EnvCluster = "HUNT_RUNNER_TEST_CLUSTER"

// EnvLib is the path of libchdb.so, needed to run chlocal.
const EnvLib = "CHDB_LIB_PATH"

// DB is a fresh database for one test.
type DB struct {
	// Conn is a clickhouse-go connection with Name as its database.
	Conn driver.Conn
	// Name is the database, t_<random>, dropped when the test ends.
	Name string
	// URL reaches the same server from other processes (database not included).
	URL string
	// Options are the ones Conn was opened with (Auth.Database = Name).
	Options *clickhouse.Options
}

// New returns a connection to a fresh database on the test engine.
func New(t testing.TB) *DB {
	t.Helper()
	return newDB(t, engineURL(t), cluster())
}

// NewDB returns a connection to a fresh database on this private engine (never replicated:
// the test cluster is the shared engine's).
func (s *Server) NewDB(t testing.TB) *DB {
	t.Helper()
	return newDB(t, s.URL, "")
}

// newDB creates a fresh database on the server at base, Replicated across cluster when one is
// named, and drops it when the test ends.
func newDB(t testing.TB, base, cluster string) *DB {
	t.Helper()
	name := "t_" + randomHex(8)
	opts, err := Options(base, "")
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatalf("chtest: open %s: %v", redact(base), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create, drop := "CREATE DATABASE "+name, "DROP DATABASE IF EXISTS "+name+" SYNC"
	if cluster != "" {
		create = "CREATE DATABASE " + name + " ON CLUSTER " + cluster +
			" ENGINE = Replicated('/clickhouse/test_databases/" + name + "', '{shard}', '{replica}')"
		drop = "DROP DATABASE IF EXISTS " + name + " ON CLUSTER " + cluster + " SYNC"
	}
	if err := admin.Exec(ctx, create); err != nil {
		admin.Close()
		t.Fatalf("chtest: create database %s: %v", name, err)
	}
	opts, _ = Options(base, name)
	conn, err := clickhouse.Open(opts)
	if err != nil {
		admin.Close()
		t.Fatalf("chtest: open %s: %v", redact(base), err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.Exec(ctx, drop); err != nil {
			t.Errorf("chtest: drop database %s: %v", name, err)
		}
		admin.Close()
	})
	if cluster != "" {
		return &DB{Conn: replicatedConn{conn}, Name: name, URL: base, Options: opts}
	}
	return &DB{Conn: conn, Name: name, URL: base, Options: opts}
}

// Options returns clickhouse-go options for a server URL (http(s):// or
// clickhouse://) and database; an empty database keeps the URL's own.
func Options(serverURL, database string) (*clickhouse.Options, error) {
	opts, err := clickhouse.ParseDSN(serverURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", redact(serverURL), err)
	}
	if database != "" {
		opts.Auth.Database = database
	}
	if opts.DialTimeout == 0 || opts.DialTimeout == 30*time.Second {
		opts.DialTimeout = 10 * time.Second
	}
	return opts, nil
}

var shared struct {
	once sync.Once
	url  string
	err  error
	skip string
}

// engineURL returns the base URL of the test engine, starting the shared
// chlocal process on first use.
func engineURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	shared.once.Do(func() {
		if os.Getenv(EnvLib) == "" {
			shared.skip = "no ClickHouse engine: set " + EnvLib + " to libchdb.so (make chdb) or " + EnvURL + " to a server URL"
			return
		}
		bin, err := buildBinary()
		if err != nil {
			shared.err = err
			return
		}
		p, err := startProcess(bin, "127.0.0.1:0", "")
		if err != nil {
			shared.err = err
			return
		}
		shared.url = "http://" + p.addr
		// The process is never stopped explicitly: Pdeathsig ends it with
		// the test binary.
	})
	if shared.skip != "" {
		skipOrFail(t, shared.skip)
	}
	if shared.err != nil {
		t.Fatalf("chtest: %v", shared.err)
	}
	return shared.url
}

// LibPath returns CHDB_LIB_PATH, for tests that load chDB themselves; without it the test
// is skipped, or fails under CI=true.
func LibPath(t testing.TB) string {
	t.Helper()
	lib := os.Getenv(EnvLib)
	if lib == "" {
		skipOrFail(t, "no chDB library: set "+EnvLib+" to libchdb.so (make chdb)")
	}
	return lib
}

func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("chtest: %s (CI=true: a missing engine fails)", msg)
	}
	t.Skip("chtest: " + msg)
}

var built struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of a chlocal binary built once per test binary.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	return bin
}

// buildBinary builds cmd/chlocal once per test binary. Binaries are kept in
// one directory under the temporary directory, named by content hash, so
// that repeated test runs do not leave a new 11 MB file each.
func buildBinary() (string, error) {
	built.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			built.err = err
			return
		}
		dir := filepath.Join(os.TempDir(), "hunt-runner-chtest")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			built.err = err
			return
		}
		tmp, err := os.CreateTemp(dir, "build-*")
		if err != nil {
			built.err = err
			return
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		cmd := exec.Command("go", "build", "-o", tmp.Name(), "./cmd/chlocal")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build chlocal: %w\n%s", err, out)
			return
		}
		b, err := os.ReadFile(tmp.Name())
		if err != nil {
			built.err = err
			return
		}
		sum := sha256.Sum256(b)
		bin := filepath.Join(dir, "chlocal-"+hex.EncodeToString(sum[:8]))
		// Same name, same content: a concurrent rename by another test
		// binary is harmless.
		if err := os.Rename(tmp.Name(), bin); err != nil {
			built.err = err
			return
		}
		built.path = bin
	})
	return built.path, built.err
}

// moduleRoot finds the hunt-runner module from this source file, so that it
// works whatever the test's working directory is.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if ok {
		dir := filepath.Join(filepath.Dir(file), "..", "..")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("find module root: not inside the hunt-runner module")
	}
	return filepath.Dir(gomod), nil
}

// Queries returns the number of SQL requests a chlocal server has served
// (GET /chlocal/stats), to count round trips.
func Queries(t testing.TB, serverURL string) int64 {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("chtest: parse %s: %v", redact(serverURL), err)
	}
	resp, err := http.Get("http://" + u.Host + "/chlocal/stats")
	if err != nil {
		t.Fatalf("chtest: stats: %v", err)
	}
	defer resp.Body.Close()
	var st struct {
		Queries int64 `json:"queries"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chtest: stats: %s (only chlocal serves /chlocal/stats)", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("chtest: stats: %v", err)
	}
	return st.Queries
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redact drops a password from a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// waitReady polls /ping until it answers or d passes.
func waitReady(addr string, d time.Duration) error {
	var err error
	if Poll(d, func() bool {
		var resp *http.Response
		if resp, err = http.Get("http://" + addr + "/ping"); err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && string(body) == "Ok.\n" {
			return true
		}
		err = fmt.Errorf("ping: %s %q", resp.Status, body)
		return false
	}) {
		return nil
	}
	return fmt.Errorf("chlocal at %s not ready: %w", addr, err)
}

// readListening reads the "listening on ADDR (…)" line chlocal prints first.
func readListening(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read chlocal's first line: %w", err)
	}
	rest, ok := strings.CutPrefix(line, "listening on ")
	if !ok {
		return "", fmt.Errorf("unexpected first line from chlocal: %q", line)
	}
	addr, _, _ := strings.Cut(rest, " ")
	return strings.TrimSpace(addr), nil
}

// replicatedConn turns the plain MergeTree engines of a test's own fixture tables into their
// Replicated forms under EnvCluster: in a Replicated database a plain table exists on every
// replica but its rows stay where they were written, so a read through a load balancer would
// miss them.
type replicatedConn struct{ driver.Conn }

func (c replicatedConn) Exec(ctx context.Context, query string, args ...any) error {
	return c.Conn.Exec(ctx, replicateEngines(query), args...)
}

var plainEngineRe = regexp.MustCompile(`(?i)\bENGINE\s*=\s*(Replacing|Summing|Aggregating|Collapsing|VersionedCollapsing)?MergeTree\b`)

func replicateEngines(sql string) string {
	return plainEngineRe.ReplaceAllString(sql, "ENGINE = Replicated${1}MergeTree")
}

// cluster returns EnvCluster when a server is named too (chlocal has no clusters).
func cluster() string {
	if os.Getenv(EnvURL) == "" {
		return ""
	}
	return os.Getenv(EnvCluster)
}
