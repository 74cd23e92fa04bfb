package hunt

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds of what the explain keys put into every finding row and notification.
const (
	// TemplateMaxBytes bounds a title: or dedup: template as written; RenderedMaxBytes bounds
	// one rendered title or dedup key (a longer one is cut on a rune boundary).
	TemplateMaxBytes = 512
	RenderedMaxBytes = 1024
	// RunbookMaxBytes bounds runbook:; MitreMaxIDs bounds mitre:.
	RunbookMaxBytes = 2048
	MitreMaxIDs     = 32
)

// RowSeverities are the values severity_from: takes from a finding's column; any other value
// falls back to the hunt's severity (counted by the runner).
var RowSeverities = []string{"low", "medium", "high", "critical"}

// MitreRe is the shape of a mitre: id: an ATT&CK technique (T1110), sub-technique (T1110.003)
// or tactic (TA0006).
var MitreRe = regexp.MustCompile(`^(T\d{4}(\.\d{3})?|TA\d{4})$`)

// Template is a title: or dedup: template: literal text with {{column}} placeholders over the
// hunt's output columns (the top-level keys of a finding document). Nothing else is
// interpreted, so a template cannot run code or reach anything but the row it renders.
type Template struct {
	parts []tmplPart
}

type tmplPart struct {
	text   string // literal text, or the column name when column is true
	column bool
}

var placeholderRe = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*$`)

// TemplateError is a template that does not parse; Offset is the byte of the template where
// the problem starts.
type TemplateError struct {
	Offset int
	Msg    string
}

func (e *TemplateError) Error() string { return e.Msg }

// ParseTemplate parses text. "" is the empty template (renders "").
func ParseTemplate(text string) (Template, error) {
	var t Template
	rest, off := text, 0
	for rest != "" {
		open := strings.Index(rest, "{{")
		if close := strings.Index(rest, "}}"); close >= 0 && (open < 0 || close < open) {
			return Template{}, &TemplateError{off + close, "unmatched }} (a placeholder is {{column}})"}
		}
		if open < 0 {
			t.parts = append(t.parts, tmplPart{text: rest})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, tmplPart{text: rest[:open]})
		}
		end := strings.Index(rest[open+2:], "}}")
		if end < 0 {
			return Template{}, &TemplateError{off + open, "unclosed {{ (a placeholder is {{column}})"}
		}
		inner := rest[open+2 : open+2+end]
		m := placeholderRe.FindStringSubmatch(inner)
		if m == nil {
			return Template{}, &TemplateError{off + open, "a placeholder names one output column, such as {{user}}: letters, digits and '_'; nothing else is evaluated"}
		}
		t.parts = append(t.parts, tmplPart{text: m[1], column: true})
		n := open + 2 + end + 2
		rest, off = rest[n:], off+n
	}
	return t, nil
}

// Columns returns the columns the template names, in order of first use.
func (t Template) Columns() []string {
	var out []string
	for _, p := range t.parts {
		if p.column && !slices.Contains(out, p.text) {
			out = append(out, p.text)
		}
	}
	return out
}

// IsZero reports whether t renders nothing.
func (t Template) IsZero() bool { return len(t.parts) == 0 }

// Render fills t from row (a finding document's top-level keys): a string value as its text,
// null or a missing column as "", anything else as its JSON. The result is valid UTF-8 and at
// most RenderedMaxBytes.
func (t Template) Render(row map[string]json.RawMessage) string {
	var b strings.Builder
	for _, p := range t.parts {
		if !p.column {
			b.WriteString(p.text)
		} else {
			b.WriteString(ColumnText(row[p.text]))
		}
		if b.Len() > RenderedMaxBytes {
			break
		}
	}
	return Cut(strings.ToValidUTF8(b.String(), "\uFFFD"), RenderedMaxBytes)
}

// ColumnText is a finding column's value as text: a JSON string unquoted, null or absent as
// "", any other value as its JSON.
func ColumnText(v json.RawMessage) string {
	if len(v) == 0 || string(v) == "null" {
		return ""
	}
	var s string
	if v[0] == '"' && json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// Cut shortens s to at most n bytes on a rune boundary.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Explained is what the explain keys make of one finding row.
type Explained struct {
	Title    string
	Severity string // the row's severity: severity_from's value, or the hunt's
	DedupKey string
	// SeverityFellBack is set when severity_from named a value outside RowSeverities (or none).
	SeverityFellBack bool
}

// Explainer applies a hunt's explain keys to finding documents. Build it once per run.
type Explainer struct {
	title, dedup Template
	severityFrom string
	severity     string
}

// Explainer returns h's explainer. h's templates were checked by the decoder; a hunt built by
// hand with a bad template gets an error.
func (h *Hunt) Explainer() (Explainer, error) {
	title, err := ParseTemplate(h.Title)
	if err != nil {
		return Explainer{}, fmt.Errorf("title: %w", err)
	}
	dedup, err := ParseTemplate(h.Dedup)
	if err != nil {
		return Explainer{}, fmt.Errorf("dedup: %w", err)
	}
	return Explainer{title: title, dedup: dedup, severityFrom: h.SeverityFrom, severity: h.WithDefaults().Severity}, nil
}

// Explain applies the keys to one finding document (a JSON object; anything else renders as
// a row without columns).
func (e Explainer) Explain(doc string) Explained {
	var row map[string]json.RawMessage
	if !e.title.IsZero() || !e.dedup.IsZero() || e.severityFrom != "" {
		_ = json.Unmarshal([]byte(doc), &row) // not an object (a truncation record): no columns
	}
	out := Explained{Title: e.title.Render(row), DedupKey: e.dedup.Render(row), Severity: e.severity}
	if e.severityFrom != "" {
		s := strings.ToLower(strings.TrimSpace(ColumnText(row[e.severityFrom])))
		if slices.Contains(RowSeverities, s) {
			out.Severity = s
		} else {
			out.SeverityFellBack = true
		}
	}
	return out
}

// Revision is the hunt's provenance as stored with every run and finding: the first
// RevisionDigestLen hex digits of its definition digest (Hash), followed by "@" and the git
// commit it was read from when it came from a git source.
func (h *Hunt) Revision() string {
	r := h.Hash
	if len(r) > RevisionDigestLen {
		r = r[:RevisionDigestLen]
	}
	if h.Commit != "" {
		r += "@" + h.Commit
	}
	return r
}

// RevisionDigestLen is how many hex digits of the definition digest a revision keeps: 64
// bits, enough to tell the definitions of one hunt apart.
const RevisionDigestLen = 16

// SplitRevision splits a revision into its digest and its commit ("" for a directory source).
func SplitRevision(rev string) (digest, commit string) {
	digest, commit, _ = strings.Cut(rev, "@")
	return digest, commit
}
