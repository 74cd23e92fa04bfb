package notify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/store"
)

func explainedNotification() Notification {
	return Notification{HuntID: "logins", Fire: time.Unix(1700000000, 0), WindowStart: time.Unix(1699999400, 0), Severity: "low",
		Findings: []json.RawMessage{[]byte(`{"user":"alice"}`), []byte(`{"user":"bob"}`), []byte(`{"user":"alice","n":2}`)},
		Details: []FindingDetail{{Title: "login for <!channel> alice", Severity: "high", DedupKey: "alice"},
			{Title: "login for bob", Severity: "low", DedupKey: "bob"}, {Title: "again alice", Severity: "critical", DedupKey: "alice"}},
		FindingsTotal: 3, Runbook: "https://wiki.example.com/rb", Mitre: []string{"T1110", "TA0006"}, Revision: "0123456789abcdef@c0ffee"}
}

func TestExplainedAlertsOnePerDedupKey(t *testing.T) {
	as := explainedNotification().alerts()
	if len(as) != 2 {
		t.Fatalf("%d alerts, want one per dedup key", len(as))
	}
	a, b := as[0], as[1]
	if a.Labels[DedupLabel] != "alice" || a.Labels["severity"] != "critical" || a.Annotations["summary"] != "login for <!channel> alice" ||
		a.Annotations["first_finding"] != `{"user":"alice"}` {
		t.Errorf("alice's alert %v %v", a.Labels, a.Annotations)
	}
	if b.Labels[DedupLabel] != "bob" || b.Labels["severity"] != "low" || b.Annotations["summary"] != "login for bob" {
		t.Errorf("bob's alert %v %v", b.Labels, b.Annotations)
	}
	for _, x := range as {
		if x.Annotations["runbook_url"] != "https://wiki.example.com/rb" || x.Labels["mitre"] != "T1110,TA0006" || x.Annotations["revision"] != "0123456789abcdef@c0ffee" {
			t.Errorf("alert %v %v", x.Labels, x.Annotations)
		}
	}
	// Without dedup: one alert for the fire, as before.
	n := explainedNotification()
	for i := range n.Details {
		n.Details[i].DedupKey = ""
	}
	if as := n.alerts(); len(as) != 1 || as[0].Labels["severity"] != "critical" || as[0].Labels[DedupLabel] != "" {
		t.Fatalf("alerts without dedup %v", as)
	}
}

func TestExplainedWebhookAndSlack(t *testing.T) {
	n := explainedNotification()
	body, err := n.Body(TypeWebhook)
	if err != nil {
		t.Fatal(err)
	}
	var p WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Title != "login for <!channel> alice" || p.Severity != "critical" || len(p.FindingDetails) != 3 || p.FindingDetails[1].DedupKey != "bob" ||
		p.Runbook != n.Runbook || strings.Join(p.Mitre, ",") != "T1110,TA0006" || p.Revision != n.Revision {
		t.Fatalf("webhook %s", body)
	}
	s := n.slack()["text"]
	if !strings.Contains(s, "login for &lt;!channel&gt; alice") || strings.Contains(s, "<!channel>") ||
		!strings.Contains(s, "Runbook: https://wiki.example.com/rb") || !strings.Contains(s, "(critical)") {
		t.Fatalf("slack text %q", s)
	}
}

// The dedup key, when set, is what suppression keys a finding by: two findings of one entity
// are the same whatever their other columns, and suppress.by is not consulted.
func TestSuppressKeyIsTheDedupKey(t *testing.T) {
	a := store.FireFinding{JSON: `{"user":"alice","ip":"1"}`, DedupKey: "alice"}
	b := store.FireFinding{JSON: `{"user":"bob","ip":"2"}`, DedupKey: "alice"}
	c := store.FireFinding{JSON: `{"user":"alice","ip":"1"}`, DedupKey: "carol"}
	if findingKey(a, []string{"ip"}) != findingKey(b, []string{"ip"}) || findingKey(a, nil) == findingKey(c, nil) {
		t.Fatal("suppression does not follow the dedup key")
	}
	plain := store.FireFinding{JSON: a.JSON}
	if findingKey(plain, []string{"ip"}) != suppressKey(a.JSON, []string{"ip"}) {
		t.Fatal("without a dedup key, suppress.by decides")
	}
}
