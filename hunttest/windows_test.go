package hunttest

import (
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// Windows are the schedule's: whole intervals ending at fires (interval and offset), inside the
// range, shifted back by the delay as a run's data window is.
func TestWindows(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	h := hunt.Hunt{ID: "x", Interval: time.Minute, Offset: 10 * time.Second, Delay: 5 * time.Second}
	got := Windows(h, at("2026-01-01T00:00:10Z"), at("2026-01-01T00:03:15Z"))
	want := []string{"2026-01-01T00:01:10Z", "2026-01-01T00:02:10Z", "2026-01-01T00:03:10Z"}
	if len(got) != len(want) {
		t.Fatalf("windows %+v, want fires %v", got, want)
	}
	for i, w := range got {
		f := at(want[i])
		if !w.Fire.Equal(f) || !w.Start.Equal(f.Add(-65*time.Second)) || !w.End.Equal(f.Add(-5*time.Second)) {
			t.Errorf("window %d = %+v, want fire %s reading [fire − 65s, fire − 5s)", i, w, f)
		}
	}
	// The first fire's whole interval must lie in the range: 00:01:10 − 60s is before 00:00:10.5.
	if got := Windows(h, at("2026-01-01T00:00:10Z").Add(500*time.Millisecond), at("2026-01-01T00:03:15Z")); len(got) != 2 {
		t.Errorf("a fire whose interval starts before --from was previewed: %+v", got)
	}
	if got := Windows(h, at("2026-01-01T00:00:10Z"), at("2026-01-01T00:01:09Z")); len(got) != 0 {
		t.Errorf("a range with no whole window gave %+v", got)
	}
}
