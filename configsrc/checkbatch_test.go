package configsrc

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// countingConn is the real connection, counting the EXPLAIN AST statements sent through it:
// how many hunts (plus the wrapper's reference) the server was asked to parse.
type countingConn struct {
	driver.Conn
	explains atomic.Int64
}

func (c *countingConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	if strings.HasPrefix(q, explainPrefix) {
		c.explains.Add(1)
	}
	return c.Conn.Query(ctx, q, args...)
}

func cachedLoad(t *testing.T, conn driver.Conn, st *store.Store, dir string, p Policy) *Set {
	t.Helper()
	src, err := NewDir(dir, Options{Settle: -1, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	set, _, err := NewLoader(src, time.Hour, nil, WithServerCheck(conn, p), WithCheckCache(st)).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestCheckCacheSkipsAcceptedRevisions: a second loader (a restart) parses none of the hunts
// the first accepted under the same scope, and parses again a hunt whose file changed.
func TestCheckCacheSkipsAcceptedRevisions(t *testing.T) {
	db := chtest.NewWithSchema(t)
	st := store.New(db.Conn, db.Name)
	dir := t.TempDir()
	for _, f := range []string{"a", "b", "c"} {
		writeFile(t, filepath.Join(dir, f+".yaml"), huntYAML("5m", f))
	}
	cold := &countingConn{Conn: db.Conn}
	if set := cachedLoad(t, cold, st, dir, Policy{}); ids(set) != "a,b,c" || len(set.Problems) != 0 {
		t.Fatalf("cold start: %s %v", ids(set), set.Problems)
	}
	if n := cold.explains.Load(); n != 2 { // the wrapper once, then one batch of the three
		t.Errorf("cold start asked %d EXPLAINs, want 2", n)
	}
	warm := &countingConn{Conn: db.Conn}
	if set := cachedLoad(t, warm, st, dir, Policy{}); ids(set) != "a,b,c" || len(set.Problems) != 0 {
		t.Fatalf("warm start: %s %v", ids(set), set.Problems)
	}
	if n := warm.explains.Load(); n != 0 {
		t.Errorf("warm start asked %d EXPLAINs, want 0", n)
	}
	writeFile(t, filepath.Join(dir, "b.yaml"), huntYAML("5m", "b2"))
	changed := &countingConn{Conn: db.Conn}
	if set := cachedLoad(t, changed, st, dir, Policy{}); ids(set) != "a,b,c" {
		t.Fatalf("after a change: %s %v", ids(set), set.Problems)
	}
	if n := changed.explains.Load(); n != 2 {
		t.Errorf("a changed hunt asked %d EXPLAINs, want 2 (wrapper and b)", n)
	}
}

// TestCheckCacheNeverPassesWhatTheCheckRefuses: a "passed" recorded under one policy does not
// let the hunt through under a stricter one, and a hunt changed into one the server refuses is
// refused although its old revision passed.
func TestCheckCacheNeverPassesWhatTheCheckRefuses(t *testing.T) {
	db := chtest.NewWithSchema(t)
	st := store.New(db.Conn, db.Name)
	dir := t.TempDir()
	throwing := "interval: 5m\nquery: |\n  SELECT user, throwIf(0) AS x FROM sample.auth_events\n  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"
	writeFile(t, filepath.Join(dir, "a.yaml"), throwing)
	lax := Policy{AllowFunctions: []string{"throwif"}}
	if set := cachedLoad(t, db.Conn, st, dir, lax); ids(set) != "a" {
		t.Fatalf("with throwIf allowed: %s %v", ids(set), set.Problems)
	}
	// The offline check refuses throwIf too; skip it to show the server check's own guard.
	src, err := NewDir(dir, Options{Settle: -1, Policy: lax})
	if err != nil {
		t.Fatal(err)
	}
	strict := NewLoader(src, time.Hour, nil, WithServerCheck(db.Conn, Policy{}), WithCheckCache(st))
	set, _, err := strict.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Hunts) != 0 || len(set.Problems) != 1 || !strings.Contains(set.Problems[0].Message, "throwIf") {
		t.Errorf("a pass under another policy let a refused hunt run: hunts %s, problems %v", ids(set), set.Problems)
	}

	writeFile(t, filepath.Join(dir, "b.yaml"), huntYAML("5m", "b"))
	if set := cachedLoad(t, db.Conn, st, dir, Policy{}); !strings.Contains(ids(set), "b") {
		t.Fatalf("b: %s %v", ids(set), set.Problems)
	}
	serverOnly := "interval: 5m\nquery: |\n  SELECT count() + FROM sample.auth_events\n  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"
	writeFile(t, filepath.Join(dir, "b.yaml"), serverOnly)
	if set := cachedLoad(t, db.Conn, st, dir, Policy{}); strings.Contains(ids(set), "b") {
		t.Errorf("b, changed into a query the server refuses, was loaded on its old revision's pass")
	}
}

// TestCheckScopeCoversPolicyAndServer: every input of a verdict other than the hunt moves the
// scope.
func TestCheckScopeCoversPolicyAndServer(t *testing.T) {
	base := CheckScope("26.5.3", Policy{})
	for name, other := range map[string]string{
		"server version":        CheckScope("26.6.1", Policy{}),
		"allowed functions":     CheckScope("26.5.3", Policy{AllowFunctions: []string{"throwif"}}),
		"allowed tables":        CheckScope("26.5.3", Policy{AllowTableFunctions: []string{"merge"}}),
		"allowed dictionaries":  CheckScope("26.5.3", Policy{AllowDictionaries: []string{"d.x"}}),
		"system tables":         CheckScope("26.5.3", Policy{AllowSystem: true}),
		"coordination database": CheckScope("26.5.3", Policy{CoordinationDatabase: "hunt_runner"}),
	} {
		if other == base {
			t.Errorf("the scope ignores the %s", name)
		}
	}
	if CheckScope("26.5.3", Policy{}) != base {
		t.Error("the scope is not deterministic")
	}
}
