package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/notify"
)

const notifyHuntFile = `id: brute
interval: 5m
notify: [soc, pager]
query: SELECT 1 FROM t WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}
`

// validate --notify-config: the file's problems at their line and column (path as given), and
// a hunt naming a sink the file lacks, at the hunt's file.
func TestValidateNotifyConfig(t *testing.T) {
	dir := t.TempDir()
	hunts := filepath.Join(dir, "hunts")
	if err := os.Mkdir(hunts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hunts, "brute.yaml"), []byte(notifyHuntFile), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "notify.yaml")
	if err := os.WriteFile(good, []byte("sinks:\n  - {name: soc, type: webhook, url: 'http://hooks.internal/x'}\nroutes:\n  - sinks: [soc]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runApp(t, "validate", "--notify-config", good, hunts)
	if exitCode(err) != exitError || !strings.Contains(out, filepath.Join(hunts, "brute.yaml")+":1:1: notify: sink \"pager\" is not defined in "+good) {
		t.Errorf("unknown sink: exit %d, output:\n%s", exitCode(err), out)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("sinks:\n  - name: soc\n    type: webhook\n    url: http://user:pw@hooks.internal/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runApp(t, "validate", "--notify-config", bad, hunts)
	if exitCode(err) != exitError || !strings.Contains(out, bad+":4:10: url carries credentials") || strings.Contains(out, "pw@") {
		t.Errorf("bad config: exit %d, output:\n%s", exitCode(err), out)
	}
	if _, err := runApp(t, "run", "--notify-config", bad, "--hunts-dir", hunts); exitCode(err) != exitUsage {
		t.Errorf("run with a bad notify config: exit %d (%v), want %d", exitCode(err), err, exitUsage)
	}
}

// findings prints committed findings only; notify status and retry read the delivery table.
func TestFindingsAndNotifyCommands(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	// One fire for both tables, taken once: a finding is committed only when the watermark
	// holds its exact (hunt, fire, run), so a now() in each INSERT made the two rows name
	// different seconds whenever a loaded machine let a second boundary pass between them.
	// The fire is on the local clock, as the command's --since window is.
	fire := fmt.Sprintf("toDateTime(%d, 'UTC')", time.Now().Add(-time.Minute).Unix())
	for _, q := range []string{
		"INSERT INTO " + db.Name + ".hunt_findings (hunt_id, fire, finding_id, finding, severity, labels, run_id, found) VALUES " +
			"('brute', " + fire + ", 1, '{\"host\":\"committed\"}', 'high', map(), toUUID('11111111-1111-1111-1111-111111111111'), now64(6))," +
			"('brute', " + fire + ", 2, '{\"host\":\"orphan\"}', 'high', map(), toUUID('22222222-2222-2222-2222-222222222222'), now64(6))",
		"INSERT INTO " + db.Name + ".hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_rows) VALUES " +
			"('brute', " + fire + ", generateUUIDv4(), now64(6), toUUID('11111111-1111-1111-1111-111111111111'), 1)",
	} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	ch := []string{"--clickhouse-url", db.URL, "--database", db.Name}
	out, err := runApp(t, append([]string{"findings", "brute", "--json"}, ch...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var fs []notify.Finding
	if err := json.Unmarshal([]byte(out), &fs); err != nil || len(fs) != 1 || !strings.Contains(string(fs[0].Finding), "committed") {
		t.Errorf("findings --json: %v\n%s", err, out)
	}
	out, err = runApp(t, append([]string{"notify", "status"}, ch...)...)
	if err != nil || !strings.Contains(out, "0 pending, 0 delivered, 0 dead") {
		t.Errorf("notify status: %v\n%s", err, out)
	}
	if _, err := runApp(t, append([]string{"notify", "retry"}, ch...)...); exitCode(err) != exitUsage {
		t.Errorf("notify retry without a filter: exit %d, want %d", exitCode(err), exitUsage)
	}
	out, err = runApp(t, append([]string{"notify", "retry", "--all"}, ch...)...)
	if err != nil || !strings.Contains(out, "re-queued 0 dead letters") {
		t.Errorf("notify retry --all: %v\n%s", err, out)
	}
}
