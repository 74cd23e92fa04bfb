package legacy

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// The earlier runner's interval parsing, reproduced so the report can say what it actually did
// with a file (hunt-runner's own parser is stricter and is configsrc's).

var (
	oldSecondsRe  = regexp.MustCompile(`^\d+$`)
	oldDurationRe = regexp.MustCompile(`^(?:\d+[smhd])+$`)
	oldSegmentRe  = regexp.MustCompile(`(\d+)([smhd])`)
	oldCron       = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
)

// oldIsCron is the earlier runner's test: whitespace, '*', '/', ',' anywhere, or '-' after
// the first character.
func oldIsCron(s string) bool {
	return strings.ContainsAny(s, " \t\n*/,") || strings.Contains(s[min(1, len(s)):], "-")
}

// oldInterval is the interval, in seconds, the earlier runner derived from a string: digits are
// seconds, a cron is the smallest gap between its first 7 fires after the epoch, anything else
// a sum of d/h/m/s segments. ok is false where it skipped the hunt.
func oldInterval(s string) (secs int64, irregular, ok bool) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return 0, false, false
	case oldSecondsRe.MatchString(s):
		n, err := strconv.ParseInt(s, 10, 64)
		return n, false, err == nil && n > 0
	case oldIsCron(s):
		sched, err := oldCron.Parse(s)
		if err != nil {
			return 0, false, false
		}
		t := time.Unix(0, 0).UTC()
		var gaps []int64
		for range 7 {
			next := sched.Next(t)
			if next.IsZero() {
				return 0, false, false
			}
			if !t.Equal(time.Unix(0, 0).UTC()) {
				gaps = append(gaps, next.Unix()-t.Unix())
			}
			t = next
		}
		least := gaps[0]
		for _, g := range gaps {
			if g != least {
				irregular = true
			}
			least = min(least, g)
		}
		return max(least, 1), irregular, true
	case oldDurationRe.MatchString(s):
		units := map[string]int64{"s": 1, "m": 60, "h": 3600, "d": 86400}
		for _, m := range oldSegmentRe.FindAllStringSubmatch(s, -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			secs += n * units[m[2]]
		}
		return secs, false, secs > 0
	}
	return 0, false, false
}
