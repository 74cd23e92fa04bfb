package alertmanagertest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	amconfig "github.com/prometheus/alertmanager/config"
	"github.com/prometheus/alertmanager/timeinterval"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/notify"
	"github.com/hunt-runner/hunt-runner/store"
)

// timeIntervalsYAML is one time_intervals block, pasted as is into an alertmanager.yml and into
// a notify config.
const timeIntervalsYAML = `time_intervals:
  - name: nights
    time_intervals:
      - times:
          - start_time: "22:00"
            end_time: "24:00"
          - start_time: "00:00"
            end_time: "07:30"
        weekdays: ['monday:friday']
        location: Europe/Berlin
  - name: holidays
    time_intervals:
      - days_of_month: ['1', '-1']
        months: ['november:december', 'july']
        years: ['2026:2030']
      - weekdays: [saturday, sunday]
  - name: never
`

// The notify config reads time_intervals exactly as Alertmanager's config loader does (the same
// intervals, field for field), and so mutes at exactly the moments Alertmanager would; and a
// block Alertmanager refuses is refused too.
func TestTimeIntervalsAgreeWithAlertmanager(t *testing.T) {
	am, err := amconfig.Load(timeIntervalsYAML + `route: {receiver: r, routes: [{receiver: r, mute_time_intervals: [nights, holidays, never]}]}
receivers: [{name: r}]
`)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := notify.ParseConfig("notify.yaml", []byte(timeIntervalsYAML+`sinks:
  - {name: r, type: webhook, url: "http://r/", mute_time_intervals: [nights, holidays, never]}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]timeinterval.TimeInterval{}
	for _, ti := range am.TimeIntervals {
		want[ti.Name] = ti.TimeIntervals
	}
	if len(want) != len(ours.TimeIntervals) {
		t.Fatalf("intervals: Alertmanager %d, notify %d", len(want), len(ours.TimeIntervals))
	}
	for name, tis := range want {
		if len(tis) == 0 && len(ours.TimeIntervals[name]) == 0 {
			continue
		}
		if !reflect.DeepEqual(tis, ours.TimeIntervals[name]) {
			t.Errorf("%s: Alertmanager %+v, notify %+v", name, tis, ours.TimeIntervals[name])
		}
	}
	amI := timeinterval.NewIntervener(want)
	h := &hunt.Hunt{ID: "h"}
	start := time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)
	for m := 0; m < 3*24*60; m += 7 {
		at := start.Add(time.Duration(m) * time.Minute)
		wantMuted, _, _ := amI.Mutes([]string{"nights", "holidays", "never"}, at)
		_, gotMuted := ours.MutedBy(h, "r", store.Snooze{}, at)
		if wantMuted != gotMuted {
			t.Fatalf("at %s: Alertmanager muted %v, notify %v", at, wantMuted, gotMuted)
		}
	}

	for _, bad := range []string{
		"      - times: [{start_time: '07:00', end_time: '06:00'}]\n",
		"      - weekdays: ['funday']\n",
		"      - days_of_month: ['32']\n",
		"      - months: ['13']\n",
		"      - location: 'Nowhere/Atlantis'\n",
	} {
		block := "time_intervals:\n  - name: x\n    time_intervals:\n" + bad
		_, amErr := amconfig.Load(block + "route: {receiver: r}\nreceivers: [{name: r}]\n")
		_, ourErr := notify.ParseConfig("notify.yaml", []byte(block+"sinks:\n  - {name: r, type: webhook, url: 'http://r/'}\n"))
		if amErr == nil || ourErr == nil {
			t.Errorf("%q: Alertmanager error %v, notify error %v; want both refused", strings.TrimSpace(bad), amErr, ourErr)
		}
	}
}
