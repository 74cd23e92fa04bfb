package alertmanagertest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
	prommodel "github.com/prometheus/common/model"

	"github.com/hunt-runner/hunt-runner/notify"
)

// What notify POSTs to {url}/api/v2/alerts decodes, with no unknown field, into Alertmanager's
// PostableAlerts, passes their validation, and passes the label and time checks Alertmanager
// applies to every posted alert (prometheus model.Alert.Validate) — including for hunt
// labels whose names Prometheus' classic rules refuse ("mitre.technique", "a-b").
func TestAlertmanagerPayloadPassesUpstreamModels(t *testing.T) {
	n := notify.Notification{
		HuntID: "brute-force.ssh", Fire: time.Date(2026, 12, 1, 10, 5, 0, 0, time.UTC),
		WindowStart: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Severity: "critical",
		Labels:         map[string]string{"team": "secops", "mitre.technique": "T1110", "a-b": "c"},
		Findings:       []json.RawMessage{json.RawMessage(`{"host":"db1","failures":42}`)},
		FindingsTotal:  7,
		IdempotencyKey: notify.IdempotencyKey("brute-force.ssh", 1796119500, "am"),
		Description:    "Many failed SSH logins from one source.",
		HuntURL:        notify.HuntURL("https://hunts.example.com", "brute-force.ssh"),
		EndsAt:         time.Date(2026, 12, 1, 11, 5, 0, 0, time.UTC),
	}
	body, err := n.Body(notify.TypeAlertmanager)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var alerts models.PostableAlerts
	if err := dec.Decode(&alerts); err != nil {
		t.Fatalf("not PostableAlerts: %v\n%s", err, body)
	}
	if err := alerts.Validate(strfmt.Default); err != nil {
		t.Fatalf("PostableAlerts.Validate: %v\n%s", err, body)
	}
	if len(alerts) != 1 {
		t.Fatalf("%d alerts for one fire, want 1", len(alerts))
	}
	a := alerts[0]
	m := prommodel.Alert{StartsAt: time.Time(a.StartsAt), EndsAt: time.Time(a.EndsAt), Labels: prommodel.LabelSet{}, Annotations: prommodel.LabelSet{}}
	for k, v := range a.Labels {
		m.Labels[prommodel.LabelName(k)] = prommodel.LabelValue(v)
		if !prommodel.LegacyValidation.IsValidLabelName(k) {
			t.Errorf("label name %q is refused by Prometheus' classic name rules", k)
		}
	}
	for k, v := range a.Annotations {
		m.Annotations[prommodel.LabelName(k)] = prommodel.LabelValue(v)
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("model.Alert.Validate: %v", err)
	}
	if a.Labels["alertname"] != "brute-force.ssh" || a.Labels["hunt_id"] != "brute-force.ssh" || a.Labels["severity"] != "critical" ||
		a.Labels["team"] != "secops" || a.Labels["mitre_technique"] != "T1110" {
		t.Errorf("labels %v", a.Labels)
	}
	if !time.Time(a.StartsAt).Equal(n.Fire) || !time.Time(a.EndsAt).Equal(n.EndsAt) {
		t.Errorf("startsAt %v endsAt %v, want the fire %v and %v", time.Time(a.StartsAt), time.Time(a.EndsAt), n.Fire, n.EndsAt)
	}
	if a.GeneratorURL.String() != "https://hunts.example.com/hunts/brute-force.ssh" || a.Annotations["description"] != n.Description ||
		a.Labels[notify.CommonLabel] != notify.CommonLabelValue || a.Labels[notify.FireLabel] != "2026-12-01T10:05:00Z" {
		t.Errorf("generatorURL %q, annotations %v, labels %v", a.GeneratorURL, a.Annotations, a.Labels)
	}
	if a.Annotations["findings_total"] != "7" || !strings.Contains(a.Annotations["summary"], "7 finding") {
		t.Errorf("annotations %v", a.Annotations)
	}
}
