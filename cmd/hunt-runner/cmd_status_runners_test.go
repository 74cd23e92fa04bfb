package main

import (
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/status"
)

// The human status ends with the live runners, or says there are none and by which rule.
func TestStatusPrintsRunners(t *testing.T) {
	var b strings.Builder
	printStatus(&b, status.Report{Now: "2026-12-01T10:00:00Z", RunnersLive: status.LiveRule, Runners: []status.Runner{
		{Owner: "pod-a", Version: "v1.2.3", HuntSet: "default", Hunts: 7, SetHash: "0123456789abcdef",
			LastSeen: "2026-12-01T09:59:58.500Z", Started: "2026-11-30T08:00:00.000Z", Live: true},
	}})
	out := b.String()
	if !strings.Contains(out, "runners (last_tick within 2m0s") {
		t.Errorf("no runners heading:\n%s", out)
	}
	var row []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "pod-a" {
			row = f
		}
	}
	if want := "pod-a v1.2.3 default 7 0123456789ab 09:59:58.500 2026-11-30T08:00:00.000Z"; strings.Join(row, " ") != want {
		t.Errorf("runner row %q, want %q\n%s", strings.Join(row, " "), want, out)
	}
	b.Reset()
	printStatus(&b, status.Report{Now: "2026-12-01T10:00:00Z", RunnersLive: status.LiveRule})
	if !strings.Contains(b.String(), "runners: none live (last_tick within 2m0s") {
		t.Errorf("no runners: %s", b.String())
	}
}
