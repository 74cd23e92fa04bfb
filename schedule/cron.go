package schedule

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrInvalidCron is wrapped by every ParseCron error.
var ErrInvalidCron = errors.New("invalid cron schedule")

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

const (
	minutesPerDay  = 24 * 60
	minutesPerWeek = 7 * minutesPerDay
	// epochWeekday is the weekday of 1970-01-01 (Thursday), to place weekly fires on the epoch grid.
	epochWeekday = 4
	allDoms      = uint64(1<<32 - 2) // bits 1..31
	allMonths    = uint64(1<<13 - 2) // bits 1..12
	allDows      = uint64(1<<7 - 1)  // bits 0..6
	starBit      = uint64(1) << 63
)

// ParseCron turns a cron schedule into an interval and a pinned offset (both whole seconds,
// offset in [0, interval)): the hunt fires at every t ≡ offset (mod interval) in UTC, exactly the
// instants the cron names. It accepts the 5 standard fields (minute hour day-of-month month
// day-of-week) and the descriptors @hourly, @daily/@midnight, @weekly and @every <interval>
// (anchored to the epoch: "@every 10m" fires at :00, :10, …; for a hash-spread schedule write
// `interval:` instead). An optional CRON_TZ=/TZ= prefix must name UTC.
//
// hunt-runner schedules are strictly periodic (that is what makes the due backlog computable in
// SQL), so a cron whose fires are not equally spaced in UTC — weekdays only, some days of the
// month, some months — is refused with an error that says why and what to write instead. It is
// never approximated.
func ParseCron(expr string) (interval, offset time.Duration, err error) {
	fail := func(why string, args ...any) (time.Duration, time.Duration, error) {
		return 0, 0, fmt.Errorf("%w %q: %s", ErrInvalidCron, expr, fmt.Sprintf(why, args...))
	}
	spec := strings.TrimSpace(expr)
	if zone, rest, ok := cutZone(spec); ok {
		switch zone {
		case "UTC", "Etc/UTC", "GMT", "Etc/GMT", "Zulu", "Etc/Zulu":
		default:
			return fail("time zone %q: cron schedules are evaluated in UTC (a local zone's daylight-saving shifts break the fixed interval); convert the times to UTC and drop the prefix", zone)
		}
		spec = rest
	}
	if spec == "" {
		return fail("empty; write 5 fields (minute hour day-of-month month day-of-week) or a descriptor such as @hourly")
	}
	if rest, ok := strings.CutPrefix(spec, "@every"); ok {
		d, err := ParseInterval(rest)
		if err != nil {
			return fail("@every: %v", err)
		}
		return d, 0, nil
	}
	if len(strings.Fields(spec)) == 6 && !strings.HasPrefix(spec, "@") {
		return fail("6 fields; hunt-runner reads 5 (minute hour day-of-month month day-of-week), seconds are not supported")
	}
	parsed, perr := cronParser.Parse(spec)
	if perr != nil {
		return fail("%v", perr)
	}
	s, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return fail("unsupported schedule form")
	}
	if s.Month&allMonths != allMonths {
		return fail("it runs only in some months, and months are not a fixed number of seconds apart; hunt-runner needs equally spaced fires — write `interval: 30d`, or a daily or weekly cron such as \"0 0 * * 0\"")
	}
	if s.Dom&allDoms != allDoms {
		return fail("it runs on chosen days of the month, and months differ in length, so fires are not equally spaced; hunt-runner needs a fixed interval — write `interval: 30d`, or a daily or weekly cron such as \"0 0 * * 0\"")
	}
	dows := allDows
	// robfig ANDs day-of-month and day-of-week when either is a star, ORs them otherwise; with
	// every day of the month selected the OR means every day.
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		dows = s.Dow & allDows
	}

	var fires []int64 // minutes since Sunday 00:00 UTC
	for d := range int64(7) {
		if dows&(1<<d) == 0 {
			continue
		}
		for h := range int64(24) {
			if s.Hour&(1<<h) == 0 {
				continue
			}
			for m := range int64(60) {
				if s.Minute&(1<<m) != 0 {
					fires = append(fires, d*minutesPerDay+h*60+m)
				}
			}
		}
	}
	if len(fires) == 0 {
		return fail("it never fires")
	}
	gaps := cycleGaps(fires, minutesPerWeek)
	if len(gaps) != 1 {
		return fail("its fires are not equally spaced in UTC (gaps of %s), and hunt-runner needs a fixed interval; %s",
			formatGaps(gaps), suggestion(s))
	}
	step := gaps[0] * 60
	// Place the first fire on the epoch grid: Sunday 00:00 of the epoch's week is day −4.
	abs := (fires[0] - epochWeekday*minutesPerDay) * 60
	return time.Duration(step) * time.Second, time.Duration(floorMod(abs, step)) * time.Second, nil
}

// cutZone splits a leading "CRON_TZ=zone " or "TZ=zone " prefix.
func cutZone(spec string) (zone, rest string, ok bool) {
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if after, found := strings.CutPrefix(spec, p); found {
			zone, rest, _ = strings.Cut(after, " ")
			return zone, strings.TrimSpace(rest), true
		}
	}
	return "", spec, false
}

// cycleGaps returns the distinct gaps between consecutive sorted values of a cycle of length
// period, counting the wrap-around from the last value back to the first.
func cycleGaps(vals []int64, period int64) []int64 {
	var gaps []int64
	for i, v := range vals {
		next := period + vals[0]
		if i+1 < len(vals) {
			next = vals[i+1]
		}
		if g := next - v; !slices.Contains(gaps, g) {
			gaps = append(gaps, g)
		}
	}
	slices.Sort(gaps)
	return gaps
}

func formatGaps(gaps []int64) string {
	parts := make([]string, 0, len(gaps))
	for i, g := range gaps {
		if i == 4 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, FormatInterval(time.Duration(g)*time.Minute))
	}
	return strings.Join(parts, ", ")
}

// suggestion proposes an equally spaced schedule close to a refused one: the same times of day
// on every day, if those are equally spaced, else a plain interval.
func suggestion(s *cron.SpecSchedule) string {
	var day []int64
	for h := range int64(24) {
		for m := range int64(60) {
			if s.Hour&(1<<h) != 0 && s.Minute&(1<<m) != 0 {
				day = append(day, h*60+m)
			}
		}
	}
	if len(day) == 1 {
		return fmt.Sprintf("to run every day at %02d:%02d UTC write cron: \"%d %d * * *\", or write `interval: 24h` for a spread daily run",
			day[0]/60, day[0]%60, day[0]%60, day[0]/60)
	}
	if g := cycleGaps(day, minutesPerDay); len(g) == 1 {
		return fmt.Sprintf("drop the day restriction to run every %s on every day, or write `interval: %s`",
			FormatInterval(time.Duration(g[0])*time.Minute), FormatInterval(time.Duration(g[0])*time.Minute))
	}
	return "write `interval: <duration>` (for example `interval: 1h`) or a cron whose fires are equally spaced, such as \"*/15 * * * *\""
}
