package notify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// Source yields the current hunt set; nil means nothing has loaded yet. It is called once per
// poll and must be cheap. The Dispatcher notifies for the set's enabled hunts (a disabled hunt
// never commits a run).
type Source func() *hunt.Set

// Notification is one (hunt, fire) as every sink type renders it.
type Notification struct {
	HuntID      string
	Description string // the hunt's description:
	Fire        time.Time
	WindowStart time.Time
	Severity    string
	Labels      map[string]string
	// HuntURL is the hunt's status page (Config.ExternalURL/hunts/<id>), or empty.
	HuntURL string
	// EndsAt ends an Alertmanager alert (the attempt's time + the sink's resolve_after).
	EndsAt         time.Time
	Findings       []json.RawMessage // the first MaxFindings, ordered by finding_id
	FindingsTotal  int               // findings notified (after suppression)
	Suppressed     int               // findings of the fire not sent because of suppress:
	IdempotencyKey string
	// Details are what the hunt's explain keys made of each of Findings (same order).
	Details  []FindingDetail
	Runbook  string   // the hunt's runbook: URL, or empty
	Mitre    []string // the hunt's mitre: ids
	Revision string   // the hunt's revision (hunt.Hunt.Revision)
}

// FindingDetail is one finding's title, severity (severity_from, else the hunt's) and dedup
// key, as stored with it.
type FindingDetail struct {
	Title    string `json:"title"`
	Severity string `json:"severity"`
	DedupKey string `json:"dedup_key"`
}

// severityRank orders severities; an unknown one ranks lowest.
var severityRank = map[string]int{"info": 1, "low": 2, "medium": 3, "high": 4, "critical": 5}

// highest is the highest severity of ds, or fallback when ds has none higher.
func highest(fallback string, ds []FindingDetail) string {
	out := fallback
	for _, d := range ds {
		if severityRank[d.Severity] > severityRank[out] {
			out = d.Severity
		}
	}
	return out
}

// title is the first title of ds, or "".
func title(ds []FindingDetail) string {
	for _, d := range ds {
		if d.Title != "" {
			return d.Title
		}
	}
	return ""
}

// IdempotencyKey is the key of a (hunt, fire, sink): derived, so every attempt from every
// Dispatcher uses the same one without coordination.
func IdempotencyKey(huntID string, fire int64, sink string) string {
	sum := sha256.Sum256([]byte(huntID + "\x00" + strconv.FormatInt(fire, 10) + "\x00" + sink))
	return "hr1-" + hex.EncodeToString(sum[:16])
}

