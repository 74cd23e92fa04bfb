package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validate --notify-config reports a malformed time interval and an unknown interval name at
// their file, line and column.
func TestValidateMuteTimeIntervals(t *testing.T) {
	dir := t.TempDir()
	hunts := filepath.Join(dir, "hunts")
	if err := os.Mkdir(hunts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hunts, "brute.yaml"), []byte(notifyHuntFile), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "notify.yaml")
	if err := os.WriteFile(cfg, []byte(`time_intervals:
  - name: nights
    time_intervals:
      - times: [{start_time: "22:00", end_time: "25:00"}]
sinks:
  - {name: soc, type: webhook, url: 'http://hooks.internal/x', mute_time_intervals: [nights]}
  - {name: pager, type: webhook, url: 'http://hooks.internal/y'}
routes:
  - sinks: [soc]
    mute_time_intervals: [weekend]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runApp(t, "validate", "--notify-config", cfg, hunts)
	if exitCode(err) != exitError {
		t.Errorf("exit %d, want %d", exitCode(err), exitError)
	}
	for _, want := range []string{
		cfg + `:4:16: time interval "nights": times: `,
		cfg + `:10:27: mute_time_intervals names "weekend", which is not defined under time_intervals:`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
