package schedule

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzParseInterval: the parser never panics; an accepted value is a positive whole number of
// seconds within MaxInterval that FormatInterval writes back to the same duration; a refusal
// wraps ErrInvalidInterval and quotes the input.
func FuzzParseInterval(f *testing.F) {
	for _, s := range []string{"30s", "15m", "1h30m", "2d", "1d12h", "90", "0", "-5m", "1.5h", "true", "10x", "", "4294967295", "4294967296", " 5m ", "+60", "1h1h", "99999999999999999999d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseInterval(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidInterval) {
				t.Fatalf("ParseInterval(%q) error %v does not wrap ErrInvalidInterval", s, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
				t.Fatalf("ParseInterval(%q) error %q does not name the value", s, err)
			}
			return
		}
		if d < time.Second || d > MaxInterval || d%time.Second != 0 {
			t.Fatalf("ParseInterval(%q) = %v: not whole seconds in [1s, MaxInterval]", s, d)
		}
		back, err := ParseInterval(FormatInterval(d))
		if err != nil || back != d {
			t.Fatalf("ParseInterval(FormatInterval(%v) = %q) = %v, %v", d, FormatInterval(d), back, err)
		}
	})
}

// FuzzFires checks the fire invariants for any now, interval and offset:
// LatestFire ≤ now < NextFire = LatestFire + interval, and both ≡ offset (mod interval).
func FuzzFires(f *testing.F) {
	f.Add(int64(1_789_027_260), int64(60), int64(46))
	f.Add(int64(1_789_027_306), int64(60), int64(46))
	f.Add(int64(0), int64(1), int64(0))
	f.Add(int64(-1), int64(86400), int64(3600))
	f.Add(int64(1_789_027_260), int64(4294967295), int64(4294967294))
	f.Add(int64(7), int64(2), int64(5))
	f.Fuzz(func(t *testing.T, now, interval, offset int64) {
		// Keep to the domain the tables allow: UInt32 intervals and offsets, epoch seconds far
		// from overflow.
		const bound = int64(1) << 40
		if interval < 1 || interval > int64(^uint32(0)) || offset < 0 || offset > int64(^uint32(0)) || now < -bound || now > bound {
			t.Skip()
		}
		latest, next := LatestFire(now, interval, offset), NextFire(now, interval, offset)
		if latest > now || now >= next || next-latest != interval {
			t.Fatalf("LatestFire %d, NextFire %d around now %d (interval %d, offset %d)", latest, next, now, interval, offset)
		}
		want := floorMod(offset, interval)
		if floorMod(latest, interval) != want || floorMod(next, interval) != want {
			t.Fatalf("fires %d, %d not ≡ %d (mod %d)", latest, next, want, interval)
		}
		// At the fire itself the latest fire is that fire; one second before, the previous one.
		if LatestFire(latest, interval, offset) != latest || LatestFire(next-1, interval, offset) != latest {
			t.Fatalf("LatestFire not stable over [%d, %d)", latest, next)
		}
		if PhaseOffset("fuzz", interval, DefaultSpreadFraction) >= max(1, interval*4/5) {
			t.Fatalf("PhaseOffset outside its window for interval %d", interval)
		}
	})
}

// FuzzParseCron: the cron parser never panics, and an accepted schedule is an interval with an
// offset in [0, interval), both whole seconds.
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"*/15 * * * *", "0 9 * * 1-5", "@hourly", "@every 10m", "CRON_TZ=UTC 30 2 * * *", "TZ=Europe/Berlin", "@weekly", "0 0 1 * *", "* * * * * *", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		iv, off, err := ParseCron(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidCron) {
				t.Fatalf("ParseCron(%q) error %v does not wrap ErrInvalidCron", s, err)
			}
			return
		}
		if iv < time.Second || iv%time.Second != 0 || off < 0 || off >= iv || off%time.Second != 0 {
			t.Fatalf("ParseCron(%q) = %v, %v", s, iv, off)
		}
	})
}