// WebhookPayload is the JSON document a webhook sink receives.
type WebhookPayload struct {
	HuntID         string            `json:"hunt_id"`
	Fire           string            `json:"fire"`
	WindowStart    string            `json:"window_start"`
	WindowEnd      string            `json:"window_end"`
	Severity       string            `json:"severity"`
	Labels         map[string]string `json:"labels"`
	Findings       []json.RawMessage `json:"findings"`
	FindingsTotal  int               `json:"findings_total"`
	Suppressed     int               `json:"findings_suppressed"`
	IdempotencyKey string            `json:"idempotency_key"`
	// Title is the first finding's title; FindingDetails holds each finding's title, severity
	// and dedup key (same order as Findings). Severity is the highest of the findings'.
	Title          string          `json:"title"`
	FindingDetails []FindingDetail `json:"finding_details"`
	Runbook        string          `json:"runbook"`
	Mitre          []string        `json:"mitre"`
	Revision       string          `json:"revision"`
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func (n Notification) webhook() WebhookPayload {
	labels := n.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	details, mitre := n.Details, n.Mitre
	if details == nil {
		details = []FindingDetail{}
	}
	if mitre == nil {
		mitre = []string{}
	}
	return WebhookPayload{HuntID: n.HuntID, Fire: rfc3339(n.Fire), WindowStart: rfc3339(n.WindowStart),
		WindowEnd: rfc3339(n.Fire), Severity: highest(n.Severity, n.Details), Labels: labels, Findings: n.Findings,
		FindingsTotal: n.FindingsTotal, Suppressed: n.Suppressed, IdempotencyKey: n.IdempotencyKey,
		Title: title(n.Details), FindingDetails: details, Runbook: n.Runbook, Mitre: mitre, Revision: n.Revision}
}

// Alert is one Alertmanager api/v2 postable alert (the shape of models.PostableAlert).
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     string            `json:"startsAt"`
	EndsAt       string            `json:"endsAt,omitempty"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// FireLabel carries the fire (RFC 3339) on every alert: each fire's findings are an alert of
// their own, with a fingerprint stable across retries, so a fire with new findings adds an
// alert to the hunt's group and Alertmanager notifies it at the next group_interval.
const FireLabel = "fire"

// HuntURL is the status page of a hunt under externalURL; empty without one.
func HuntURL(externalURL, huntID string) string {
	if externalURL == "" {
		return ""
	}
	return strings.TrimRight(externalURL, "/") + "/hunts/" + url.PathEscape(huntID)
}

// alertLabelName maps a hunt label name to a Prometheus label name: '.' and '-', which hunt
// labels allow, become '_', so receivers with the classic name rules accept it.
func alertLabelName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' {
			return '_'
		}
		return r
	}, s)
}

// DedupLabel carries a finding's dedup key: a hunt that sets dedup: gets one alert per
// distinct key of the fire (its own fingerprint), so each entity groups and resolves apart.
const DedupLabel = "dedup_key"

func (n Notification) alerts() []Alert {
	// Findings grouped by dedup key, in the findings' order; one group (key "") without dedup:.
	var keys []string
	groups := map[string][]int{}
	for i := range n.Findings {
		k := ""
		if i < len(n.Details) {
			k = n.Details[i].DedupKey
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	if len(keys) == 0 {
		keys = []string{""}
	}
	out := make([]Alert, 0, len(keys))
	for _, k := range keys {
		var ds []FindingDetail
		for _, i := range groups[k] {
			if i < len(n.Details) {
				ds = append(ds, n.Details[i])
			}
		}
		out = append(out, n.alert(k, groups[k], ds))
	}
	return out
}

// alert is the alert of the findings idx (all of one dedup key, "" without dedup:).
func (n Notification) alert(dedupKey string, idx []int, ds []FindingDetail) Alert {
	labels := map[string]string{}
	for k, v := range n.Labels {
		labels[alertLabelName(k)] = v
	}
	// Ours are set last: a hunt label cannot rename the alert, hide its severity or its fire,
	// or leave the common label.
	labels["alertname"], labels["hunt_id"], labels["severity"] = n.HuntID, n.HuntID, highest(n.Severity, ds)
	labels[FireLabel] = rfc3339(n.Fire)
	labels[CommonLabel] = CommonLabelValue
	if dedupKey != "" {
		labels[DedupLabel] = dedupKey
	}
	if len(n.Mitre) > 0 {
		labels["mitre"] = strings.Join(n.Mitre, ",")
	}
	ann := map[string]string{
		"summary":         n.summary(),
		"findings_total":  strconv.Itoa(n.FindingsTotal),
		"window":          rfc3339(n.WindowStart) + " – " + rfc3339(n.Fire),
		"idempotency_key": n.IdempotencyKey,
	}
	if t := title(ds); t != "" {
		ann["summary"] = t
	}
	if n.Description != "" {
		ann["description"] = n.Description
	}
	if n.Runbook != "" {
		ann["runbook_url"] = n.Runbook
	}
	if n.Revision != "" {
		ann["revision"] = n.Revision
	}
	if len(idx) > 0 {
		ann["first_finding"] = string(n.Findings[idx[0]])
	}
	a := Alert{Labels: labels, Annotations: ann, StartsAt: n.Fire.UTC().Format(time.RFC3339Nano), GeneratorURL: n.HuntURL}
	if !n.EndsAt.IsZero() {
		a.EndsAt = n.EndsAt.UTC().Format(time.RFC3339Nano)
	}
	return a
}

func (n Notification) summary() string {
	return fmt.Sprintf("hunt %s found %d finding(s) in %s – %s", n.HuntID, n.FindingsTotal,
		rfc3339(n.WindowStart), rfc3339(n.Fire))
}

// slack is the body of a Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat).
// Everything from the hunt or its findings is data: slackText makes it inert.
func (n Notification) slack() map[string]string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s* (%s): %d finding(s) in %s – %s", slackText(n.HuntID), slackText(highest(n.Severity, n.Details)), n.FindingsTotal,
		rfc3339(n.WindowStart), rfc3339(n.Fire))
	if t := title(n.Details); t != "" {
		b.WriteString("\n" + slackText(cut(t, 300)))
	}
	if n.Runbook != "" {
		b.WriteString("\nRunbook: " + slackText(n.Runbook))
	}
	if len(n.Mitre) > 0 {
		b.WriteString("\nMITRE ATT&amp;CK: " + slackText(strings.Join(n.Mitre, ", ")))
	}
	if len(n.Findings) > 0 {
		b.WriteString("\n```")
		for i, f := range n.Findings {
			if i == 5 {
				fmt.Fprintf(&b, "\n… and %d more", n.FindingsTotal-i)
				break
			}
			b.WriteString("\n" + slackCode(cut(string(f), 300)))
		}
		b.WriteString("\n```")
	}
	return map[string]string{"text": b.String()}
}

// slackText escapes the three characters Slack's mrkdwn gives meaning to, so that finding
// content such as <!channel>, <!here>, <@U123> or <https://evil|bank> is shown, not acted on.
var slackText = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace

// slackCode is slackText for text inside a ``` block: mrkdwn has no escape for a backtick,
// so a zero-width space is put between any two, and no run of three can close the block.
func slackCode(s string) string {
	s = slackText(s)
	for strings.Contains(s, "``") {
		s = strings.ReplaceAll(s, "``", "`\u200b`")
	}
	return s
}

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - 3
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// Body renders the notification for a sink type. The body is the same on every attempt.
func (n Notification) Body(sinkType string) ([]byte, error) {
	// Findings are copied into the body as they are (raw JSON), and stored rows can hold any
	// bytes: every body is made valid UTF-8 here. Strings are already (encoding/json).
	fs := make([]json.RawMessage, len(n.Findings))
	for i, f := range n.Findings {
		fs[i] = json.RawMessage(strings.ToValidUTF8(string(f), "\uFFFD"))
	}
	n.Findings = fs
	var v any
	switch sinkType {
	case TypeWebhook:
		v = n.webhook()
	case TypeAlertmanager:
		v = n.alerts()
	case TypeSlack:
		v = n.slack()
	default:
		return nil, fmt.Errorf("unknown sink type %q", sinkType)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// SignatureHeader carries the webhook body's HMAC-SHA256 as "sha256=<hex>".
const SignatureHeader = "X-Hunt-Runner-Signature"

// Sign returns the SignatureHeader value of body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
