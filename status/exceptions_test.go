package status

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// The status page and API list a hunt's exceptions with owner, reason, expiry and the hits
// of its committed runs (summed over RecentWindow; a failed attempt's hits do not count).
func TestStatusShowsExceptionsWithHits(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	var now uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	fire := int64(now) / 60 * 60
	for i, hits := range []string{"map('exceptions#1', 3, 'corp-scanners#2', 1)", "map('exceptions#1', 4)"} {
		if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started, exception_hits)"+
			" SELECT 'logins', toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), ?, 'pod-a', toDateTime(?, 'UTC'), 1, now64(6), "+hits,
			fire-120+int64(i)*60, uuid.New(), fire-180+int64(i)*60); err != nil {
			t.Fatal(err)
		}
	}
	st := store.New(db.Conn, db.Name)
	if err := st.RecordRun(ctx, store.Run{HuntID: "logins", Fire: fire, Status: hunt.RunFailed, Started: time.Now(), Finished: time.Now(),
		ExceptionHits: map[string]uint64{"exceptions#1": 100}}); err != nil {
		t.Fatal(err)
	}
	entries := []hunt.Hunt{{ID: "logins", Interval: time.Minute, Enabled: true, Exceptions: []hunt.Exception{
		{ID: "exceptions#1", Owner: "secops@corp", Reason: "the <backup> server", Until: time.Date(2099, 1, 31, 0, 0, 0, 0, time.UTC)},
		{ID: "corp-scanners#2", List: "corp-scanners", Owner: "netops@corp", Reason: "the scanner", Until: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
	}}}
	w := &Web{Store: st, Database: db.Name, Entries: func() []hunt.Hunt { return entries }}
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	code, _, body := get(t, srv.URL+"/hunts/logins")
	if code != 200 {
		t.Fatalf("GET /hunts/logins = %d\n%s", code, body)
	}
	for _, want := range []string{`<table id="exceptions">`, "<code>exceptions#1</code>", "secops@corp", "the &lt;backup&gt; server",
		"2099-01-31T00:00:00Z", `<td class="num">7</td>`, "2020-01-01T00:00:00Z (expired)", `<td class="num">1</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s\n%s", want, body[strings.Index(body, "<h1>"):])
		}
	}
	code, _, body = get(t, srv.URL+"/api/v1/hunts/logins")
	if code != 200 {
		t.Fatalf("API = %d\n%s", code, body)
	}
	var got struct {
		Exceptions []Exception `json:"exceptions"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := []Exception{{ID: "exceptions#1", Owner: "secops@corp", Reason: "the <backup> server", Until: "2099-01-31T00:00:00Z", Hits: 7},
		{ID: "corp-scanners#2", List: "corp-scanners", Owner: "netops@corp", Reason: "the scanner", Until: "2020-01-01T00:00:00Z", Expired: true, Hits: 1}}
	if len(got.Exceptions) != 2 || got.Exceptions[0] != want[0] || got.Exceptions[1] != want[1] {
		t.Errorf("API exceptions %+v, want %+v\n%s", got.Exceptions, want, body)
	}
}
