package configsrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// countingConn is the real connection, counting the EXPLAIN AST statements sent through it:
// how many hunts (plus the wrapper's reference) the server was asked to parse. With keep set it
// also keeps them.
type countingConn struct {
	driver.Conn
	explains atomic.Int64
	keep     bool
	mu       sync.Mutex
	sent     []string
}

func (c *countingConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	if strings.HasPrefix(q, explainPrefix) {
		c.explains.Add(1)
		if c.keep {
			c.mu.Lock()
			c.sent = append(c.sent, q)
			c.mu.Unlock()
		}
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

// sameVerdict: the same acceptance, or the same refusal (message and every position), or the
// same failure to check.
func sameVerdict(a, b error) bool {
	var ra, rb *RefusedError
	switch {
	case a == nil || b == nil:
		return a == nil && b == nil
	case errors.As(a, &ra) != errors.As(b, &rb):
		return false
	case ra != nil:
		return *ra == *rb
	default:
		return a.Error() == b.Error()
	}
}

// batchPool is every query the server-check tests judge, good and refused, as hunts: the good
// corpus, the hostile corpus, the allowlist's and CheckWithServer's cases, exceptions with
// where: expressions refused and allowed, and queries aimed at the batch statement itself.
func batchPool(t *testing.T) []hunt.Hunt {
	t.Helper()
	const w = windowClause
	head, tail, _ := strings.Cut(FindingsQuery("\x00"), "\x00")
	var hunts []hunt.Hunt
	add := func(h hunt.Hunt) {
		h.ID = fmt.Sprintf("p%d", len(hunts))
		h.File = h.ID + ".yaml"
		h.Hash = h.ComputeHash()
		hunts = append(hunts, h)
	}
	for _, h := range loadCorpus(t).Hunts {
		add(h)
	}
	for _, f := range hostileFiles(t) {
		add(hunt.Hunt{Query: hostileQuery(t, f)})
	}
	for _, q := range []string{
		"SELECT countIf(x > 1), sumArrayIf(a, b), uniqState(u) FROM sample.t" + w,
		"SELECT row_number() OVER (PARTITION BY u ORDER BY ts) FROM sample.t" + w,
		"SELECT number FROM numbers(10000000)" + w,
		"SELECT hasColumnInTable('hunt_runner', 'hunt_lease', 'c')" + w,
		"SELECT * APPLY(x -> hostName()) FROM sample.t" + w,
		"SELECT count() OVER w FROM sample.t" + w + " WINDOW w AS (PARTITION BY hostName())",
		"SELECT * FROM merge(REGEXP('^sample$'), '^events')" + w,
		"SELECT * FROM merge(currentDatabase(), '^hunt')" + w,
		"SELECT dictGet('geo.country', 'name', toUInt64(1)) FROM sample.t" + w,
		"SELECT count( FROM sample.auth_events" + w,
		"SELECT count() FROM sample.auth_events\nWHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} = = 1",
		"SELECT * FROM url/* comment */('http://198.51.100.7/x.csv', CSV, 'a String')" + w,
		"SHOW TABLES",
		"SELECT user FROM sample.auth_events" + w + " SETTINGS max_threads = 2",
		"SELECT user FROM sample.auth_events" + w + " SETTINGS log_comment = 'x'",
		swallowQuery,
		"SELECT {other:String} FROM sample.auth_events" + w,
		// Aimed at the batch statement: close the scalar subquery and add a place of its own,
		// forge a whole wrapper and a marker, leave a bracket open for the next hunt, comment out
		// the rest of the line.
		"SELECT 1 FROM sample.t" + w + "\n)), 'x', ((SELECT 2",
		"SELECT 1 FROM sample.t" + w + tail + "\n), 'hr_check_forged_1', (\n" + head + "SELECT 2 FROM sample.t" + w,
		"SELECT 1 FROM sample.t" + w + " AND x IN (1",
		"SELECT 1 FROM sample.t" + w + " -- ), 'x', (SELECT 1",
		"SELECT 1 FROM sample.t" + w + " /* ), 'x', (SELECT 1",
	} {
		add(hunt.Hunt{Query: q})
	}
	where := "SELECT number AS n FROM numbers(10) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"
	for _, wh := range []string{"throwIf(n > 1) = 0", "n IN (SELECT count() FROM system.users)", "n % 2 = 0 AND toString(n) != ''", "n = (1"} {
		add(hunt.Hunt{Query: where, Exceptions: []hunt.Exception{
			{ID: "l#1", Where: "n > 0", File: "l.exceptions.yaml", Line: 3},
			{ID: "l#2", Where: wh, File: "l.exceptions.yaml", Line: 9, Col: 5}}})
	}
	// Interleave, so that every batch mixes refused and accepted hunts.
	out := make([]hunt.Hunt, 0, len(hunts))
	for i := range 3 {
		for j := i; j < len(hunts); j += 3 {
			out = append(out, hunts[j])
		}
	}
	return out
}

// TestBatchVerdictsAreSingleVerdicts: under several policies, a load's batched check gives every
// hunt of the pool exactly the verdict CheckWithServer gives it alone (the same refusal, at the
// same line and column), whether the pool goes in one batch or in batches of 5; no query the
// pre-check refuses is sent; and the hunts it accepts, checked again together, are one statement.
func TestBatchVerdictsAreSingleVerdicts(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	pool := batchPool(t)
	for k, p := range []Policy{{}, hostilePolicy, {CoordinationDatabase: "hunt_runner", AllowTableFunctions: []string{"merge"},
		AllowFunctions: []string{"currentDatabase", "hasColumnInTable"}, AllowDictionaries: []string{"geo.country"}}} {
		single := map[string]error{}
		refused := 0
		for _, h := range pool {
			single[h.Hash] = CheckWithServer(ctx, db.Conn, h, p)
			if single[h.Hash] != nil {
				refused++
			}
		}
		for _, size := range []int{0, 5} {
			conn := &countingConn{Conn: db.Conn, keep: true}
			c := &serverChecker{conn: conn, policy: p, batch: size}
			got := c.verdicts(ctx, pool, nil, nil, slog.New(slog.DiscardHandler))
			for _, h := range pool {
				if !sameVerdict(got[h.Hash], single[h.Hash]) {
					t.Errorf("policy %+v, batches of %d: %s\n%s\nbatched: %v\nalone:   %v", p, size, h.ID, h.Query, got[h.Hash], single[h.Hash])
				}
			}
			t.Logf("policy %d, batches of %d: %d hunts (%d refused), %d EXPLAINs", k, size, len(pool), refused, conn.explains.Load())
			// What the server could not print on one line is never sent: its name could forge
			// lines of another hunt's tree.
			for _, h := range pool {
				if identifiersReadable(h.Query) == nil {
					continue
				}
				for _, q := range conn.sent {
					if strings.Contains(q, h.Query) {
						t.Errorf("%s, which the pre-check refuses, was sent to the server:\n%s", h.ID, h.Query)
						break
					}
				}
			}
		}
		var accepted []hunt.Hunt
		for _, h := range pool {
			if single[h.Hash] == nil {
				accepted = append(accepted, h)
			}
		}
		conn := &countingConn{Conn: db.Conn}
		c := &serverChecker{conn: conn, policy: p}
		got := c.verdicts(ctx, accepted, nil, nil, slog.New(slog.DiscardHandler))
		for _, h := range accepted {
			if got[h.Hash] != nil {
				t.Errorf("policy %d: %s refused among accepted hunts: %v", k, h.ID, got[h.Hash])
			}
		}
		// The wrapper's reference, then the where: checks and queries in one statement.
		if n := conn.explains.Load(); n != 2 {
			t.Errorf("policy %d: %d accepted hunts asked %d EXPLAINs, want 2", k, len(accepted), n)
		}
		if refused < 10 || len(accepted) < 10 {
			t.Errorf("policy %d: %d refused, %d accepted: the pool does not mix both", k, refused, len(accepted))
		}
	}
}

// TestBatchMarkersHoldAgainstShiftedHunts: hunts that move the batch's boundaries, as they could
// if the server's lexer read a comment or string where the pre-check (identifiersReadable) did
// not: one forges the end of its wrapper, a marker and a new wrapper, the next opens a comment the
// one after closes. The count of places is then right, and without the markers each would be
// judged on another's text and accepted. With them, every verdict is the hunt's own, alone, and
// the neighbours are accepted. checkBatch is called directly, as if the pre-check had passed them.
func TestBatchMarkersHoldAgainstShiftedHunts(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	ref := mustReferenceTree(t, ctx, db.Conn)
	const w = windowClause
	head, tail, _ := strings.Cut(FindingsQuery("\x00"), "\x00")
	good := "SELECT user FROM sample.auth_events" + w
	queries := []string{
		good,
		"SELECT 1" + tail + "\n), 'hr_check_forged', (\n" + head + "SELECT 2",
		"SELECT 3 /*",
		"*/, 4",
		good + " AND 1 = 1",
	}
	c := &serverChecker{conn: db.Conn}
	got := c.checkBatch(ctx, queries, ref, checkBatchHints)
	batchMatchesAlone(t, ctx, db.Conn, queries, got, ref)
}

// TestCutChildren: the children count is read exactly as the pattern the server's format
// follows, " (children N)" at the end of the line, and nothing else is taken for one.
func TestCutChildren(t *testing.T) {
	re := regexp.MustCompile(` \(children ([0-9]+)\)$`)
	for _, line := range []string{
		"SelectQuery (children 6)", "Literal UInt64_1", "Function f (alias a) (children 1)",
		"Identifier x (alias `a (children 2)`)", "Literal ' (children 3)'", "X (children )", "X (children 1a)",
		"X (children 2) (children 3)", "X(children 1)", "X (children 99999999999999999999)", "(children 1)", "",
	} {
		wantLabel, want := line, 0
		if m := re.FindStringSubmatchIndex(line); m != nil {
			want, _ = strconv.Atoi(line[m[2]:m[3]])
			wantLabel = line[:m[0]]
		}
		if label, n := cutChildren(line); label != wantLabel || n != want {
			t.Errorf("%q: %q %d, want %q %d", line, label, n, wantLabel, want)
		}
	}
}

// TestBatchServerUnreachableIsNoVerdict: a batch the server cannot be reached for gives each of
// its queries the failure a single check gives, which is no refusal (the hunts are checked again
// on the next reload), and it is not cut in two and asked again.
func TestBatchServerUnreachableIsNoVerdict(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	ctx := context.Background()
	ref := mustReferenceTree(t, ctx, db.Conn)
	srv.Stop()
	defer srv.Start() // for the database's cleanup
	conn := &countingConn{Conn: db.Conn}
	c := &serverChecker{conn: conn}
	queries := []string{"SELECT 1", "SELECT 2", "SELECT 3", "SELECT 4"}
	for i, err := range c.checkBatch(ctx, queries, ref, checkBatchHints) {
		_, alone := checkQueryWithServer(ctx, db.Conn, queries[i], Policy{}, ref)
		if errors.Is(err, ErrQueryRefused) || err == nil || !strings.HasPrefix(err.Error(), "ask the server to parse the query: ") ||
			!strings.HasPrefix(alone.Error(), "ask the server to parse the query: ") {
			t.Errorf("%s: in the batch %v, alone %v; want no verdict", queries[i], err, alone)
		}
	}
	if n := conn.explains.Load(); n != 1 {
		t.Errorf("an unreachable server was asked %d times for one batch", n)
	}
}

// TestBatchParseErrorTakesOneQueryOut: a syntax error in one hunt of a batch costs the batch one
// request more and that hunt its own, not a request for every halving; the neighbours are
// accepted. An error that lands in another query's text (here a comment one query opens, as if
// the pre-check had missed it, ends in the next one's string) still leaves every query its own
// verdict, in a bounded number of requests.
func TestBatchParseErrorTakesOneQueryOut(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	ref := mustReferenceTree(t, ctx, db.Conn)
	const w = windowClause
	for _, tc := range []struct {
		bad      []string // from query 12 on
		requests int64
	}{
		{[]string{"SELECT count( FROM sample.auth_events" + w}, 3}, // the batch, the bad hunt alone, the rest
		{[]string{"SELECT 3 /*", "SELECT '*/' AS a, 4"}, 3 + 2*checkBatchHints + 2*5},
	} {
		queries := make([]string, 31)
		for i := range queries {
			queries[i] = fmt.Sprintf("SELECT user, %d AS n FROM sample.auth_events%s", i, w)
		}
		copy(queries[12:], tc.bad)
		conn := &countingConn{Conn: db.Conn}
		got := (&serverChecker{conn: conn}).checkBatch(ctx, queries, ref, checkBatchHints)
		for i, q := range queries {
			_, alone := checkQueryWithServer(ctx, db.Conn, q, Policy{}, ref)
			if !sameVerdict(got[i], alone) || (alone == nil) != (i != 12) {
				t.Errorf("%q in the batch: %v, alone: %v", q, got[i], alone)
			}
		}
		if n := conn.explains.Load(); n > tc.requests {
			t.Errorf("%q: %d EXPLAINs, want at most %d", tc.bad, n, tc.requests)
		}
		t.Logf("%q: %d EXPLAINs", tc.bad, conn.explains.Load())
	}
}

// TestBatchServerExceptionIsNotTheHunts: a batch the server answers with an exception of its own
// (memory, here injected once) is no verdict on its hunts: it is asked again in parts, and every
// hunt is accepted. A late answer (held a second) changes nothing either.
func TestBatchServerExceptionIsNotTheHunts(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	ctx := context.Background()
	const w = windowClause
	var hunts []hunt.Hunt
	for i := range 6 {
		h := hunt.Hunt{ID: fmt.Sprintf("h%d", i), Query: fmt.Sprintf("SELECT user, %d AS n FROM sample.auth_events%s", i, w)}
		h.Hash = h.ComputeHash()
		hunts = append(hunts, h)
	}
	srv.SetFaults(t,
		ctl.FaultRule{Name: "batch-oom", Kind: ctl.KindRead, Match: `hr_check_`, Times: 1, Effect: ctl.FailBefore, Code: 241,
			Message: "Code: 241. DB::Exception: Memory limit (total) exceeded. (MEMORY_LIMIT_EXCEEDED)"},
		ctl.FaultRule{Name: "batch-late", Kind: ctl.KindRead, Match: `hr_check_`, Every: 2, Times: 1, Effect: ctl.DelayAnswer, Delay: time.Second})
	got := (&serverChecker{conn: db.Conn}).verdicts(ctx, hunts, nil, nil, slog.New(slog.DiscardHandler))
	for _, h := range hunts {
		if got[h.Hash] != nil {
			t.Errorf("%s: %v", h.ID, got[h.Hash])
		}
	}
	for _, r := range srv.FaultStats(t) {
		if r.Fired != 1 {
			t.Errorf("rule %s fired %d times, want 1", r.Name, r.Fired)
		}
	}
}

// windowClause is the time filter a test hunt's query needs to pass the check.
const windowClause = " WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}"

// mustReferenceTree is the wrapper's reference tree as the server parses it (referenceTree).
func mustReferenceTree(t *testing.T, ctx context.Context, conn driver.Conn) *astNode {
	t.Helper()
	ref, err := referenceTree(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestBatchWrapperKeepsFindingsText: a batch parses each query in batchFindingsQuery, which must
// be FindingsQuery's own text from the FROM that opens the query's subquery to the end, the
// query included, behind one select list that ends as FindingsQuery's does (in AS hr_before) and
// holds none of the words a SELECT's later clauses are checked against (DISTINCT, ALL, TOP).
// That is the premise of judging a hunt there (batchFindingsQuery says why).
func TestBatchWrapperKeepsFindingsText(t *testing.T) {
	for _, q := range []string{
		"SELECT 1",
		"  SELECT user FROM sample.auth_events" + windowClause + " ;\n ",
		"SELECT 1 -- a comment\n",
		"SELECT 1 FROM sample.t" + windowClause + "\n)), 'x', ((SELECT 2",
		swallowQuery,
	} {
		full, batch := FindingsQuery(q), batchFindingsQuery(q)
		at := strings.Index(full, TrimQuery(q))
		from := strings.LastIndex(full[:at], "\nFROM (\n")
		bfrom := strings.Index(batch, "\nFROM (\n")
		if from < 0 || bfrom < 0 || full[from:] != batch[bfrom:] {
			t.Errorf("%q: the batch wrapper's text from FROM on is not FindingsQuery's:\n%s\nwant the end of\n%s", q, batch, full)
			continue
		}
		head := batch[:bfrom]
		if !strings.HasSuffix(head, " AS hr_before") || !strings.HasSuffix(full[:from], " AS hr_before") {
			t.Errorf("%q: the select lists do not both end in AS hr_before:\n%s\n%s", q, head, full[:from])
		}
		if strings.Count(head, "SELECT") != 1 || !strings.HasPrefix(head, "SELECT ") || regexp.MustCompile(`(?i)\b(DISTINCT|ALL|TOP|FROM)\b`).MatchString(head) {
			t.Errorf("%q: the batch wrapper's head is not one plain select list: %q", q, head)
		}
	}
}

// TestBatchSkeletonMustParseAsTheWrapper: a batch is trusted only if its skeleton (the batch
// wrapper around a trivial query) parses from FROM on as the full wrapper does. With a batch
// wrapper whose end differs from FindingsQuery's, every query of the batch is asked alone, in
// FindingsQuery; with the real one, the batch is one request, and hunts that forge the batch
// wrapper and a marker, or open a comment the next one closes, still get their verdict alone.
func TestBatchSkeletonMustParseAsTheWrapper(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	ref := mustReferenceTree(t, ctx, db.Conn)
	const w = windowClause
	var good []string
	for i := range 4 {
		good = append(good, fmt.Sprintf("SELECT user, %d AS n FROM sample.auth_events%s", i, w))
	}
	cut := func(q string) string {
		return "SELECT 0 AS hr_before\nFROM (\n" + TrimQuery(q) + "\n)\nLIMIT {" + ParamLimit + ":UInt64}"
	}
	for _, tc := range []struct {
		name     string
		wrap     func(string) string
		requests int64
	}{{"a wrapper without QUALIFY and ORDER BY", cut, 1 + 4}, {"the batch wrapper", nil, 1}} {
		conn := &countingConn{Conn: db.Conn}
		got := (&serverChecker{conn: conn, batchWrap: tc.wrap}).checkBatch(ctx, good, ref, checkBatchHints)
		for i, err := range got {
			if err != nil {
				t.Errorf("%s: %s: %v", tc.name, good[i], err)
			}
		}
		if n := conn.explains.Load(); n != tc.requests {
			t.Errorf("%s: %d EXPLAINs, want %d", tc.name, n, tc.requests)
		}
	}
	head, tail, _ := strings.Cut(batchFindingsQuery("\x00"), "\x00")
	queries := []string{
		good[0],
		"SELECT 1" + tail + "\n), 'hr_check_forged', (\n" + head + "SELECT 2",
		"SELECT 3 /*",
		"*/, 4",
		good[1],
	}
	got := (&serverChecker{conn: db.Conn}).checkBatch(ctx, queries, ref, checkBatchHints)
	batchMatchesAlone(t, ctx, db.Conn, queries, got, ref)
}

// batchMatchesAlone checks that each query's verdict in a batch (got) is the one it gets checked
// alone, and the premise of the callers' lists: only the first and last queries pass.
func batchMatchesAlone(t *testing.T, ctx context.Context, conn driver.Conn, queries []string, got []error, ref *astNode) {
	t.Helper()
	for i, q := range queries {
		_, alone := checkQueryWithServer(ctx, conn, q, Policy{}, ref)
		if (i == 0 || i == len(queries)-1) != (alone == nil) {
			t.Fatalf("%q alone: %v", q, alone)
		}
		if !sameVerdict(got[i], alone) {
			t.Errorf("%q\nin the batch: %v\nalone:        %v", q, got[i], alone)
		}
	}
}
