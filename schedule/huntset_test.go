package schedule

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// Two hunt sets published into one database: neither retires the other's hunts, a hunt id
// live in the other set is refused naming both sets, one the other set retired can be taken
// over, each set's hash is its own, and due counts every set unless narrowed to one.
func TestHuntSetsShareADatabase(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	wm := NewClickHouseStore(db.Conn, db.Name)
	teamA := MaterialiseOptions{Set: "team-a", Source: "dir:/a"}
	teamB := MaterialiseOptions{Set: "team-b", Source: "dir:/b"}

	a1, a2 := mustRow(t, "a-1", time.Minute, "ha1"), mustRow(t, "a-2", time.Minute, "ha2")
	b1 := mustRow(t, "b-1", time.Minute, "hb1")
	if _, err := Materialise(ctx, wm, []Row{a1, a2}, "setA", teamA); err != nil {
		t.Fatal(err)
	}
	d, err := Materialise(ctx, wm, []Row{b1}, "setB", teamB)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Added) != 1 || len(d.Tombstoned) != 0 || d.PublishedHash != "" {
		t.Fatalf("team-b's first publication tombstoned team-a or saw its hash:\n%s", d)
	}
	// Re-publishing team-a unchanged writes nothing: team-b's publication changed neither its
	// rows nor its recorded hash.
	d, err = Materialise(ctx, wm, []Row{a1, a2}, "setA", teamA)
	if err != nil || d.HasChanges() || len(d.Tombstoned) != 0 {
		t.Fatalf("team-a again: %v\n%s", err, d)
	}
	for set, want := range map[string]string{"team-a": "setA", "team-b": "setB", hunt.HuntSetDefault: ""} {
		if h, err := PublishedSetHash(ctx, db.Conn, db.Name, set); err != nil || h != want {
			t.Errorf("PublishedSetHash(%s) = %q, %v; want %q", set, h, err, want)
		}
	}

	// Due: every set by default, one set when narrowed.
	for set, want := range map[string]uint64{"": 3, "team-a": 2, "team-b": 1, hunt.HuntSetDefault: 0} {
		if n, err := CountDueSet(ctx, db.Conn, db.Name, set); err != nil || n != want {
			t.Errorf("CountDueSet(%q) = %d, %v; want %d", set, n, err, want)
		}
	}
	if n, err := CountDue(ctx, db.Conn, db.Name); err != nil || n != 3 {
		t.Errorf("CountDue = %d, %v; want 3 (every set)", n, err)
	}
	if hunts, err := DueHuntsSet(ctx, db.Conn, db.Name, "team-b", 0); err != nil || len(hunts) != 1 || hunts[0].HuntID != "b-1" {
		t.Errorf("DueHuntsSet(team-b) = %+v, %v", hunts, err)
	}

	// team-b also defines a-2: refused, naming both sets, nothing written (dry run too).
	before, _ := tableCounts(t, db.Conn, db.Name)
	for _, dry := range []bool{true, false} {
		o := teamB
		o.DryRun = dry
		_, err = Materialise(ctx, wm, []Row{b1, mustRow(t, "a-2", time.Hour, "other")}, "setB2", o)
		if !errors.Is(err, ErrSetConflict) || !strings.Contains(err.Error(), `"team-a"`) || !strings.Contains(err.Error(), `"team-b"`) || !strings.Contains(err.Error(), `"a-2"`) {
			t.Fatalf("dry run %v: duplicate id across sets: %v", dry, err)
		}
	}
	// A disabled hunt of the same id would tombstone team-a's: refused as well.
	if _, err = Materialise(ctx, wm, []Row{b1, {HuntID: "a-2"}}, "setB2", teamB); !errors.Is(err, ErrSetConflict) {
		t.Fatalf("disabled duplicate id across sets: %v", err)
	}
	if after, _ := tableCounts(t, db.Conn, db.Name); after != before {
		t.Fatalf("a refused materialise wrote %d schedule row(s)", after-before)
	}

	// team-a retires a-2; team-b may then take it over, and team-a's next publication leaves it.
	if d, err = Materialise(ctx, wm, []Row{a1}, "setA2", teamA); err != nil || len(d.Tombstoned) != 1 {
		t.Fatalf("team-a retires a-2: %v\n%s", err, d)
	}
	if d, err = Materialise(ctx, wm, []Row{b1, a2}, "setB3", teamB); err != nil || len(d.Added) != 1 || d.Added[0].New.HuntID != "a-2" {
		t.Fatalf("team-b takes over a retired id: %v\n%s", err, d)
	}
	if d, err = Materialise(ctx, wm, []Row{a1}, "setA2", teamA); err != nil || d.HasChanges() {
		t.Fatalf("team-a after team-b took a-2 over: %v\n%s", err, d)
	}
	pub, err := wm.Published(ctx, "team-b")
	if err != nil {
		t.Fatal(err)
	}
	if r := pub.Rows["a-2"]; r.Set != "team-b" || !r.Live() {
		t.Errorf("a-2 after the take-over: %+v", r)
	}
	if n, err := CountDueSet(ctx, db.Conn, db.Name, "team-b"); err != nil || n != 2 {
		t.Errorf("team-b due after the take-over = %d, %v; want 2", n, err)
	}
}

func TestHuntSetNames(t *testing.T) {
	for _, ok := range []string{"default", "team-a", "Release_1.2", "x"} {
		if err := ValidateHuntSet(ok); err != nil {
			t.Errorf("ValidateHuntSet(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", "a b", "a'b", strings.Repeat("x", 64)} {
		if err := ValidateHuntSet(bad); !errors.Is(err, ErrInvalidHuntSet) {
			t.Errorf("ValidateHuntSet(%q) = %v, want ErrInvalidHuntSet", bad, err)
		}
	}
	if _, err := Materialise(context.Background(), failingStore{}, nil, "", MaterialiseOptions{Set: "a'b", AllowEmpty: true}); !errors.Is(err, ErrInvalidHuntSet) {
		t.Errorf("Materialise with a bad set name: %v", err)
	}
}
