package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/status"
)

// serverRejected is a hunt only the server's parser refuses (`sample..auth_events`).
const serverRejected = "interval: 1h\nquery: |\n  SELECT count() AS n FROM sample..auth_events\n" +
	"  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"

// TestBrokenHuntFilesAreNeverSilent, on the engine: a file only the server rejects, and an edit
// that breaks a running hunt (kept at its last good definition), each reach
// hunt_runner_hunt_files_invalid / hunt_runner_hunts_stale (what HuntFilesInvalid alerts on),
// the banner of the status page, the API ("hunt_files", state "stale") and `status`.
func TestBrokenHuntFilesAreNeverSilent(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	dir := t.TempDir()
	writeHunt(t, dir, "good.yaml", "id: good\ninterval: 1h\n"+huntQuery)
	writeHunt(t, dir, "syntax.yaml", "id: syntax\n"+serverRejected)
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name}
	if out, err := runApp(t, append([]string{"materialise", "--hunts-dir", dir}, common...)...); err != nil {
		t.Fatalf("materialise: %v %s", err, out)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(ctx, append([]string{"run", "--hunts-dir", dir, "--tick", "200ms", "--settle", "100ms", "--lease", "10s",
			"--reload-interval", "200ms", "--listen", addr, "--owner", "files-test"}, common...)...)
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
	gauge := func(m, name string) string {
		if g := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindStringSubmatch(m); g != nil {
			return g[1]
		}
		return ""
	}
	var last string
	if !chtest.Poll(time.Minute, func() bool {
		_, last = httpGet(base + "/metrics")
		return gauge(last, "hunt_runner_hunt_files_invalid") == "1" && gauge(last, "hunt_runner_hunts_stale") == "0"
	}) {
		t.Fatalf("a server-rejected file is not counted:\n%s", last)
	}
	api := func() (out struct {
		Hunts     []status.APIHunt  `json:"hunts"`
		HuntFiles *status.HuntFiles `json:"hunt_files"`
	}) {
		t.Helper()
		_, body := httpGet(base + "/api/v1/hunts")
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return out
	}
	a := api()
	if a.HuntFiles == nil || a.HuntFiles.Invalid != 1 || len(a.HuntFiles.Problems) != 1 || !strings.HasSuffix(a.HuntFiles.Problems[0].File, "syntax.yaml") {
		t.Errorf("API hunt_files: %+v", a.HuntFiles)
	}
	if _, page := httpGet(base + "/"); !strings.Contains(page, `id="files-banner"`) || !strings.Contains(page, "syntax.yaml") {
		t.Errorf("no banner on the page:\n%s", page)
	}
	if p := a.HuntFiles.Problems[0].Message; !strings.Contains(p, "Syntax error") || strings.Contains(p, "hr_finding") || strings.Contains(p, "version") {
		t.Errorf("the problem quotes the wrapping statement or the version: %q", p)
	}
	out, err := runApp(t, append([]string{"status", "--hunts-dir", dir}, common...)...)
	if err != nil || !strings.Contains(out, "HUNT FILES HAVE PROBLEMS: 1 problem(s)") || !strings.Contains(out, "syntax.yaml:") {
		t.Errorf("status --hunts-dir does not show the server-rejected file: %v\n%s", err, out)
	}
	// Without a hunt source, status shows what the set's runner reported in its heartbeat (its
	// first beat is at its first tick, after the first load).
	if !chtest.Poll(time.Minute, func() bool {
		out, err = runApp(t, append([]string{"status"}, common...)...)
		return err == nil && strings.Contains(out, "HUNT FILES HAVE PROBLEMS (reported by runner files-test at ") &&
			strings.Contains(out, "1 problem(s)") && strings.Contains(out, "syntax.yaml:")
	}) {
		t.Errorf("plain status does not show the problems the runner reported: %v\n%s", err, out)
	}

	// An edit that breaks the running hunt: it keeps running its last good definition.
	writeHunt(t, dir, "good.yaml", "id: good\n"+serverRejected)
	if !chtest.Poll(time.Minute, func() bool {
		_, last = httpGet(base + "/metrics")
		return gauge(last, "hunt_runner_hunt_files_invalid") == "2" && gauge(last, "hunt_runner_hunts_stale") == "1"
	}) {
		t.Fatalf("a hunt held at its last good definition is not counted:\n%s", last)
	}
	a = api()
	var good status.APIHunt
	for _, h := range a.Hunts {
		if h.ID == "good" {
			good = h
		}
	}
	if !good.Stale || good.State != status.StateStale || good.FileProblem == nil || !strings.Contains(*good.FileProblem, "good.yaml") {
		t.Errorf("API of the stale hunt: %+v", good)
	}
	if a.HuntFiles == nil || len(a.HuntFiles.Stale) != 1 || a.HuntFiles.Stale[0].HuntID != "good" {
		t.Errorf("API hunt_files.stale: %+v", a.HuntFiles)
	}
	if _, page := httpGet(base + "/"); !strings.Contains(page, `class="stale-hunt"`) || !strings.Contains(page, `id="hunt-good" data-state="stale"`) {
		t.Errorf("the page does not show the stale hunt:\n%s", page)
	}
	if _, page := httpGet(base + "/hunts/good"); !strings.Contains(page, "runs its last good definition") {
		t.Errorf("the hunt's page does not say it is stale:\n%s", page)
	}
	out, _ = runApp(t, append([]string{"status", "--hunts-dir", dir}, common...)...)
	if !regexp.MustCompile(`(?m)^stale good: its file has a problem`).MatchString(out) {
		t.Errorf("status does not mark the stale hunt:\n%s", out)
	}
}
