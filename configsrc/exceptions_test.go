package configsrc

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
