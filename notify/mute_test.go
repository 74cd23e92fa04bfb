package notify

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

const muteConfig = `
time_intervals:
  - name: nights
    time_intervals:
      - times:
          - start_time: "22:00"
            end_time: "24:00"
          - start_time: "00:00"
            end_time: "07:00"
        location: UTC
  - name: weekends
    time_intervals:
      - weekdays: [saturday, sunday]
sinks:
  - name: pager
    type: webhook
    url: http://pager.internal/hook
    mute_time_intervals: [nights]
  - name: soc
    type: webhook
    url: http://soc.internal/hook
routes:
  - match: {severity: low}
    sinks: [soc]
    mute_time_intervals: [weekends]
  - sinks: [pager, soc]
`

func TestMuteTimeIntervals(t *testing.T) {
	cfg, err := ParseConfig("notify.yaml", []byte(muteConfig))
	if err != nil {
		t.Fatal(err)
	}
	low := &hunt.Hunt{ID: "l", Severity: "low"}
	high := &hunt.Hunt{ID: "h", Severity: "high"}
	own := &hunt.Hunt{ID: "o", Severity: "low", Notify: []string{"soc"}}
	wedNight := time.Date(2026, 12, 2, 23, 30, 0, 0, time.UTC) // a Wednesday
	wedDay := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	satDay := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		h    *hunt.Hunt
		sink string
		at   time.Time
		want string
	}{
		{high, "pager", wedNight, "muted by time interval nights"},
		{high, "pager", wedDay, ""},
		{high, "soc", wedNight, ""}, // soc has no interval of its own
		{high, "soc", satDay, ""},   // the weekend route is not high's
		{low, "soc", satDay, "muted by time interval weekends"},
		{low, "soc", wedDay, ""},
		{own, "soc", satDay, ""}, // notify: bypasses routes, and their mutes
	} {
		why, ok := cfg.MutedBy(tt.h, tt.sink, store.Snooze{}, tt.at)
		if why != tt.want || ok != (tt.want != "") {
			t.Errorf("%s→%s at %s: muted %v %q, want %q", tt.h.ID, tt.sink, tt.at, ok, why, tt.want)
		}
	}
	z := store.Snooze{HuntID: "h", Until: wedDay.Add(time.Hour), Reason: "change window", By: "ana", Updated: wedDay.Add(-time.Hour)}
	if why, ok := cfg.MutedBy(high, "soc", z, wedDay); !ok || !strings.Contains(why, "snoozed by ana") || !strings.Contains(why, "change window") {
		t.Errorf("live snooze: %v %q", ok, why)
	}
	if _, ok := cfg.MutedBy(high, "soc", z, wedDay.Add(time.Hour)); ok {
		t.Error("a snooze mutes at its end")
	}
	forever := store.Snooze{HuntID: "h", By: "ana", Updated: wedDay}
	if _, ok := cfg.MutedBy(high, "soc", forever, satDay.AddDate(1, 0, 0)); !ok {
		t.Error("a snooze without an end does not mute")
	}
}

func TestMuteConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"unknown name on a sink", `
sinks:
  - name: a
    type: webhook
    url: http://a/
    mute_time_intervals: [nights]
`, `notify.yaml:6:27: mute_time_intervals names "nights", which is not defined under time_intervals:`},
		{"unknown name on a route", `
time_intervals:
  - name: nights
sinks:
  - {name: a, type: webhook, url: "http://a/"}
routes:
  - sinks: [a]
    mute_time_intervals: [night]
`, `notify.yaml:8:27: mute_time_intervals names "night", which is not defined`},
		{"malformed time", `
time_intervals:
  - name: nights
    time_intervals:
      - times:
          - start_time: "25:00"
            end_time: "26:00"
sinks:
  - {name: a, type: webhook, url: "http://a/"}
`, `notify.yaml:6:11: time interval "nights": times:`},
		{"bad weekday", `
time_intervals:
  - name: nights
    time_intervals:
      - weekdays: [funday]
sinks:
  - {name: a, type: webhook, url: "http://a/"}
`, `notify.yaml:5:19: time interval "nights": weekdays: `},
		{"bad location", `
time_intervals:
  - name: nights
    time_intervals:
      - location: Mars/Olympus
sinks:
  - {name: a, type: webhook, url: "http://a/"}
`, `notify.yaml:5:19: time interval "nights": location: `},
		{"unknown interval key", `
time_intervals:
  - name: nights
    time_intervals:
      - hours: [1]
sinks:
  - {name: a, type: webhook, url: "http://a/"}
`, `notify.yaml:5:9: time interval "nights": unknown key "hours"`},
		{"defined twice", `
time_intervals:
  - name: n
  - name: n
sinks:
  - {name: a, type: webhook, url: "http://a/"}
`, `notify.yaml:4:5: time interval "n" is defined twice (first at line 3)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("notify.yaml", []byte(tt.yaml))
			var ce ConfigErrors
			if !errors.As(err, &ce) {
				t.Fatalf("want ConfigErrors, got %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got\n%v\nwant it to contain\n%s", err, tt.want)
			}
		})
	}
}
