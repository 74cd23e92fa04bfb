package main

// The first hour of a new operator: the steps of the README's first install, run as written,
// and the CLI manners they trip over.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
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
func getJSON(t *testing.T, url string, done <-chan error) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			defer resp.Body.Close()
			var body map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
			}
			return body
		}
		select {
		case err := <-done:
			t.Fatalf("server exited before answering: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: never answered: %v", url, err)
		}
	}
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
