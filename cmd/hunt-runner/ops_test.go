package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// `run` serves the status page and API next to /metrics, and exports the hunt-health gauges
// the ops pack alerts on (the totals) and, with --metrics-per-hunt, per hunt: a failing hunt,
// a working one and a broken hunt file.
func TestRunServesStatusAPIAndHealthMetrics(t *testing.T) {
	db := chtest.NewWithSchema(t)
	dir := t.TempDir()
	files := map[string]string{
		"good.yaml":   "interval: 1h\nquery: |\n  SELECT arrayJoin([1, 2]) AS n\n  WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n",
		"broken.yaml": "interval: 1h\nquery: |\n  SELECT * FROM no_such_table\n  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n",
		"typo.yaml":   "interval: 1h\nqeury: SELECT 1\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(ctx, "run", "--hunts-dir", dir, "--tick", "200ms", "--settle", "100ms", "--lease", "10s",
			"--listen", addr, "--owner", "ops-test", "--clickhouse-url", db.URL, "--database", db.Name, "--metrics-per-hunt", "5")
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	})
	base := "http://" + addr

	var list struct {
		Hunts []struct {
			ID                  string `json:"id"`
			ConsecutiveFailures uint32 `json:"consecutive_failures"`
			BehindSeconds       int64  `json:"behind_seconds"`
			LastRun             *struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			} `json:"last_run"`
		} `json:"hunts"`
	}
	var last string
	if !chtest.Poll(time.Minute, func() bool {
		code, body := httpGet(base + "/api/v1/hunts")
		last = body
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
			return false
		}
		seen := map[string]string{}
		for _, h := range list.Hunts {
			if h.LastRun != nil {
				seen[h.ID] = h.LastRun.Status
			}
			if h.ID == "broken" && (h.ConsecutiveFailures == 0 || h.LastRun == nil) {
				return false
			}
		}
		return seen["good"] == "succeeded" && seen["broken"] == "failed"
	}) {
		t.Fatalf("the API did not show good succeeded and broken failing within a minute; last seen:\n%s", last)
	}

	if !chtest.Poll(time.Minute, func() bool {
		_, m := httpGet(base + "/metrics")
		for _, want := range []string{`hunt_runner_consecutive_failures{hunt_id="broken"}`, `hunt_runner_never_succeeded{hunt_id="broken"} 1`,
			`hunt_runner_last_success_timestamp_seconds{hunt_id="good"}`,
			`hunt_runner_reloads_total{outcome="ok"}`, `hunt_runner_hunt_interval_seconds{hunt_id="good"} 3600`,
			"hunt_runner_hunts_failing 1\n", "hunt_runner_metrics_hunts_omitted 0\n"} {
			if !strings.Contains(m, want) {
				last = "lacks " + want + "\n" + m
				return false
			}
		}
		// typo.yaml: an unknown key and no query.
		last = m
		return !strings.Contains(m, "hunt_runner_hunt_files_invalid 0\n") && strings.Contains(m, "hunt_runner_hunt_files_invalid ")
	}) {
		t.Fatalf("/metrics did not carry the hunt-health gauges within a minute; last seen:\n%s", last)
	}

	// The error says its cause in full, without the driver's framing or the server version.
	cause := regexp.MustCompile(`^hunt query: Code 60: Unknown table expression identifier 'no_such_table' in scope SELECT \* FROM no_such_table[^\n]* \(UNKNOWN_TABLE\)$`)
	for _, h := range list.Hunts {
		if h.ID == "broken" && (h.LastRun == nil || !cause.MatchString(h.LastRun.Error)) {
			t.Errorf("API error of broken: %+v, want %s", h.LastRun, cause)
		}
	}
	if _, page := httpGet(base + "/hunts/broken"); !regexp.MustCompile(`id="last-error" style="white-space: pre-wrap">hunt query: Code 60: [^<]*\(UNKNOWN_TABLE\)</dd>`).MatchString(page) {
		t.Errorf("the hunt's page does not show the whole error:\n%s", page)
	}
	out, err := runApp(t, "status", "broken", "--clickhouse-url", db.URL, "--database", db.Name)
	_, full, _ := strings.Cut(out, "error broken (failed ")
	_, full, _ = strings.Cut(full, "\n  ")
	if err != nil || !cause.MatchString(strings.TrimSuffix(full, "\n")) {
		t.Errorf("status broken does not print the whole error: %v\n%s", err, out)
	}
	code, page := httpGet(base + "/")
	if code != 200 || !strings.Contains(page, `id="hunt-broken" data-state="failing"`) || !strings.Contains(page, `href="/hunts/good"`) {
		t.Errorf("GET / = %d:\n%s", code, page)
	}
	if code, body := httpGet(base + "/api/v1/hunts/good"); code != 200 || !strings.Contains(body, `"runs"`) {
		t.Errorf("GET /api/v1/hunts/good = %d %s", code, body)
	}
	if code, body := httpGet(base + "/api/v1/runners"); code != 200 || !strings.Contains(body, `"ops-test"`) {
		t.Errorf("GET /api/v1/runners = %d %s", code, body)
	}
	if code, _ := httpGet(base + "/readyz"); code != 200 {
		t.Errorf("/readyz = %d", code)
	}
}
