package schedule

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// MaxInterval is the longest schedule interval: hunt_schedule stores interval_seconds as UInt32.
const MaxInterval = time.Duration(math.MaxUint32) * time.Second

// ErrInvalidInterval is wrapped by every ParseInterval error.
var ErrInvalidInterval = errors.New("invalid interval")

// intervalUnits are the units an interval may use, largest first. A compound value must use
// them in this order, each at most once ("1d12h", "1h30m"), so that "30m1h" or "1h1h" — almost
// certainly typos — are refused rather than summed.
var intervalUnits = []struct {
	suffix string
	size   int64
}{{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}}

// ParseInterval parses a hunt interval: a duration in days, hours, minutes and seconds
// ("30s", "15m", "1h30m", "2d", "1d12h") or a bare integer of seconds ("90"). It refuses zero,
// negative and fractional values, booleans, sub-second and unknown units, and values beyond
// MaxInterval; every error names the value and wraps ErrInvalidInterval.
func ParseInterval(text string) (time.Duration, error) { return parseSeconds(text, "interval") }

// ParseDuration reads the other durations of a hunt file (delay, max_catchup, timeout) exactly as
// ParseInterval does; only its messages say "duration", so that an author fixing a timeout is
// not told about intervals.
func ParseDuration(text string) (time.Duration, error) { return parseSeconds(text, "duration") }

// intervalError names the value and why it was refused, and wraps ErrInvalidInterval.
type intervalError struct{ noun, text, why string }

func (e *intervalError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.noun, e.text, e.why)
}
func (e *intervalError) Unwrap() error { return ErrInvalidInterval }

func parseSeconds(text, noun string) (time.Duration, error) {
	s := strings.TrimSpace(text)
	fail := func(format string, args ...any) (time.Duration, error) {
		if noun != "interval" {
			format = strings.NewReplacer("an interval", "a "+noun, "interval", noun).Replace(format)
		}
		return 0, &intervalError{noun: noun, text: text, why: fmt.Sprintf(format, args...)}
	}
	switch strings.ToLower(s) {
	case "":
		return fail("empty; write a duration such as 30s, 15m, 1h30m or 2d")
	case "true", "false", "yes", "no", "on", "off", "y", "n":
		return fail("is a boolean, not a duration; write a duration such as 15m")
	}
	if s[0] == '-' {
		return fail("negative; an interval must be positive")
	}
	if strings.ContainsAny(s, ".,") {
		return fail("fractional values are not supported; use a smaller unit (1.5h → 1h30m, 0.5m → 30s)")
	}
	if s[0] == '+' {
		s = s[1:]
	}
	var total int64
	rest := s
	next := 0 // index into intervalUnits: units must appear largest first, each once
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 {
			return fail("expected a number before %q; write a duration such as 30s, 15m, 1h30m or 2d", rest)
		}
		j := i
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9') {
			j++
		}
		num, unit := rest[:i], rest[i:j]
		rest = rest[j:]
		if unit == "" {
			// Only a value that is one bare number may leave the unit out: in "1h30" it is a typo.
			if num != s {
				return fail("number %s has no unit; use d, h, m or s (a bare integer means seconds)", num)
			}
			unit = "s"
		}
		k := unitIndex(unit)
		if k < 0 {
			return fail("unknown unit %q; use d, h, m or s", unit)
		}
		if k < next {
			return fail("units must appear once each, largest first (d, h, m, s), as in 1h30m")
		}
		next = k + 1
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > int64(MaxInterval/time.Second)/intervalUnits[k].size {
			return fail("too long; the longest interval is %d seconds (about 136 years)", int64(MaxInterval/time.Second))
		}
		total += n * intervalUnits[k].size
		if total > int64(MaxInterval/time.Second) {
			return fail("too long; the longest interval is %d seconds (about 136 years)", int64(MaxInterval/time.Second))
		}
	}
	if total == 0 {
		return fail("zero; an interval must be at least 1s")
	}
	return time.Duration(total) * time.Second, nil
}

func unitIndex(unit string) int {
	for k, u := range intervalUnits {
		if u.suffix == unit {
			return k
		}
	}
	return -1
}

// FormatInterval writes d in the form ParseInterval reads back, largest units first
// (5400s → "1h30m"); used in messages and the materialise diff.
func FormatInterval(d time.Duration) string {
	secs := int64(d / time.Second)
	if secs <= 0 {
		return strconv.FormatInt(secs, 10) + "s"
	}
	var b strings.Builder
	for _, u := range intervalUnits {
		if n := secs / u.size; n > 0 {
			b.WriteString(strconv.FormatInt(n, 10))
			b.WriteString(u.suffix)
			secs -= n * u.size
		}
	}
	return b.String()
}
