package main

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

var (
	insertTargetRe = regexp.MustCompile("(?is)^\\s*INSERT\\s+INTO\\s+(?:`?hr`?\\.)?`?([A-Za-z0-9_]+)`?")
	grantRe        = regexp.MustCompile("(?m)^\\s*([A-Z, ]+) ON `hr`\\.`([A-Za-z0-9_]+)`")
)

// The runner role `provision` prints covers every table a real `run` writes, notifications and
// suppression included. The written tables are not listed by hand: a `run` with a webhook sink
// and a suppressing hunt runs against a private engine, and its statement log says which
// tables it inserted into. Each must have INSERT in the printed role.
func TestRunnerRoleGrantsEveryTableRunWrites(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	opts, err := chtest.Options(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := schema.Apply(ctx, admin, "hr", schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	var delivered atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer sink.Close()
	dir := t.TempDir()
	hunt := "interval: 1h\nseverity: high\nsuppress: {by: [n], for: 1h}\nquery: |\n" +
		"  SELECT arrayJoin([1, 2, 3]) AS n\n  WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
	notifyCfg := filepath.Join(t.TempDir(), "notify.yaml")
	for path, body := range map[string]string{
		filepath.Join(dir, "three.yaml"): hunt,
		notifyCfg:                        "sinks:\n  - name: soc\n    type: webhook\n    url: " + sink.URL + "/hook\nroutes:\n  - sinks: [soc]\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var mark uint64
	if log := srv.StatementLog(t); len(log) > 0 {
		mark = log[len(log)-1].Seq // the fixture's schema is not the runner's work
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(runCtx, "run", "--clickhouse-url", srv.URL, "--database", "hr", "--hunts-dir", dir,
			"--notify-config", notifyCfg, "--tick", "200ms", "--settle", "100ms", "--lease", "10s",
			"--listen", "127.0.0.1:0", "--owner", "grants-test")
		done <- err
	}()
	written := func() map[string]bool {
		out := map[string]bool{}
		for _, st := range srv.StatementsSince(t, mark) {
			if st.Kind == ctl.KindInsert && st.ErrorCode == 0 {
				if m := insertTargetRe.FindStringSubmatch(st.SQL); m != nil {
					out[m[1]] = true
				}
			}
		}
		return out
	}
	var tables map[string]bool
	ok := chtest.Poll(time.Minute, func() bool {
		tables = written()
		return delivered.Load() > 0 && tables[schema.TableDelivery] && tables[schema.TableSuppress] && tables[schema.TableFindings]
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run ended with %v after its context was cancelled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	if !ok {
		t.Fatalf("within a minute the run did not deliver, suppress and store findings; it wrote %v", slices.Sorted(maps.Keys(tables)))
	}
	tables = written() // with what the shutdown wrote

	role, err := runApp(t, "provision", "--role", "runner", "--database", "hr")
	if err != nil {
		t.Fatalf("provision: %v\n%s", err, role)
	}
	inserts := map[string]bool{}
	for _, m := range grantRe.FindAllStringSubmatch(role, -1) {
		if slices.Contains(strings.Split(m[1], ", "), "INSERT") {
			inserts[m[2]] = true
		}
	}
	for _, tbl := range slices.Sorted(maps.Keys(tables)) {
		if !inserts[tbl] {
			t.Errorf("run inserted into %s, but the runner role has no INSERT on it:\n%s", tbl, role)
		}
	}
	t.Logf("run wrote %v", slices.Sorted(maps.Keys(tables)))
}
