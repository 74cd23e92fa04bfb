package configsrc

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

const exceptionHunt = `interval: 5m
query: |
  SELECT user, src_ip FROM sample.auth_events
  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}
exceptions_from: [scanners]
exceptions:
  - match: {user: svc}
    owner: o@corp
    reason: r
`

func loadDir(t *testing.T, dir string, p Policy) *Set {
	t.Helper()
	src, err := NewDir(dir, Options{Settle: -1, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	return mustLoad(t, src)
}

// A shared list is read by name and never loaded as a hunt; until: is required unless the
// operator allows permanent exceptions; a changed shared list is a new revision of the hunts
// that use it.
func TestExceptionListsAndPermanentExceptions(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "h.yaml"), exceptionHunt)
	list := "name: scanners\nexceptions:\n  - {match: {src_ip: 10.0.0.0/8}, until: 2027-01-31, owner: o, reason: r}\n"
	writeFile(t, filepath.Join(dir, "shared", "scanners.exceptions.yaml"), list)

	strict := loadDir(t, dir, Policy{})
	if len(strict.Hunts) != 0 || len(strict.Problems) != 1 || !strings.Contains(strict.Problems[0].Message, "no until") ||
		strict.Problems[0].File != "h.yaml" || strict.Problems[0].Line != 7 {
		t.Fatalf("without until: hunts %d, problems %v; want h.yaml:7 refused for its missing until", len(strict.Hunts), strict.Problems)
	}
	set := loadDir(t, dir, Policy{AllowPermanentExceptions: true})
	if len(set.Problems) != 0 || len(set.Hunts) != 1 {
		t.Fatalf("allowed permanent: hunts %d, problems %v; want the one hunt (the list is no hunt)", len(set.Hunts), set.Problems)
	}
	h := set.Hunts[0]
	if len(h.Exceptions) != 2 || h.Exceptions[0].ID != "exceptions#1" || !h.Exceptions[0].Until.IsZero() ||
		h.Exceptions[1].ID != "scanners#1" || h.Exceptions[1].List != "scanners" || h.Exceptions[1].Match[0].Ranges[0] != "10.0.0.0/8" ||
		!h.Exceptions[1].Until.Equal(time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("exceptions %+v", h.Exceptions)
	}
	if !h.Exceptions[1].LiveAt(time.Date(2027, 1, 30, 23, 59, 59, 0, time.UTC)) || h.Exceptions[1].LiveAt(time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)) {
		t.Error("an exception applies before its until and not from it")
	}

	writeFile(t, filepath.Join(dir, "shared", "scanners.exceptions.yaml"), strings.Replace(list, "10.0.0.0/8", "10.1.0.0/16", 1))
	if again := loadDir(t, dir, Policy{AllowPermanentExceptions: true}); again.Hunts[0].Hash == h.Hash {
		t.Error("a changed shared list kept the hunt's revision")
	}
	without := hunt.Hunt{ID: "x", Query: "SELECT 1"}
	with := without
	with.Exceptions = h.Exceptions
	if without.ComputeHash() == with.ComputeHash() {
		t.Error("exceptions are not part of the revision")
	}
}

// The containment of where: on the server: an expression the offline check cannot see into is
// still held to the hunt SQL rules, and a refusal is placed at the exception's item.
func TestExceptionWhereServerCheck(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	base := hunt.Hunt{ID: "x", File: "x.yaml", Query: "SELECT number AS n FROM numbers(10) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	for _, tc := range []struct{ where, want string }{
		{"throwIf(n > 1) = 0", "throwIf"},
		{"n IN (SELECT count() FROM system.users)", "system tables"},
		{"n IN (SELECT 1 FROM url('http://198.51.100.7/x', CSV, 'a UInt8'))", "url()"},
	} {
		h := base
		h.Exceptions = []hunt.Exception{{ID: "exceptions#1", Where: tc.where, File: "x.yaml", Line: 9,
			Match: []hunt.ExceptionMatch{{Column: "n", Values: []string{"1"}}}}}
		err := CheckWithServer(ctx, db.Conn, h, Policy{})
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(re.Msg, tc.want) || re.FileLine != 9 || !strings.HasPrefix(re.Msg, "exception exceptions#1: where:") {
			t.Errorf("where %q: %v (%+v), want a refusal naming %q at the item", tc.where, err, re, tc.want)
		}
	}
	h := base
	h.Exceptions = []hunt.Exception{{ID: "exceptions#1", Where: "n % 2 = 0 AND toString(n) != ''"}}
	if err := CheckWithServer(ctx, db.Conn, h, Policy{}); err != nil {
		t.Errorf("an allowed where: refused: %v", err)
	}
	// The offline check refuses the same function before any server is asked.
	if issues := checkWhere("throwIf(n > 1) = 0", Policy{}); len(issues) == 0 {
		t.Error("offline: throwIf in where: accepted")
	}
	if issues := checkWhere("throwIf(n > 1) = 0", Policy{AllowFunctions: []string{"throwif"}}); len(issues) != 0 {
		t.Errorf("offline: an allowed function refused: %v", issues)
	}
}

