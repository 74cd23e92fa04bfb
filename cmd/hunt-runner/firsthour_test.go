package main

// The first hour of a new operator: the steps of the README's first install, run as written,
// and the CLI manners they trip over.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/status"
)

// fresh gives a test a database that does not exist yet (schema creates it) and the connection
// flags that reach it.
func fresh(t *testing.T) (*chtest.DB, string, []string) {
	t.Helper()
	db := chtest.New(t)
	name := db.Name + "_new"
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name) })
	t.Setenv(passwordEnv, "")
	return db, name, []string{"--clickhouse-url", db.URL, "--database", name, "--clickhouse-connect-timeout", "10s"}
}

// getJSON polls url until the server answers (it may still be starting), then decodes the body.
func getJSON(t *testing.T, url string, done chan error) map[string]any {
	t.Helper()
	var resp *http.Response
	var err error
	if !chtest.Poll(30*time.Second, func() bool {
		select {
		case err := <-done:
			done <- err // the test's cleanup waits on it too
			t.Fatalf("server exited before answering: %v", err)
		default:
		}
		resp, err = http.Get(url)
		return err == nil
	}) {
		t.Fatalf("GET %s: never answered: %v", url, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return body
}

// TestShimAnswersTheBacklogRightAfterSchemaAndMaterialise is the "KEDA reads 0 forever" trap:
// after `schema` and `materialise`, and nothing else, the shim's endpoint must answer the
// same number as `due`, from ClickHouse (not a cold hold).
func TestShimAnswersTheBacklogRightAfterSchemaAndMaterialise(t *testing.T) {
	_, _, conn := fresh(t)
	if out, err := runApp(t, append([]string{"schema"}, conn...)...); err != nil {
		t.Fatalf("schema: %v\n%s", err, out)
	}
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: hunt-a\ninterval: 5m\n"+huntQuery)
	writeHunt(t, dir, "b.yaml", "id: hunt-b\ninterval: 1h\n"+huntQuery)
	if out, err := runApp(t, append([]string{"materialise", "--hunts-dir", dir}, conn...)...); err != nil {
		t.Fatalf("materialise: %v\n%s", err, out)
	}
	out, err := runApp(t, append([]string{"due"}, conn...)...)
	if err != nil || out != "2\n" {
		t.Fatalf("due: %v %q", err, out)
	}

	listen := closedPort(t)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(ctx, append([]string{"shim", "--listen", listen, "--timeout", "20s"}, conn...)...)
		done <- err
	}()
	t.Cleanup(func() { stop(); <-done })
	body := getJSON(t, "http://"+listen+"/keda/hunt-backlog", done)
	if body["value"] != float64(2) || body["cold"] == true {
		t.Fatalf("/keda/hunt-backlog = %v, want the due count 2, not cold", body)
	}
}

// TestSchemaRefreshesTheBacklogView: a view left by an older release (or by hand) is replaced
// by the current definition, so a changed due query reaches KEDA with the next `schema`.
func TestSchemaRefreshesTheBacklogView(t *testing.T) {
	db, name, conn := fresh(t)
	if _, err := runApp(t, append([]string{"schema"}, conn...)...); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn.Exec(t.Context(), "CREATE OR REPLACE VIEW "+name+".hunt_backlog_v1 AS SELECT toUInt64(42) AS value"); err != nil {
		t.Fatal(err)
	}
	out, err := runApp(t, append([]string{"schema"}, conn...)...)
	if err != nil || !strings.HasPrefix(out, "schema up to date: nothing to do") {
		t.Fatalf("second schema: %v\n%s", err, out)
	}
	var v uint64
	if err := db.Conn.QueryRow(t.Context(), "SELECT value FROM "+name+".hunt_backlog_v1").Scan(&v); err != nil || v != 0 {
		t.Fatalf("backlog view after schema = %d, %v; want the real count 0, not the stale 42", v, err)
	}
}

// TestTriggerRefusesUnknownAndDisabledHunts: a request no runner would ever run is an error,
// not a silent exit 0, unless --force.
func TestTriggerRefusesUnknownAndDisabledHunts(t *testing.T) {
	db, name, conn := fresh(t)
	if _, err := runApp(t, append([]string{"schema"}, conn...)...); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: hunt-a\ninterval: 5m\n"+huntQuery)
	writeHunt(t, dir, "b.yaml", "id: hunt-b\ninterval: 5m\n"+huntQuery)
	if _, err := runApp(t, append([]string{"materialise", "--hunts-dir", dir}, conn...)...); err != nil {
		t.Fatal(err)
	}
	// hunt-b is disabled after it was published: materialise tombstones it.
	writeHunt(t, dir, "b.yaml", "id: hunt-b\ninterval: 5m\nenabled: false\n"+huntQuery)
	if _, err := runApp(t, append([]string{"materialise", "--hunts-dir", dir}, conn...)...); err != nil {
		t.Fatal(err)
	}
	requests := func() uint64 {
		t.Helper()
		var n uint64
		if err := db.Conn.QueryRow(t.Context(), "SELECT count() FROM "+name+".hunt_request").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for id, want := range map[string]string{"no-such-hunt": "not in the published schedule", "hunt-b": "disabled or removed"} {
		_, err := runApp(t, append([]string{"trigger", id}, conn...)...)
		if schedExit(err) != exitError || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--force") {
			t.Errorf("trigger %s: exit %d, %v", id, schedExit(err), err)
		}
	}
	if n := requests(); n != 0 {
		t.Fatalf("refused triggers queued %d requests", n)
	}
	if out, err := runApp(t, append([]string{"trigger", "hunt-a"}, conn...)...); err != nil || !strings.Contains(out, "queued hunt-a") {
		t.Fatalf("trigger hunt-a: %v\n%s", err, out)
	}
	if out, err := runApp(t, append([]string{"trigger", "no-such-hunt", "--force"}, conn...)...); err != nil || !strings.Contains(out, "warning:") {
		t.Fatalf("trigger --force: %v\n%s", err, out)
	}
	if n := requests(); n != 2 {
		t.Fatalf("%d requests queued, want 2", n)
	}
}

// lockedBuffer collects what goroutines write (a logger, a server) for the test to read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runLogged runs the CLI like runAppContext, with its logs (JSON) going to logs.
func runLogged(ctx context.Context, logs *lockedBuffer, args ...string) (string, error) {
	app := newApp()
	out := &lockedBuffer{}
	app.Writer, app.ErrWriter = out, out
	app.ExitErrHandler = func(*cli.Context, error) {}
	app.Metadata = map[string]any{logWriterKey: logs}
	err := app.RunContext(ctx, append([]string{"hunt-runner"}, args...))
	return out.String(), err
}

func connectTimeoutDefault(t *testing.T, command string) time.Duration {
	t.Helper()
	for _, c := range newApp().Commands {
		if c.Name != command {
			continue
		}
		for _, f := range c.Flags {
			if g, ok := f.(*cli.GenericFlag); ok && g.Name == "clickhouse-connect-timeout" {
				return time.Duration(*g.Value.(*durationValue))
			}
		}
	}
	t.Fatalf("command %s has no --clickhouse-connect-timeout", command)
	return 0
}

// TestInteractiveCommandsFailFast: a person waits seconds, not half a minute, to hear that
// ClickHouse is down, and hears what was tried (password redacted) and what to change. The
// long-running commands keep retrying long enough for servers started in any order.
func TestInteractiveCommandsFailFast(t *testing.T) {
	for _, c := range []string{"due", "status", "trigger", "materialise", "schema", "provision"} {
		if d := connectTimeoutDefault(t, c); d > 5*time.Second {
			t.Errorf("%s waits %s for an unreachable ClickHouse by default, want at most 5s", c, d)
		}
	}
	for _, c := range []string{"run", "shim"} {
		if d := connectTimeoutDefault(t, c); d < 30*time.Second {
			t.Errorf("%s gives up on ClickHouse after %s, want the patient 30s", c, d)
		}
	}

	secret := rand.Text()
	t.Setenv(passwordEnv, secret) // passwords never travel in the URL
	url := "http://bob@" + closedPort(t)
	for _, args := range [][]string{{"due"}} {
		var logs lockedBuffer
		_, err := runLogged(t.Context(), &logs, append(args, "--clickhouse-url", url)...)
		if schedExit(err) != exitError {
			t.Fatalf("%s with ClickHouse down: exit %d, %v", args[0], schedExit(err), err)
		}
		msg := err.Error()
		if strings.Contains(msg, secret) {
			t.Fatalf("%s: the password is in the error: %s", args[0], msg)
		}
		for _, want := range []string{"http://bob@127.0.0.1:", "refused", "tried for 5s", "--clickhouse-url", "--clickhouse-connect-timeout"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: the error lacks %q: %s", args[0], want, msg)
			}
		}
	}
}

