package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseInterval(t *testing.T) {
	good := []struct {
		in   string
		want time.Duration
	}{
		{"30s", 30 * time.Second},
		{"15m", 15 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"2d", 48 * time.Hour},
		{"1d12h", 36 * time.Hour},
		{"1h0m5s", time.Hour + 5*time.Second},
		{"90", 90 * time.Second},
		{"1", time.Second},
		{" 5m ", 5 * time.Minute},
		{"+60", time.Minute},
		{"4294967295", MaxInterval},
	}
	for _, tt := range good {
		got, err := ParseInterval(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseInterval(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	bad := []struct{ in, why string }{
		{"0", "zero"},
		{"0s", "zero"},
		{"0h0m", "zero"},
		{"-30s", "negative"},
		{"-1", "negative"},
		{"1.5", "fractional"},
		{"1.5h", "fractional"},
		{"true", "boolean"},
		{"False", "boolean"},
		{"yes", "boolean"},
		{"10x", "unknown unit"},
		{"500ms", "unknown unit"},
		{"1w", "unknown unit"},
		{"", "empty"},
		{"m", "expected a number"},
		{"30m1h", "largest first"},
		{"1h1h", "largest first"},
		{"1h30", "no unit"},
		{"4294967296", "too long"},
		{"49711d", "too long"},
		{"99999999999999999999", "too long"},
	}
	for _, tt := range bad {
		_, err := ParseInterval(tt.in)
		if err == nil {
			t.Errorf("ParseInterval(%q) accepted", tt.in)
			continue
		}
		if !errors.Is(err, ErrInvalidInterval) {
			t.Errorf("ParseInterval(%q) error %v does not wrap ErrInvalidInterval", tt.in, err)
		}
		if !strings.Contains(err.Error(), `"`+tt.in+`"`) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("ParseInterval(%q) error %q: want the value quoted and %q", tt.in, err, tt.why)
		}
	}
}

func TestFormatInterval(t *testing.T) {
	for _, s := range []string{"30s", "15m", "1h30m", "2d", "1d12h", "1h5s"} {
		d, err := ParseInterval(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := FormatInterval(d); got != s {
			t.Errorf("FormatInterval(%v) = %q, want %q", d, got, s)
		}
	}
}

func TestParseCron(t *testing.T) {
	good := []struct {
		expr             string
		interval, offset time.Duration
	}{
		{"*/15 * * * *", 15 * time.Minute, 0},
		{"5-59/15 * * * *", 15 * time.Minute, 5 * time.Minute},
		{"0 */6 * * *", 6 * time.Hour, 0},
		{"30 2 * * *", 24 * time.Hour, 2*time.Hour + 30*time.Minute},
		{"* * * * *", time.Minute, 0},
		{"0,30 * * * *", 30 * time.Minute, 0},
		{"7 1-23/2 * * *", 2 * time.Hour, time.Hour + 7*time.Minute},
		{"@hourly", time.Hour, 0},
		{"@daily", 24 * time.Hour, 0},
		{"@midnight", 24 * time.Hour, 0},
		{"@every 10m", 10 * time.Minute, 0},
		{"@every 1h30m", 90 * time.Minute, 0},
		{"CRON_TZ=UTC 30 2 * * *", 24 * time.Hour, 2*time.Hour + 30*time.Minute},
		{"0 0 1-31 * *", 24 * time.Hour, 0},
		{"0 0 * * 0-6", 24 * time.Hour, 0},
		{"0 0 1-31 * 1", 24 * time.Hour, 0}, // both fields restricted: robfig ORs them → every day
		// 1970-01-01 was a Thursday, so Sunday 00:00 is 3 days past the epoch's weekly grid.
		{"@weekly", 7 * 24 * time.Hour, 3 * 24 * time.Hour},
		{"0 0 * * 4", 7 * 24 * time.Hour, 0},
		{"0 12 * * mon", 7 * 24 * time.Hour, 4*24*time.Hour + 12*time.Hour},
	}
	for _, tt := range good {
		iv, off, err := ParseCron(tt.expr)
		if err != nil || iv != tt.interval || off != tt.offset {
			t.Errorf("ParseCron(%q) = %v, %v, %v; want %v, %v", tt.expr, iv, off, err, tt.interval, tt.offset)
		}
	}
	bad := []struct{ expr, why string }{
		{"0 9 * * 1-5", `not equally spaced in UTC (gaps of 1d, 3d), and hunt-runner needs a fixed interval; to run every day at 09:00 UTC write cron: "0 9 * * *"`},
		{"0 0 1 * *", "days of the month"},
		{"@monthly", "days of the month"},
		{"@yearly", "some months"},
		{"0 0 * 1 *", "some months"},
		{"0 9,17 * * *", "gaps of 8h, 16h"},
		{"0 0 */2 * *", "days of the month"},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", "UTC"},
		{"TZ=America/New_York", "UTC"},
		{"0 0 0 * * *", "6 fields"},
		{"*/20 */4 * * *", "gaps of 20m, 3h20m"},
		{"61 * * * *", "above maximum"},
		{"", "empty"},
		{"@every 0s", "zero"},
		{"@every 1.5m", "fractional"},
		{"@fortnightly", "unrecognized"},
	}
	for _, tt := range bad {
		_, _, err := ParseCron(tt.expr)
		if err == nil {
			t.Errorf("ParseCron(%q) accepted", tt.expr)
			continue
		}
		if !errors.Is(err, ErrInvalidCron) {
			t.Errorf("ParseCron(%q) error %v does not wrap ErrInvalidCron", tt.expr, err)
		}
		if !strings.Contains(err.Error(), tt.why) {
			t.Errorf("ParseCron(%q) error %q: want %q", tt.expr, err, tt.why)
		}
	}
}

// TestParseCronMatchesRobfig checks accepted crons against robfig's own Next: every instant the
// cron names over two weeks is exactly a fire of the derived interval and offset.
func TestParseCronMatchesRobfig(t *testing.T) {
	for _, expr := range []string{"*/15 * * * *", "0 */6 * * *", "30 2 * * *", "@weekly", "0 12 * * mon", "7 1-23/2 * * *", "15 0-23/4 * * *", "*/5 * * * *"} {
		iv, off, err := ParseCron(expr)
		if err != nil {
			t.Fatalf("ParseCron(%q): %v", expr, err)
		}
		sched, err := cronParser.Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		interval, offset := int64(iv/time.Second), int64(off/time.Second)
		start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		at := start.Add(-time.Second).In(time.UTC)
		for at.Before(start.Add(14 * 24 * time.Hour)) {
			next := sched.Next(at.In(time.UTC)).UTC()
			want := NextFire(at.Unix(), interval, offset)
			if next.Unix() != want {
				t.Fatalf("%q: robfig next after %v is %v, ours %v", expr, at, next, time.Unix(want, 0).UTC())
			}
			at = next
		}
	}
}

// ParseDuration reads exactly what ParseInterval reads; only its errors speak of a duration.
func TestParseDuration(t *testing.T) {
	for _, in := range []string{"30s", "1h30m", "90", "0s", "-5m", "1.5h", "5x", "true", ""} {
		di, errI := ParseInterval(in)
		dd, errD := ParseDuration(in)
		if di != dd || (errI == nil) != (errD == nil) {
			t.Errorf("%q: ParseInterval = %v, %v; ParseDuration = %v, %v", in, di, errI, dd, errD)
		}
		if errD == nil {
			continue
		}
		if !errors.Is(errD, ErrInvalidInterval) || strings.Contains(errD.Error(), "interval") || !strings.Contains(errD.Error(), "duration") {
			t.Errorf("%q: ParseDuration error %q should wrap ErrInvalidInterval and speak of a duration only", in, errD)
		}
	}
	_, err := ParseDuration("0s")
	if want := `invalid duration "0s": zero; a duration must be at least 1s`; err == nil || err.Error() != want {
		t.Errorf("ParseDuration(0s) = %v, want %s", err, want)
	}
}