// validate's name lookup: a match: column the query cannot output (seen through a *), and an IP
// range on a column whose type holds no address, are refused at the exception's line.
func TestExceptionColumnsResolveWithServer(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "CREATE TABLE auth (ts DateTime, user String, ip IPv4, port UInt16) ENGINE = MergeTree ORDER BY ts"); err != nil {
		t.Fatal(err)
	}
	q := "SELECT * FROM auth WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}"
	for _, tc := range []struct {
		m    hunt.ExceptionMatch
		want string
	}{
		{hunt.ExceptionMatch{Column: "usr", Values: []string{"a"}, Line: 12}, "match column usr is not an output column"},
		{hunt.ExceptionMatch{Column: "port", Ranges: []string{"10.0.0.0/8"}, Line: 12}, "the column is UInt16"},
		{hunt.ExceptionMatch{Column: "ip", Ranges: []string{"10.0.0.0/8"}, Line: 12}, ""},
		{hunt.ExceptionMatch{Column: "user", Ranges: []string{"10.0.0.0/8"}, Line: 12}, ""},
	} {
		h := hunt.Hunt{ID: "x", File: "x.yaml", Query: q, Exceptions: []hunt.Exception{{ID: "l#1", File: "l.exceptions.yaml", Line: 3, Match: []hunt.ExceptionMatch{tc.m}}}}
		err := ResolveWithServer(ctx, db.Conn, h)
		var re *RefusedError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.m.Column, err)
		case tc.want != "" && (!errors.As(err, &re) || !strings.Contains(re.Msg, tc.want) || re.File != "l.exceptions.yaml" || re.FileLine != 12):
			t.Errorf("%s: %v (%+v), want %q at l.exceptions.yaml:12", tc.m.Column, err, re, tc.want)
		}
	}
}

