package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// RowsOf publishes the offset the loader resolved as is (a cron-pinned one too), tombstones a
// disabled hunt, and names the file of a hunt whose interval cannot be published.
func TestRowsOf(t *testing.T) {
	set := hunt.NewSet([]hunt.Hunt{
		{ID: "a", Interval: time.Hour, Offset: 17 * time.Minute, Enabled: true},
		{ID: "b", Interval: time.Minute, Enabled: false},
	}, "test", "")
	rows, err := RowsOf(set)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := set.Get("a")
	b, _ := set.Get("b")
	want := []Row{{HuntID: "a", IntervalSeconds: 3600, PhaseOffset: 17 * 60, Enabled: true, ConfigHash: a.Hash},
		{HuntID: "b", ConfigHash: b.Hash}}
	if len(rows) != 2 || rows[0] != want[0] || rows[1] != want[1] {
		t.Fatalf("RowsOf = %+v, want %+v", rows, want)
	}
	bad := hunt.NewSet([]hunt.Hunt{{ID: "c", File: "team/c.yaml", Interval: 1500 * time.Millisecond, Enabled: true}}, "test", "")
	if _, err := RowsOf(bad); !errors.Is(err, ErrInvalidInterval) || !strings.HasPrefix(err.Error(), "team/c.yaml: ") {
		t.Fatalf("RowsOf of a fractional interval = %v, want ErrInvalidInterval naming team/c.yaml", err)
	}
}
