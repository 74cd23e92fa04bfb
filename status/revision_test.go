package status

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// status --json shows each hunt's live revision: the definition digest and the git commit.
func TestStatusShowsLiveRevision(t *testing.T) {
	h := hunt.NewSet([]hunt.Hunt{{ID: "a", Interval: time.Minute, Enabled: true, Query: "SELECT 1"}}, "test", "c0ffee").Hunts[0]
	got := build(store.Snapshot{Now: time.Unix(1700000000, 0)}, h, false, publishedEntry{}, store.RunSummary{}, 0, nil)
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	want := h.Hash[:hunt.RevisionDigestLen] + "@c0ffee"
	if got.Revision != want || !strings.Contains(string(b), `"revision":"`+want+`"`) {
		t.Fatalf("revision %q, want %q", got.Revision, want)
	}
}

// A hunt's page lists its latest committed findings as rows (title, severity, time,
// revision linked to its commit), links their query to the ClickHouse web client, and marks
// the run where the revision changed.
func TestHuntPageListsFindingsWithRevisionAndClickHouseLink(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	st := store.New(db.Conn, db.Name)
	var now uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	fire := int64(now) / 60 * 60
	const commit = "9fceb02d0ae598e95dc970b74767f19372d61af8"
	for i, rev := range []string{"1111111111111111@" + commit, "2222222222222222@" + commit} {
		run := uuid.New()
		f := int64(fire - 60 + int64(i)*60)
		if err := st.InsertFindings(ctx, store.Findings{HuntID: "logins", Fire: f, RunID: run, Severity: "low",
			Docs: []string{fmt.Sprintf(`{"user":"u%d"}`, i)}, Found: time.Now(), Revision: rev,
			Explained: []hunt.Explained{{Title: fmt.Sprintf("login <b>for</b> u%d", i), Severity: "critical"}}}); err != nil {
			t.Fatal(err)
		}
		if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started, revision)"+
			" SELECT 'logins', toDateTime(?, 'UTC'), generateUUIDv4(), now64(6) + ?, ?, 'pod-a', toDateTime(?, 'UTC'), 1, now64(6), ?",
			f, i, run, f-60, rev); err != nil {
			t.Fatal(err)
		}
	}
	entries := []hunt.Hunt{{ID: "logins", Interval: time.Minute, Enabled: true}}
	w := &Web{Store: st, Database: db.Name, Entries: func() []hunt.Hunt { return entries },
		ClickHouseWebURL: "https://ch.example.com:8443/play", CommitURL: "https://git.example.com/hunts/commit/"}
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	code, _, body := get(t, srv.URL+"/hunts/logins")
	if code != 200 {
		t.Fatalf("GET /hunts/logins = %d\n%s", code, body)
	}
	for _, want := range []string{"login &lt;b&gt;for&lt;/b&gt; u1", "login &lt;b&gt;for&lt;/b&gt; u0", `class="sev-critical"`,
		"<code>2222222222222222</code> @ <a href=\"https://git.example.com/hunts/commit/" + commit + `">9fceb02d0ae`,
		`title="the definition changed since the run before">changed</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s\n%s", want, body[strings.Index(body, "Latest findings"):])
		}
	}
	// The link's query, decoded, is one a ClickHouse client runs: it reads these findings.
	i := strings.Index(body, `id="findings-query" href="https://ch.example.com:8443/play#`)
	if i < 0 {
		t.Fatalf("no ClickHouse link:\n%s", body)
	}
	enc := body[i+len(`id="findings-query" href="https://ch.example.com:8443/play#`):]
	enc = html.UnescapeString(enc[:strings.IndexByte(enc, '"')])
	q, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM ("+string(q)+")").Scan(&n); err != nil || n != 2 {
		t.Fatalf("the linked query %q read %d findings (%v), want 2", q, n, err)
	}
}
