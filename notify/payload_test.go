package notify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func testNotification() Notification {
	return Notification{HuntID: "brute", Fire: time.Date(2026, 12, 1, 10, 5, 0, 0, time.UTC),
		WindowStart: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Severity: "high",
		Labels:   map[string]string{"team": "secops", "mitre.technique": "T1110"},
		Findings: []json.RawMessage{json.RawMessage(`{"host":"a","n":1}`)}, FindingsTotal: 3, Suppressed: 1,
		IdempotencyKey: IdempotencyKey("brute", 1, "soc")}
}

func TestWebhookPayload(t *testing.T) {
	body, err := testNotification().Body(TypeWebhook)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"hunt_id": "brute", "fire": "2026-12-01T10:05:00Z", "window_start": "2026-12-01T10:00:00Z",
		"window_end": "2026-12-01T10:05:00Z", "severity": "high", "findings_total": 3.0, "findings_suppressed": 1.0,
		"idempotency_key": IdempotencyKey("brute", 1, "soc")}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if f := got["findings"].([]any); len(f) != 1 || f[0].(map[string]any)["host"] != "a" {
		t.Errorf("findings are not objects: %v", got["findings"])
	}
	if l := got["labels"].(map[string]any); l["team"] != "secops" {
		t.Errorf("labels %v", l)
	}
}

func TestIdempotencyKeyPerHuntFireSink(t *testing.T) {
	k := IdempotencyKey("h", 100, "soc")
	for _, other := range []string{IdempotencyKey("h", 101, "soc"), IdempotencyKey("h", 100, "am"), IdempotencyKey("h2", 100, "soc"),
		IdempotencyKey("h\x00100", 0, "soc")} {
		if other == k {
			t.Errorf("two different (hunt, fire, sink) share key %s", k)
		}
	}
	if IdempotencyKey("h", 100, "soc") != k {
		t.Error("key is not stable")
	}
}

func TestAlertmanagerPayload(t *testing.T) {
	body, err := testNotification().Body(TypeAlertmanager)
	if err != nil {
		t.Fatal(err)
	}
	var alerts []Alert
	if err := json.Unmarshal(body, &alerts); err != nil || len(alerts) != 1 {
		t.Fatalf("%s: %v", body, err)
	}
	a := alerts[0]
	for k, v := range map[string]string{"alertname": "brute", "hunt_id": "brute", "severity": "high", "team": "secops", "mitre_technique": "T1110"} {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, a.Labels[k], v)
		}
	}
	if a.StartsAt != "2026-12-01T10:05:00Z" || a.Annotations["findings_total"] != "3" || !strings.Contains(a.Annotations["summary"], "brute") {
		t.Errorf("alert %+v", a)
	}
	n := testNotification()
	n.Labels = map[string]string{"alertname": "spoof", "severity": "info"}
	body, _ = n.Body(TypeAlertmanager)
	_ = json.Unmarshal(body, &alerts)
	if alerts[0].Labels["alertname"] != "brute" || alerts[0].Labels["severity"] != "high" {
		t.Errorf("hunt labels overrode alertname/severity: %v", alerts[0].Labels)
	}
}

func TestSlackPayload(t *testing.T) {
	body, err := testNotification().Body(TypeSlack)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m["text"], "*brute* (high): 3 finding(s)") || !strings.Contains(m["text"], `{"host":"a","n":1}`) {
		t.Errorf("text %q", m["text"])
	}
}

func TestSignature(t *testing.T) {
	key := secret(t)
	body := []byte(`{"a":1}`)
	if Sign(key, body) == Sign(key, []byte(`{"a":2}`)) || Sign(key, body) == Sign(secret(t), body) {
		t.Error("signature does not depend on body and key")
	}
	if !strings.HasPrefix(Sign(key, body), "sha256=") || len(Sign(key, body)) != 7+64 {
		t.Errorf("signature %q", Sign(key, body))
	}
}

// Slack: finding content cannot mention (<!channel>, <!here>, <@user>), link, or close the
// code block (```); and every sink's body is valid UTF-8, whatever bytes a finding holds
// and wherever a long line is cut.
func TestBodiesInertAndValidUTF8(t *testing.T) {
	n := testNotification()
	n.Findings = []json.RawMessage{
		json.RawMessage(`{"msg":"<!channel> <!here> <@U123> & <https://evil|bank> ` + "```" + ` closed ` + "````" + `"}`),
		json.RawMessage("{\"bad\":\"\xff\xfe\"}"),
		json.RawMessage(`{"long":"x` + strings.Repeat("é", 400) + `"}`), // the 300-byte cut falls inside an é
	}
	body, err := n.Body(TypeSlack)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	text := m["text"]
	for _, bad := range []string{"<!channel>", "<!here>", "<@U123>", "<https://", " & "} {
		if strings.Contains(text, bad) {
			t.Errorf("slack text carries %q: %s", bad, text)
		}
	}
	if !strings.Contains(text, "&lt;!channel&gt;") || !strings.Contains(text, "&amp;") {
		t.Errorf("slack text not escaped: %s", text)
	}
	if !strings.Contains(text, "é...") {
		t.Errorf("a long finding is not cut on a character boundary: %s", text)
	}
	if c := strings.Count(text, "```"); c != 2 {
		t.Errorf("%d code fences in the slack text, want the block's own two: %s", c, text)
	}
	for _, typ := range []string{TypeSlack, TypeWebhook, TypeAlertmanager} {
		body, err := n.Body(typ)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(body) {
			t.Errorf("%s body is not valid UTF-8", typ)
		}
	}
}
