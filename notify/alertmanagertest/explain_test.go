package alertmanagertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/notify"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Against a real Alertmanager: a hunt's runbook arrives as the runbook_url annotation, each
// finding's title as the summary, its severity as the label, and a hunt with dedup: gets one
// alert per entity of the fire.
func TestRealAlertmanagerSeesRunbookAndTitle(t *testing.T) {
	var box inbox
	hook := httptest.NewServer(http.HandlerFunc(box.serve))
	defer hook.Close()
	am := startAlertmanager(t, hook.URL, 2*time.Second)

	db := chtest.NewWithSchema(t)
	cfg := &notify.Config{
		Sinks: []notify.Sink{{Name: "am", Type: notify.TypeAlertmanager, URLs: []string{am}, Timeout: 5 * time.Second,
			ResolveAfter: notify.ResolveAfterDefault, Lookback: time.Hour}},
		Routes:      []notify.Route{{Sinks: []string{"am"}}},
		MaxFindings: notify.NotifyFindingsDefault, Horizon: notify.HorizonDefault,
	}
	h := hunt.Hunt{Enabled: true, ID: "logins", Severity: "low", Title: "login from {{ip}} for {{user}}", Dedup: "{{user}}",
		SeverityFrom: "sev", Runbook: "https://wiki.example.com/rb/logins", Mitre: []string{"T1110.003"}}
	hunts := hunt.NewSet([]hunt.Hunt{h}, "test", "")
	d, err := notify.New(db.Conn, func() *hunt.Set { return hunts }, notify.Options{Config: cfg, Database: db.Name,
		Owner: "t", Poll: 50 * time.Millisecond, Settle: 400 * time.Millisecond, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Start(ctx) }()
	defer func() { cancel(); <-done }()

	// The fire's findings are written as the runner writes them (store.InsertFindings with the
	// hunt's explainer), then committed.
	live, _ := hunts.Get("logins")
	ex, err := live.Explainer()
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{`{"ip":"10.0.0.1","user":"alice","sev":"critical"}`, `{"ip":"10.0.0.2","user":"bob","sev":"nope"}`}
	fire := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	run := uuid.New()
	f := store.Findings{HuntID: "logins", Fire: fire.Unix(), RunID: run, Severity: live.Severity, Docs: docs, Found: time.Now(),
		Runbook: live.Runbook, Mitre: live.Mitre, Revision: live.Revision()}
	for _, doc := range docs {
		f.Explained = append(f.Explained, ex.Explain(doc))
	}
	if err := store.New(db.Conn, db.Name).InsertFindings(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	q := "INSERT INTO " + schema.QuoteIdent(db.Name) + "." + schema.TableWatermark +
		" (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started)" +
		" SELECT 'logins', toDateTime({f:Int64}, 'UTC'), generateUUIDv4(), now64(6), toUUID({r:String}), 'test'," +
		" toDateTime({f:Int64} - 60, 'UTC'), 2, now64(6)"
	if err := db.Conn.Exec(context.Background(), q, clickhouse.Named("f", fire.Unix()), clickhouse.Named("r", run.String())); err != nil {
		t.Fatal(err)
	}

	chtest.Eventually(t, 60*time.Second, "a notification with an alert per user", func() bool {
		all := box.all()
		return len(all) > 0 && len(all[len(all)-1].Alerts) == 2
	})
	all := box.all()
	got := map[string]bool{}
	for _, a := range all[len(all)-1].Alerts {
		user := a.Labels[notify.DedupLabel]
		got[user] = true
		if a.Annotations["runbook_url"] != "https://wiki.example.com/rb/logins" || a.Labels["mitre"] != "T1110.003" {
			t.Errorf("alert %s: annotations %v labels %v", user, a.Annotations, a.Labels)
		}
		want := map[string][2]string{"alice": {"login from 10.0.0.1 for alice", "critical"}, "bob": {"login from 10.0.0.2 for bob", "low"}}[user]
		if a.Annotations["summary"] != want[0] || a.Labels["severity"] != want[1] {
			t.Errorf("alert %s: summary %q severity %q, want %q %q", user, a.Annotations["summary"], a.Labels["severity"], want[0], want[1])
		}
	}
	if !got["alice"] || !got["bob"] {
		t.Errorf("alerts for %v, want one for alice and one for bob", got)
	}
}
