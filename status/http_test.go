package status

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

func serveFixture(t *testing.T, db *fix, entries []hunt.Hunt) *httptest.Server {
	t.Helper()
	w := &Web{Store: db.store(), Database: db.Name,
		Entries: func() []hunt.Hunt { return entries }}
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// The list's objects have exactly the keys issue 15 fixed, and last_run exactly its four.
func TestAPIHuntsShape(t *testing.T) {
	db := fixture(t)
	srv := serveFixture(t, db, fixtureEntries())
	code, ctype, body := get(t, srv.URL+"/api/v1/hunts")
	if code != 200 || ctype != "application/json" {
		t.Fatalf("GET /api/v1/hunts = %d %s\n%s", code, ctype, body)
	}
	var raw map[string][]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &raw); err != nil || len(raw) != 1 {
		t.Fatalf("body %v: %s", err, body)
	}
	want := []string{"behind_seconds", "consecutive_failures", "file_problem", "id", "interval_seconds", "last_run", "next_fire", "paused",
		"phase_offset", "stale", "state", "watermark"}
	ids := []string{}
	for _, h := range raw["hunts"] {
		var id string
		_ = json.Unmarshal(h["id"], &id)
		ids = append(ids, id)
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range h {
				if !yield(k) {
					return
				}
			}
		})
		if !slices.Equal(keys, want) {
			t.Errorf("%s has keys %v, want %v", id, keys, want)
		}
		if string(h["last_run"]) != "null" {
			var lr map[string]json.RawMessage
			_ = json.Unmarshal(h["last_run"], &lr)
			if len(lr) != 4 || lr["status"] == nil || lr["finished"] == nil || lr["rows"] == nil || lr["error"] == nil {
				t.Errorf("%s last_run = %s", id, h["last_run"])
			}
		}
	}
	if strings.Join(ids, ",") != "failing,fresh,ghost,healthy,monthly,quiet" {
		t.Errorf("hunts %v", ids)
	}
	var typed struct{ Hunts []APIHunt }
	_ = json.Unmarshal([]byte(body), &typed)
	for _, h := range typed.Hunts {
		if h.ID == "failing" && (h.ConsecutiveFailures != 8 || h.BehindSeconds < 420 || h.LastRun == nil ||
			h.LastRun.Status != "failed" || h.Watermark != nil || h.NextFire == nil || h.Paused) {
			t.Errorf("failing = %+v", h)
		}
	}
}

func TestAPIHuntDetailAndRunners(t *testing.T) {
	db := fixture(t)
	srv := serveFixture(t, db, fixtureEntries())
	code, _, body := get(t, srv.URL+"/api/v1/hunts/failing")
	var d APIHuntDetail
	if err := json.Unmarshal([]byte(body), &d); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/hunts/failing = %d %v\n%s", code, err, body)
	}
	if d.ID != "failing" || len(d.Runs) != 8 || d.Runs[0].Status != "failed" || d.Runs[0].Owner != "pod-b" ||
		d.Runs[0].Finished < d.Runs[7].Finished {
		t.Errorf("detail %+v", d)
	}
	if code, _, body := get(t, srv.URL+"/api/v1/hunts/healthy"); code != 200 ||
		!strings.Contains(body, `"status": "gap"`) || !strings.Contains(body, `"status": "succeeded"`) {
		t.Errorf("healthy detail lacks its commit and gap rows: %d\n%s", code, body)
	}
	if code, _, _ := get(t, srv.URL+"/api/v1/hunts/nope"); code != 404 {
		t.Errorf("unknown hunt = %d, want 404", code)
	}
	code, _, body = get(t, srv.URL+"/api/v1/runners")
	var rr RunnersReport
	if err := json.Unmarshal([]byte(body), &rr); code != 200 || err != nil {
		t.Fatalf("GET /api/v1/runners = %d %v\n%s", code, err, body)
	}
	owners := map[string]Runner{}
	for _, r := range rr.Runners {
		owners[r.Owner] = r
	}
	if owners["pod-a"].LiveLeases != 1 || owners["pod-b"].RunsInWindow != 8 || owners["pod-c"].RunsInWindow != 1 ||
		len(owners) != 3 || !strings.Contains(rr.Source, "heartbeat") {
		t.Errorf("runners %+v", rr)
	}
}

func TestAPIIsReadOnly(t *testing.T) {
	db := fixture(t)
	srv := serveFixture(t, db, nil)
	for _, p := range []string{"/api/v1/hunts", "/api/v1/hunts/failing", "/", "/hunts/failing"} {
		resp, err := http.Post(srv.URL+p, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST %s = %d, want 405", p, resp.StatusCode)
		}
	}
}

func TestPageAndAPIAnswer503WhenClickHouseFails(t *testing.T) {
	db := fixture(t)
	srv := serveFixture(t, db, nil)
	if err := db.Conn.Exec(t.Context(), "DROP VIEW "+db.Name+".hunt_runs"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/v1/hunts", "/"} {
		if code, _, _ := get(t, srv.URL+p); code != http.StatusServiceUnavailable {
			t.Errorf("%s with hunt_runs gone = %d, want 503", p, code)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	for sec, want := range map[int64]string{0: "0s", 45: "45s", 60: "1m", 200: "3m20s", 7500: "2h5m", 273600: "3d4h"} {
		if got := humanDuration(sec); got != want {
			t.Errorf("humanDuration(%d) = %q, want %q", sec, got, want)
		}
	}
	now := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	if got := until(now, "2026-01-02T10:04:00Z"); got != "in 4m" {
		t.Errorf("until = %q", got)
	}
}
