package attrib_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// The comment is one JSON object whatever the ids hold, with empty keys left out.
func TestCommentIsJSONWhateverTheIDs(t *testing.T) {
	run := uuid.MustParse("5f0c6a3e-0000-4000-8000-000000000001")
	c := attrib.Comment{HuntID: "a\"}, \"kind\": \"live\\\n", Fire: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)),
		RunID: run, Revision: "abc", Kind: attrib.Backfill, RunnerID: "pod'1", HuntSet: "team-a"}
	var got map[string]string
	if err := json.Unmarshal([]byte(c.String()), &got); err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	want := map[string]string{"app": "hunt-runner", "hunt_id": c.HuntID, "fire": "2026-01-02T02:04:05Z", "run_id": run.String(),
		"revision": "abc", "kind": "backfill", "runner_id": "pod'1", "hunt_set": "team-a"}
	if len(got) != len(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if s := attrib.CoordinationComment("pod-1"); s != `{"app":"hunt-runner","kind":"coordination","runner_id":"pod-1"}` {
		t.Errorf("coordination comment %s", s)
	}
	if id := attrib.QueryID(run, "findings-2"); id != "hunt-runner:"+run.String()+":findings-2" {
		t.Errorf("query id %s", id)
	}
}

// A connection opened with LogComment puts it on every statement that sets none, including one
// with other per-statement settings; a statement's own log_comment wins.
func TestConnectionCommentOnEveryStatement(t *testing.T) {
	db := chtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := chstore.Options{URL: db.URL, Database: db.Name, SkipConsistency: true, LogComment: attrib.CoordinationComment("pod-7")}
	conn, err := chstore.Open(ctx, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	read := func(ctx context.Context) string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, "SELECT toString(getSetting('log_comment'))").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := read(ctx); got != attrib.CoordinationComment("pod-7") {
		t.Errorf("plain statement: log_comment %q", got)
	}
	other := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"join_use_nulls": 0}))
	if got := read(other); got != attrib.CoordinationComment("pod-7") {
		t.Errorf("statement with its own settings: log_comment %q", got)
	}
	own := attrib.Comment{HuntID: "h", Kind: attrib.Live}.String()
	if got := read(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"log_comment": own}))); got != own {
		t.Errorf("statement with its own log_comment: %q", got)
	}
}