// TestConnectionChatterOnlyAtDebug: a command that works logs nothing about connecting at info.
func TestConnectionChatterOnlyAtDebug(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	conn := []string{"--clickhouse-url", db.URL, "--database", db.Name}
	var logs lockedBuffer
	out, err := runLogged(t.Context(), &logs, append([]string{"due"}, conn...)...)
	if err != nil || out != "0\n" {
		t.Fatalf("due: %v %q", err, out)
	}
	if strings.Contains(logs.String(), "connected to ClickHouse") {
		t.Errorf("due logged the connection at info:\n%s", logs.String())
	}
	var debug lockedBuffer
	if _, err := runLogged(t.Context(), &debug, append([]string{"--log-level", "debug", "due"}, conn...)...); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(debug.String(), "connected to ClickHouse") {
		t.Errorf("no connection line at debug:\n%s", debug.String())
	}
}

// TestRunStartupLogIsReadable: the start-up line carries the version and flat, readable values
// (no Go struct), with a UTC RFC 3339 time.
func TestRunStartupLogIsReadable(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: hunt-a\ninterval: 1h\n"+huntQuery)
	ctx, stop := context.WithCancel(t.Context())
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() {
		_, err := runLogged(ctx, &logs, "run", "--clickhouse-url", db.URL, "--database", db.Name, "--hunts-dir", dir,
			"--listen", "127.0.0.1:0", "--owner", "startup-test")
		done <- err
	}()
	var line string
	if !chtest.Poll(time.Minute, func() bool {
		// Whether run has exited is taken before the log is read: a run that wrote its line
		// and then exited has the line in the log.
		exited := false
		var err error
		select {
		case err = <-done:
			done <- err // the stop below waits on it
			exited = true
		default:
		}
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"hunt-runner run starting"`) {
				line = l
			}
		}
		if line == "" && exited {
			t.Fatalf("run exited before its start-up line: %v\n%s", err, logs.String())
		}
		return line != ""
	}) {
		stop()
		t.Fatalf("no start-up line within a minute:\n%s", logs.String())
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("run did not stop within a minute of its context ending:\n%s", logs.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("start-up line is not one JSON object: %v\n%s", err, line)
	}
	if got["version"] != buildVersion() || buildVersion() == "" {
		t.Errorf("start-up line version %v, want %q", got["version"], buildVersion())
	}
	for k, v := range got {
		if s, ok := v.(string); ok && (strings.Contains(s, "{") || strings.Contains(s, "Options")) {
			t.Errorf("start-up attribute %s dumps a struct: %s", k, s)
		}
	}
	if ts, _ := got["time"].(string); !strings.HasSuffix(ts, "Z") {
		t.Errorf("log time %q is not UTC", ts)
	}
	if got["clickhouse_url"] == nil {
		t.Errorf("start-up line lacks the ClickHouse URL: %s", line)
	}
}

// TestVersion: --version prints what the build stamped, or the module's build info.
func TestVersion(t *testing.T) {
	out, err := runApp(t, "--version")
	if err != nil || out != "hunt-runner version "+buildVersion()+"\n" {
		t.Fatalf("--version: %v %q", err, out)
	}
	if v := buildVersion(); v == "" || v == "(devel)" {
		t.Errorf("version %q says nothing", v)
	}
	defer func(v string) { version = v }(version)
	version = "v9.8.7"
	if buildVersion() != "v9.8.7" {
		t.Errorf("the stamped version is ignored: %q", buildVersion())
	}
}

// TestStatusShowsDurationsAsHuntFilesWriteThem: 5m, not 300s; a retired hunt is said to be
// retired, not shown as "0s 0s false".
func TestStatusShowsDurationsAsHuntFilesWriteThem(t *testing.T) {
	var b strings.Builder
	printStatus(&b, status.Report{Now: "2026-12-01T10:00:00Z", Hunts: []status.Hunt{
		{HuntID: "live", IntervalSeconds: 300, OffsetSeconds: 150, Enabled: true, BehindSeconds: 3600},
		{HuntID: "paused", IntervalSeconds: 86400, OffsetSeconds: 0},
		{HuntID: "gone"},
	}})
	rows := map[string][]string{}
	for _, l := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			rows[f[0]] = f[1:8]
		}
	}
	for id, want := range map[string][]string{
		"live":   {"5m", "+2m30s", "yes", "-", "-", "-", "1h"},
		"paused": {"1d", "+0s", "no", "-", "-", "-", "0s"},
		"gone":   {"-", "-", "retired", "-", "-", "-", "0s"},
	} {
		if got := strings.Join(rows[id], " "); got != strings.Join(want, " ") {
			t.Errorf("%s: %q, want %q\n%s", id, got, strings.Join(want, " "), b.String())
		}
	}
}

// TestLogTimesAreReadable: log times and the runner's epoch-second attributes come out as UTC
// RFC 3339, in both log formats.
func TestLogTimesAreReadable(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var b strings.Builder
		log := buildLogger(&b, "info", format)
		log.Info("run", "fire", int64(1767366245), "window_start", int64(1767366000), "rows", int64(1767366245),
			"at", time.Date(2026, 1, 2, 16, 4, 5, 0, time.FixedZone("CET", 3600)))
		out := b.String()
		for _, want := range []string{"2026-01-02T15:04:05Z", "2026-01-02T15:00:00Z", "rows\":1767366245", "2026-01-02T15:04:05Z"} {
			if format == "text" {
				want = strings.ReplaceAll(want, "\":", "=")
			}
			if !strings.Contains(out, want) {
				t.Errorf("%s log lacks %s:\n%s", format, want, out)
			}
		}
		if strings.Contains(out, "fire\":1767366245") || strings.Contains(out, "fire=1767366245") || strings.Contains(out, "+01:00") {
			t.Errorf("%s log has an epoch or a local time:\n%s", format, out)
		}
	}
}

// TestDevPrintsHowToQueryFindings runs the commands `dev` prints, as a person would paste them
// into a shell, against the engine.
func TestDevPrintsHowToQueryFindings(t *testing.T) {
	db := chtest.NewWithSchema(t)
	// A committed run (its commit row in hunt_watermark) and one finding of it.
	run := "11111111-2222-3333-4444-555555555555"
	if err := db.Conn.Exec(t.Context(), "INSERT INTO "+db.Name+".hunt_watermark (hunt_id, watermark, updated, run_id) VALUES ('it''s-a-hunt', now(), now64(6), '"+run+"')"); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn.Exec(t.Context(), "INSERT INTO "+db.Name+".hunt_findings (hunt_id, fire, finding, run_id, found) VALUES ('it''s-a-hunt', now(), '{\"user\":\"mallory\"}', '"+run+"', now64(6))"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printFindingsHowTo(&b, db.URL, db.Name, "hunt-runner")
	text := b.String()
	if !strings.Contains(text, db.Name+".hunt_findings_committed") {
		t.Fatalf("dev does not name the committed findings view:\n%s", text)
	}
	var curl string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "curl ") {
			curl = strings.TrimSpace(l)
		}
	}
	if _, err := exec.LookPath("curl"); err != nil || curl == "" {
		t.Skipf("no curl (%v) or no curl line:\n%s", err, text)
	}
	out, err := exec.Command("sh", "-c", curl).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mallory") || strings.Contains(string(out), "Exception") {
		t.Fatalf("%s\n→ %v\n%s", curl, err, out)
	}
}
