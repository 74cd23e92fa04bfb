package hunt

import (
	"testing"
	"time"
)

func TestWithDefaults(t *testing.T) {
	got := Hunt{ID: "a", Interval: time.Minute}.WithDefaults()
	if got.Severity != SeverityDefault || got.Timeout != TimeoutDefault || got.MaxFindings != MaxFindingsDefault ||
		got.MaxCatchup != CatchUpIntervalsDefault*time.Minute {
		t.Fatalf("defaults not applied: %+v", got)
	}
	set := Hunt{ID: "a", Interval: time.Minute, Severity: "high", Timeout: time.Second, MaxFindings: 7, MaxCatchup: time.Hour}
	if again := set.WithDefaults(); again.Severity != "high" || again.Timeout != time.Second || again.MaxFindings != 7 || again.MaxCatchup != time.Hour {
		t.Fatalf("set fields overwritten: %+v", again)
	}
	if h := (Hunt{MaxFindings: MaxFindingsCeiling + 1}).WithDefaults(); h.MaxFindings != MaxFindingsCeiling {
		t.Fatalf("max findings past the ceiling kept: %d", h.MaxFindings)
	}
	if a, b := got.WithDefaults(), got; a.MaxCatchup != b.MaxCatchup || a.MaxFindings != b.MaxFindings {
		t.Fatal("WithDefaults is not idempotent")
	}
}

func TestMaxCatchupSeconds(t *testing.T) {
	for _, c := range []struct {
		h    Hunt
		want int64
	}{
		{Hunt{Interval: time.Minute}, CatchUpIntervalsDefault * 60},
		{Hunt{Interval: time.Minute, MaxCatchup: time.Hour}, 3600},
		{Hunt{Interval: time.Minute, MaxCatchup: 90*time.Second + time.Millisecond}, 91}, // rounded up
		{Hunt{Interval: time.Hour, MaxCatchup: time.Minute}, 3600},                       // at least one interval
	} {
		if got := c.h.MaxCatchupSeconds(); got != c.want {
			t.Errorf("%+v: MaxCatchupSeconds = %d, want %d", c.h, got, c.want)
		}
	}
	if got := (&Hunt{Delay: 1500 * time.Millisecond}).DelaySeconds(); got != 2 {
		t.Errorf("DelaySeconds of 1.5s = %d, want 2 (rounded up)", got)
	}
}

// TestHashStable pins the hash encoding: hunt_schedule.config_hash holds it, and a change
// would make materialise republish every hunt as changed.
func TestHashStable(t *testing.T) {
	h := Hunt{ID: "ssh-brute", Description: "d", Interval: 5 * time.Minute, Offset: 17 * time.Second, Enabled: true,
		Query: "SELECT 1", Delay: time.Minute, MaxCatchup: 2 * time.Hour, Timeout: time.Minute, Severity: "high",
		Labels: map[string]string{"b": "2", "a": "1"}, MaxFindings: 10, File: "x.yaml", Line: 3,
		Notify: []string{"soc"}}
	const want = "f9e4fd2f1aadb1746bdc9e64fba9d6090afc92ce404f09be881fb5f67be44e1c"
	if got := h.ComputeHash(); got != want {
		t.Fatalf("ComputeHash = %s, want %s", got, want)
	}
	h.File, h.Line, h.QueryLine, h.Notify = "y.yaml", 9, 4, nil
	if got := h.ComputeHash(); got != want {
		t.Fatal("the hash depends on where the hunt is written or on notify:")
	}
}

func TestSet(t *testing.T) {
	s := NewSet([]Hunt{{ID: "b", Interval: time.Minute, Enabled: true}, {ID: "a", Interval: time.Minute}}, "dir:x", "")
	if s.Hunts[0].ID != "a" || s.Hunts[1].ID != "b" {
		t.Fatalf("not sorted: %v", s.Hunts)
	}
	if h, ok := s.Get("b"); !ok || h.MaxFindings != MaxFindingsDefault || h.Hash == "" {
		t.Fatalf("Get(b) = %+v, %v; want the hunt with defaults and a hash", h, ok)
	}
	if _, ok := s.Get("c"); ok {
		t.Fatal("Get(c) found a hunt not in the set")
	}
	if en := s.Enabled(); len(en) != 1 || en[0].ID != "b" {
		t.Fatalf("Enabled = %v, want only b", en)
	}
	other := NewSet([]Hunt{{ID: "b", Interval: 2 * time.Minute, Enabled: true}, {ID: "a", Interval: time.Minute}}, "dir:x", "")
	if s.Hash == "" || s.Hash == other.Hash {
		t.Fatalf("set hash %q does not tell sets apart (%q)", s.Hash, other.Hash)
	}
}
