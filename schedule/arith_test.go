package schedule

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPhaseOffsetGolden checks PhaseOffset against testdata/phase_offsets.tsv, computed by the
// earlier Python runner's algorithm (reference §2), including I = 1 and 2 and non-ASCII ids.
func TestPhaseOffsetGolden(t *testing.T) {
	f, err := os.Open("testdata/phase_offsets.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		parts := strings.Split(line, "\t")
		if len(parts) != 3 {
			t.Fatalf("malformed golden line %q", line)
		}
		interval, _ := strconv.ParseInt(parts[1], 10, 64)
		want, _ := strconv.ParseInt(parts[2], 10, 64)
		if got := PhaseOffset(parts[0], interval, DefaultSpreadFraction); got != want {
			t.Errorf("PhaseOffset(%q, %d) = %d, want %d", parts[0], interval, got, want)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("only %d golden offsets read", n)
	}
}

func TestPhaseOffsetFractions(t *testing.T) {
	// Python: int(sha256(id).hexdigest(), 16) % max(1, int(I*f)).
	tests := []struct {
		id       string
		interval int64
		f        float64
		want     int64
	}{
		{"h", 600, 1.0, 339},
		{"h", 600, 0.5, 39},
		{"brute-force", 3600, 0.25, 810},
		{"x", 7, 0.3, 1},
		{"post-1682300-71da5fa4", 60, 0.1, 4},
		{"post-1682300-71da5fa4", 0, 0.8, 0},
	}
	for _, tt := range tests {
		if got := PhaseOffset(tt.id, tt.interval, tt.f); got != tt.want {
			t.Errorf("PhaseOffset(%q, %d, %v) = %d, want %d", tt.id, tt.interval, tt.f, got, tt.want)
		}
	}
}

func TestValidateSpreadFraction(t *testing.T) {
	for _, f := range []float64{0.8, 1, 0.01} {
		if err := ValidateSpreadFraction(f); err != nil {
			t.Errorf("ValidateSpreadFraction(%v) = %v", f, err)
		}
	}
	for _, f := range []float64{0, -0.5, 1.0001, 2} {
		if err := ValidateSpreadFraction(f); err == nil {
			t.Errorf("ValidateSpreadFraction(%v) accepted", f)
		}
	}
}

// TestPhaseOffsetDistribution: 200 ids over I = 600 fall in 10 bins with none over twice the mean.
func TestPhaseOffsetDistribution(t *testing.T) {
	const interval, ids, bins = 600, 200, 10
	window := int64(interval * DefaultSpreadFraction)
	counts := make([]int, bins)
	for i := range ids {
		off := PhaseOffset("hunt-"+strconv.Itoa(i), interval, DefaultSpreadFraction)
		if off < 0 || off >= window {
			t.Fatalf("offset %d outside [0, %d)", off, window)
		}
		counts[off*bins/window]++
	}
	mean := ids / bins
	for b, c := range counts {
		if c > 2*mean {
			t.Errorf("bin %d holds %d offsets, over twice the mean %d (all bins %v)", b, c, mean, counts)
		}
	}
}

func TestLatestNextFire(t *testing.T) {
	tests := []struct {
		now, interval, offset int64
		latest, next          int64
	}{
		{now: 1000, interval: 60, offset: 46, latest: 946, next: 1006},
		{now: 1006, interval: 60, offset: 46, latest: 1006, next: 1066},
		{now: 1005, interval: 60, offset: 46, latest: 946, next: 1006},
		{now: 1020, interval: 60, offset: 0, latest: 1020, next: 1080},
		{now: 1019, interval: 60, offset: 0, latest: 960, next: 1020},
		{now: 7, interval: 1, offset: 0, latest: 7, next: 8},
		{now: 7, interval: 2, offset: 0, latest: 6, next: 8},
		{now: 10, interval: 60, offset: 46, latest: -14, next: 46},
		{now: 1000, interval: 60, offset: 106, latest: 946, next: 1006}, // offset reduced mod interval
		{now: -1, interval: 60, offset: 0, latest: -60, next: 0},
	}
	for _, tt := range tests {
		if got := LatestFire(tt.now, tt.interval, tt.offset); got != tt.latest {
			t.Errorf("LatestFire(%d, %d, %d) = %d, want %d", tt.now, tt.interval, tt.offset, got, tt.latest)
		}
		if got := NextFire(tt.now, tt.interval, tt.offset); got != tt.next {
			t.Errorf("NextFire(%d, %d, %d) = %d, want %d", tt.now, tt.interval, tt.offset, got, tt.next)
		}
	}
}

func TestWindow(t *testing.T) {
	// Reference §3.2: window(None, 1000, 600) = (400, 1000); window(950, 1000, 600) = (950, 1000).
	if s, e := Window(0, false, 1000, 600); s != 400 || e != 1000 {
		t.Errorf("first run window = [%d, %d), want [400, 1000)", s, e)
	}
	if s, e := Window(950, true, 1000, 600); s != 950 || e != 1000 {
		t.Errorf("window = [%d, %d), want [950, 1000)", s, e)
	}
	if s, e := Window(0, true, 1000, 600); s != 0 || e != 1000 {
		t.Errorf("zero watermark window = [%d, %d), want [0, 1000)", s, e)
	}
}

// TestBetweenTicks is the regression of the old `now >= current` gate: offset 46, I = 60 and
// ticks at :00 :15 :30 :45 for 3 minutes never land in [46, 60), yet exactly 3 fires run
// (reference §3.1, same base and fires as the Python test).
func TestBetweenTicks(t *testing.T) {
	const base, interval = 1_789_027_260, 60
	offset := PhaseOffset("post-1682300-71da5fa4", interval, DefaultSpreadFraction)
	if offset != 46 {
		t.Fatalf("offset = %d, want 46", offset)
	}
	row := Row{HuntID: "post-1682300-71da5fa4", IntervalSeconds: interval, PhaseOffset: uint32(offset), Enabled: true}
	var st State
	var fires []int64
	for m := int64(0); m < 3; m++ {
		for _, s := range []int64{0, 15, 30, 45} {
			now := base + m*60 + s
			if !IsDue(now, row, st) {
				continue
			}
			fire := LatestFire(now, interval, offset)
			fires = append(fires, fire)
			st.Watermark, st.HasWatermark = fire, true // the run succeeded
		}
	}
	want := []int64{1_789_027_246, 1_789_027_306, 1_789_027_366}
	if len(fires) != len(want) {
		t.Fatalf("fires = %v, want %v", fires, want)
	}
	for i := range want {
		if fires[i] != want[i] {
			t.Fatalf("fires = %v, want %v", fires, want)
		}
	}
	if st.Watermark != base+2*60+46-60 {
		t.Errorf("final watermark %d, want %d", st.Watermark, base+2*60+46-60)
	}
}

func TestNewRow(t *testing.T) {
	r, err := NewRow("post-1682300-71da5fa4", Spec{Interval: time.Minute}, DefaultSpreadFraction, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if r != (Row{HuntID: "post-1682300-71da5fa4", IntervalSeconds: 60, PhaseOffset: 46, Enabled: true, ConfigHash: "abc"}) {
		t.Errorf("spread row = %+v", r)
	}
	r, err = NewRow("post-1682300-71da5fa4", Spec{Interval: 15 * time.Minute, Offset: 5 * time.Minute, Pinned: true}, DefaultSpreadFraction, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if r.IntervalSeconds != 900 || r.PhaseOffset != 300 {
		t.Errorf("pinned row = %+v", r)
	}
	for _, bad := range []Spec{{}, {Interval: 1500 * time.Millisecond}, {Interval: time.Minute, Offset: time.Minute, Pinned: true}, {Interval: MaxInterval + time.Second}} {
		if _, err := NewRow("h", bad, DefaultSpreadFraction, ""); err == nil {
			t.Errorf("NewRow accepted %+v", bad)
		}
	}
	if _, err := NewRow("h", Spec{Interval: time.Minute}, 0, ""); err == nil {
		t.Error("NewRow accepted spread fraction 0")
	}
}