// ExceptionsQuery on the engine: the excluded rows are counted per exception and never sent
// (one row with an empty document carries the counts, first), the findings are counted as if
// the excluded rows did not exist, and a result excluded whole still reports its hits.
func TestExceptionsQueryOnTheEngine(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	q := "SELECT number AS n, toString(number % 3) AS k FROM numbers(30) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"
	run := func(live []hunt.Exception, limit string) (docs []string, excluded int, total uint64, hits []uint64) {
		t.Helper()
		stmt, extra := ExceptionsQuery(q, live)
		params := clickhouse.Parameters{"window_start": "946684800", "window_end": "946684801", ParamLimit: limit,
			ParamMaxFindingBytes: "65536", ParamMaxRunBytes: "1048576", ParamRowBytes: "0"}
		for k, v := range extra {
			params[k] = v
		}
		rows, err := db.Conn.Query(clickhouse.Context(ctx, clickhouse.WithParameters(params)), stmt)
		if err != nil {
			t.Fatalf("%v\n%s", err, stmt)
		}
		defer rows.Close()
		for rows.Next() {
			var doc string
			var truncated, before uint64
			var exc uint16
			if err := rows.Scan(&doc, &total, &truncated, &before, &exc, &hits); err != nil {
				t.Fatal(err)
			}
			if exc > 0 {
				if doc != "" || len(docs) > 0 {
					t.Errorf("the excluded rows' row has document %q after %d findings; want it empty and first", doc, len(docs))
				}
				excluded++
				continue
			}
			docs = append(docs, doc)
		}
		return docs, excluded, total, hits
	}
	live := []hunt.Exception{
		{ID: "k0", Match: []hunt.ExceptionMatch{{Column: "k", Values: []string{"0"}}}},
		{ID: "late", Match: []hunt.ExceptionMatch{{Column: "n", Values: []string{"25", "26", "27", "28", "29"}}}, Where: "n >= 25"},
	}
	docs, excluded, total, hits := run(live, "7")
	if excluded != 1 || total != 16 || len(hits) != 2 || hits[0] != 10 || hits[1] != 4 || len(docs) != 6 {
		t.Fatalf("excluded rows sent %d, total %d, hits %v, findings %d; want 1, 16, [10 4], 6 (the limit less the hits row)", excluded, total, hits, len(docs))
	}
	for _, d := range docs {
		if strings.Contains(d, `"k":"0"`) || strings.Contains(d, `"n":"25"`) || strings.Contains(d, `"n":"26"`) || strings.Contains(d, `"n":"28"`) || strings.Contains(d, `"n":"29"`) {
			t.Errorf("an excluded row was sent: %s", d)
		}
	}
	// A range never matches text that is no address (the number 3 is matched by its value).
	docs, excluded, total, hits = run([]hunt.Exception{{ID: "three", Match: []hunt.ExceptionMatch{{Column: "n", Ranges: []string{"0.0.0.0/0"}, Values: []string{"3"}}}}}, "100")
	if len(docs) != 29 || excluded != 1 || total != 29 || len(hits) != 1 || hits[0] != 1 {
		t.Fatalf("one row excluded by value: findings %d, hits rows %d, total %d, hits %v", len(docs), excluded, total, hits)
	}
	docs, excluded, total, hits = run([]hunt.Exception{{ID: "all", Match: []hunt.ExceptionMatch{{Column: "k", Values: []string{"0", "1", "2"}}}, Where: "1 = 1"}}, "100")
	if len(docs) != 0 || excluded != 1 || total != 0 || len(hits) != 1 || hits[0] != 30 {
		t.Fatalf("every row excluded: findings %d, hits rows %d, total %d, hits %v; want 0, 1, 0, [30]", len(docs), excluded, total, hits)
	}
}

// Nothing of an exception is spliced into the statement but its checked where: and plain
// column names: values are parameters, and a column name the decoder would refuse (a hunt built
// by hand) makes the exception match nothing.
func TestExceptionsQueryBindsValues(t *testing.T) {
	stmt, params := ExceptionsQuery("SELECT 1 AS a", []hunt.Exception{
		{ID: "x", Match: []hunt.ExceptionMatch{{Column: "a", Values: []string{"it's'); DROP TABLE t; --"}, Ranges: []string{"10.0.0.0/8"}}}},
		{ID: "y", Match: []hunt.ExceptionMatch{{Column: "a`) OR 1 OR (`a", Values: []string{"1"}}}},
		{ID: "z", Match: []hunt.ExceptionMatch{{Column: "hr_r", Values: []string{"1"}}}},
		{ID: "w"},
	})
	if strings.Contains(stmt, "DROP") || strings.Contains(stmt, "10.0.0.0") || strings.Contains(stmt, "OR 1 OR") || strings.Contains(stmt, "`hr_r`") ||
		!strings.Contains(stmt, "multiIf((toString(`a`) IN {hr_x1_1_v:Array(String)} OR ") || !strings.Contains(stmt, "0, 2, 0, 3, 0, 4, 0)") {
		t.Fatalf("a value or a bad column name reached the statement:\n%s", stmt)
	}
	if params["hr_x1_1_v"] != `['it\'s\'); DROP TABLE t; --']` || params["hr_x1_1_r"] != `['10.0.0.0/8']` || len(params) != 2 {
		t.Fatalf("params %v", params)
	}
	if stmt, params := ExceptionsQuery("SELECT 1 AS a", nil); stmt != FindingsQuery("SELECT 1 AS a") || params != nil {
		t.Fatal("no live exception: not FindingsQuery")
	}
}
