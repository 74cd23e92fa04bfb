package legacy

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/internal/yamlpos"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// Finding is one feature of an earlier-format hunt file that does not carry over (or, Note,
// carries over with a different behaviour), with what to write instead.
type Finding struct {
	File    string `json:"file"` // relative to the report's directory, forward slashes
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Feature string `json:"feature"`
	Message string `json:"message"`
	// Note: nothing has to change, but hunt-runner behaves differently from the earlier runner.
	Note bool `json:"note,omitempty"`
}

func (f Finding) String() string {
	feature := f.Feature
	if f.Note {
		feature = "note: " + feature
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", f.File, f.Line, f.Column, feature, f.Message)
}

// Report is the legacy report of a directory.
type Report struct {
	Files    int // hunt files read
	Findings []Finding
}

// Changes counts the findings that need a change (not notes).
func (r Report) Changes() int {
	n := 0
	for _, f := range r.Findings {
		if !f.Note {
			n++
		}
	}
	return n
}

// FilesWithFindings counts the files with at least one finding.
func (r Report) FilesWithFindings() int {
	files := map[string]bool{}
	for _, f := range r.Findings {
		files[f.File] = true
	}
	return len(files)
}

// ReportDir reports every hunt file under dir the way hunt-runner finds them (*.yaml and
// *.yml, recursively, hidden entries skipped), sorted by file and position.
func ReportDir(dir string) (Report, error) {
	var rep Report
	fi, err := os.Stat(dir)
	if err != nil {
		return rep, err
	}
	if !fi.IsDir() {
		return rep, fmt.Errorf("%s is not a directory", dir)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rep.Files++
		rep.Findings = append(rep.Findings, ReportFile(filepath.ToSlash(rel), data)...)
		return nil
	})
	slices.SortStableFunc(rep.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	return rep, err
}

type reporter struct {
	file string
	out  []Finding
}

func (r *reporter) change(n *yaml.Node, feature, format string, args ...any) {
	r.out = append(r.out, Finding{File: r.file, Line: max(n.Line, 1), Column: max(n.Column, 1), Feature: feature,
		Message: fmt.Sprintf(format, args...)})
}

func (r *reporter) note(n *yaml.Node, feature, format string, args ...any) {
	r.change(n, feature, format, args...)
	r.out[len(r.out)-1].Note = true
}

var insertRe = regexp.MustCompile(`(?is)^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*INSERT\s+INTO\s+([^\s(]+)`)

// ReportFile reports one hunt file; file is its path relative to the hunts directory.
func ReportFile(file string, data []byte) []Finding {
	r := &reporter{file: file}
	top := &yaml.Node{Line: 1, Column: 1}
	if strings.Contains(file, "/") || strings.HasSuffix(file, ".yml") {
		r.note(top, "unread-file", "the earlier runner read only *.yaml files directly in its hunts directory, so it never ran this file; hunt-runner reads it and will run it")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		r.change(top, "yaml", "not valid YAML (%v); the earlier runner skipped this file and hunt-runner refuses it: fix or delete it", err)
		return r.out
	}
	if len(doc.Content) == 0 {
		r.change(top, "yaml", "empty file; the earlier runner skipped it and hunt-runner refuses it: delete it")
		return r.out
	}
	root := yamlpos.Deref(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		r.change(root, "yaml", "not a mapping; the earlier runner skipped it and hunt-runner refuses it: delete it")
		return r.out
	}
	keys, vals := index(root)
	stem := strings.TrimSuffix(strings.TrimSuffix(file[strings.LastIndex(file, "/")+1:], ".yaml"), ".yml")

	r.identity(keys, vals, stem)
	r.scheduleFields(keys, vals)
	r.rules(keys, vals)
	r.tables(keys, vals)
	r.apiFields(keys, vals)
	r.query(keys, vals)
	r.caps(keys, vals)
	if k, ok := keys["enabled"]; ok && isFalse(vals["enabled"]) {
		r.note(k, "enabled", "the earlier runner never read enabled: and ran this hunt anyway; hunt-runner honours enabled: false and will not run it (materialise tombstones it): delete the line to keep it running")
	}
	if k, ok := keys["severity"]; ok {
		r.note(k, "severity", "the earlier runner ignored a hunt's severity (it came from each rule file, default medium); hunt-runner copies severity: %s into every finding", vals["severity"].Value)
	}
	return r.out
}

func isFalse(v *yaml.Node) bool { b, ok := yamlpos.BoolValue(v); return ok && !b }

// index maps a mapping's keys to their key and value nodes (yamlpos.Index: the last occurrence
// wins, as the earlier runner's plain YAML load read it).
func index(m *yaml.Node) (keys, vals map[string]*yaml.Node) {
	keys, vals = map[string]*yaml.Node{}, map[string]*yaml.Node{}
	for k, p := range yamlpos.Index(m) {
		keys[k], vals[k] = p.Key, p.Value
	}
	return keys, vals
}

func (r *reporter) identity(keys, vals map[string]*yaml.Node, stem string) {
	if k, ok := keys["id"]; ok && vals["id"].Value != stem {
		r.note(k, "identity", "the earlier runner ignored id: and named this hunt %q after its file; hunt-runner names it %q: import-legacy carries %q's watermark over to %q (a top-level file only), and anything else keyed on the name (dashboards, findings queries) must follow; or remove id: to keep %q",
			stem, vals["id"].Value, stem, vals["id"].Value, stem)
	}
	for _, key := range []string{"name", "hunt_id", "display_name"} {
		if k, ok := keys[key]; ok {
			r.change(k, "identity", "%s was not read by the earlier runner (the hunt was %q, its file name) and is refused by hunt-runner: remove it; the id is id: (default: the file name, so %q carries over unchanged) and free text goes in description:",
				key, stem, stem)
		}
	}
}

// cronText reads a cron value: a string or a list of strings.
func cronText(v *yaml.Node) []*yaml.Node {
	if v.Kind == yaml.SequenceNode {
		return v.Content
	}
	return []*yaml.Node{v}
}

func (r *reporter) scheduleFields(keys, vals map[string]*yaml.Node) {
	sched, hasSched := vals["schedule"]
	if hasSched && sched.Kind == yaml.MappingNode {
		sk, sv := index(sched)
		mode := "rate"
		if m, ok := sv["mode"]; ok {
			mode = m.Value
		}
		switch mode {
		case "rate":
		case "anchored":
			r.anchored(sk["mode"], sv["cron"], sv["interval"])
			return
		default:
			r.change(sk["mode"], "schedule", "schedule.mode %s: the earlier runner skipped the hunt (only rate ran) and hunt-runner refuses the mode: write interval: or a periodic cron:", mode)
			return
		}
		if iv, ok := sv["interval"]; ok {
			if c, ok := sk["cron"]; ok {
				r.change(c, "schedule", "schedule has both interval and cron: the earlier runner ran every %s and ignored the cron; hunt-runner refuses both: remove schedule.cron", iv.Value)
			}
			r.interval(iv, "schedule.interval")
			return
		}
		if c, ok := sv["cron"]; ok {
			r.crons(sk["cron"], c, "schedule.cron")
		}
		return
	}
	if iv, ok := vals["interval"]; ok && !hasSched {
		if _, hasCron := vals["cron"]; !hasCron {
			r.note(keys["interval"], "schedule", "the earlier runner did not read a top-level interval: and skipped this hunt (no schedule); hunt-runner runs it every %s", iv.Value)
		}
	}
	if c, ok := vals["cron"]; ok && !hasSched {
		r.crons(keys["cron"], c, "cron")
	}
}

// interval reports values the earlier runner read differently from hunt-runner.
func (r *reporter) interval(v *yaml.Node, key string) {
	switch v.Tag {
	case "!!bool":
		r.change(v, "interval", "%s: %s: the earlier runner read a YAML boolean as 1 second, hunt-runner refuses it: write `%s: 1s` if every second is meant, or a duration such as 5m", key, v.Value, key)
	case "!!float":
		r.change(v, "interval", "%s: %s: the earlier runner skipped this hunt (a float interval) and hunt-runner refuses it: write whole units such as 90m", key, v.Value)
	case "!!int":
		if n, err := strconv.ParseInt(v.Value, 10, 64); err == nil && n <= 0 {
			r.change(v, "interval", "%s: %s: the earlier runner skipped this hunt (an interval must be positive): write a duration such as 5m", key, v.Value)
		}
	case "!!str":
		if s, irr, ok := oldInterval(v.Value); ok && oldIsCron(v.Value) {
			r.change(v, "interval", "%s: %q is a cron, which the earlier runner read as every %s%s; write `cron: %q` (hunt-runner keeps its minutes exactly) or `interval: %s`",
				key, v.Value, fmtSecs(s), map[bool]string{true: " (its smallest gap)"}[irr], v.Value, fmtSecs(s))
		} else if !ok {
			r.change(v, "interval", "%s: %q: the earlier runner skipped this hunt (not an interval) and hunt-runner refuses it: write a duration such as 5m", key, v.Value)
		}
	}
}

func fmtSecs(s int64) string { return schedule.FormatInterval(time.Duration(s) * time.Second) }

// crons reports a cron value: a list (the earlier runner used the tightest interval), and
// each expression hunt-runner cannot run as written.
func (r *reporter) crons(k, v *yaml.Node, key string) {
	list := cronText(v)
	type parsed struct {
		expr      string
		node      *yaml.Node
		secs      int64
		irregular bool
	}
	var ok []parsed
	for _, n := range list {
		if n.Kind != yaml.ScalarNode {
			continue
		}
		s, irr, valid := oldInterval(n.Value)
		if !valid {
			r.change(n, "cron", "%s %q: the earlier runner skipped this hunt (it could not read the schedule): write a periodic cron such as \"*/5 * * * *\" or interval: 5m", key, n.Value)
			continue
		}
		ok = append(ok, parsed{n.Value, n, s, irr})
	}
	if v.Kind == yaml.SequenceNode && len(list) > 1 && len(ok) > 0 {
		tight := ok[0]
		var parts []string
		for _, p := range ok {
			parts = append(parts, fmt.Sprintf("%q every %s", p.expr, fmtSecs(p.secs)))
			if p.secs < tight.secs {
				tight = p
			}
		}
		r.change(k, "cron-list", "%s lists %d schedules (%s); the earlier runner ran the hunt once per the tightest interval, every %s, at a hash offset; hunt-runner runs one periodic schedule per hunt: write `interval: %s` for the same cadence, or keep one cron (`cron: %q`), or split the hunt into one file per cron",
			key, len(list), strings.Join(parts, ", "), fmtSecs(tight.secs), fmtSecs(tight.secs), tight.expr)
	}
	for _, p := range ok {
		if !oldIsCron(p.expr) {
			continue
		}
		_, off, err := schedule.ParseCron(p.expr)
		if err != nil {
			r.change(p.node, "irregular-cron", "cron %q: the earlier runner ran it every %s (its smallest gap) at a hash offset, not at the cron's times; hunt-runner refuses it: %s",
				p.expr, fmtSecs(p.secs), alternative(err, p.secs))
			continue
		}
		if len(list) == 1 {
			r.note(p.node, "cron-offset", "cron %q: the earlier runner fired every %s at a hash offset into the interval; hunt-runner fires exactly at the cron's times (offset %s), so after import-legacy the first window ends at the next cron fire",
				p.expr, fmtSecs(p.secs), fmtSecs(int64(off/time.Second)))
		}
	}
}

// alternative turns schedule.ParseCron's refusal into the equally spaced schedule to write.
func alternative(err error, tightest int64) string {
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, "needs a fixed interval; "); ok {
		if strings.Contains(after, "<duration>") {
			// schedule has no concrete proposal for this one; the earlier cadence is one.
			return fmt.Sprintf("write `interval: %s` for the cadence the earlier runner kept, or a cron whose fires are equally spaced", fmtSecs(tightest))
		}
		return after
	}
	if i := strings.Index(msg, "\": "); i >= 0 && errors.Is(err, schedule.ErrInvalidCron) {
		return msg[i+3:]
	}
	return fmt.Sprintf("write `interval: %s`", fmtSecs(tightest))
}

func (r *reporter) anchored(mode, cronN, intervalN *yaml.Node) {
	what := "write interval: or a periodic cron:"
	if cronN != nil && cronN.Kind == yaml.ScalarNode {
		if _, _, err := schedule.ParseCron(cronN.Value); err == nil {
			what = fmt.Sprintf("replace schedule: with `cron: %q`, whose times hunt-runner keeps exactly", cronN.Value)
		} else {
			s, _, _ := oldInterval(cronN.Value)
			what = "its cron " + strconv.Quote(cronN.Value) + " is not equally spaced: " + alternative(err, max(s, 60))
		}
	} else if intervalN != nil {
		what = fmt.Sprintf("replace schedule: with `interval: %s` (hunt-runner spreads it by a hash offset) or a cron at the wanted times", intervalN.Value)
	}
	r.change(mode, "anchored", "schedule.mode anchored: the earlier runner skipped anchored hunts (rate only), so this hunt never ran and has no watermark to import; hunt-runner refuses the mode: %s; its first run looks back one interval", what)
}

func (r *reporter) rules(keys, vals map[string]*yaml.Node) {
	k, ok := keys["rules"]
	if !ok {
		return
	}
	var names []string
	v := vals["rules"]
	for i, e := range v.Content {
		switch e.Kind {
		case yaml.ScalarNode:
			names = append(names, e.Value)
		case yaml.MappingNode:
			for j := 0; j+1 < len(e.Content); j += 2 {
				ek, ev := e.Content[j], e.Content[j+1]
				switch ek.Value {
				case "rule_name":
					names = append(names, ev.Value)
				case "source_table_name":
					r.change(ek, "global-table", "rules[%d].source_table_name %s was this rule's source table: name it in the query's FROM", i, ev.Value)
				case "target_table_name":
					r.change(ek, "global-table", "rules[%d].target_table_name %s received this rule's detections: hunt-runner stores findings in hunt_findings (read them from hunt_findings_committed); remove it", i, ev.Value)
				}
			}
		}
	}
	r.change(k, "rules", "rule-based hunt (rules: %s), compiled from rule files into one INSERT … SELECT per rule; hunt-runner runs one read-only SELECT per hunt: write each rule's detection (its where_clause over its source table) as query: with {window}, one hunt file per rule or the rules joined with UNION ALL, and remove rules:",
		strings.Join(names, ", "))
	r.change(k, "detection-cap", "the earlier runner wrote at most max_detections_per_run rows per rule and run (default 1000, DFE_HUNTS_MAX_DETECTIONS_PER_RUN, cut to 10,000) plus one summary row when capped; write `max_findings: 1000` (your deployment's value, at most 10,000): hunt-runner stores that many findings per run and counts the rest as findings_dropped, without a summary row")
}

func (r *reporter) tables(keys, vals map[string]*yaml.Node) {
	if k, ok := keys["global_source_table_name"]; ok {
		r.change(k, "global-table", "global_source_table_name %s was the source of the compiled rules; name %s in the query's FROM and remove the key", vals[k.Value].Value, vals[k.Value].Value)
	}
	for _, key := range []string{"global_target_table_name", "target"} {
		if k, ok := keys[key]; ok {
			r.change(k, "global-table", "%s %s received the detections; hunt-runner stores findings in hunt_findings (read hunt_findings_committed, one JSON row per finding): remove the key and point readers of %s there",
				key, vals[key].Value, vals[key].Value)
		}
	}
}

// apiFields are fields of the earlier runner's API that it never read; hunt-runner refuses them.
var apiFields = []struct{ key, change string }{
	{"customers", "it scoped the hunt in the earlier API but never filtered a run; remove it, and filter by customer in the query's WHERE if that was meant"},
	{"customer_filters", "it was never applied to a run; remove it, and put the filter in the query's WHERE"},
	{"log_buffer", "remove it; for late-arriving rows write delay: (the data window is shifted back by it)"},
	{"scheduling_mode", "remove it; the schedule is interval: or cron:"},
	{"min_interval_seconds", "remove it; the schedule is interval: or cron:"},
	{"explain_queries", "remove it; `hunt-runner validate --clickhouse-url …` has the server parse every query"},
}

func (r *reporter) apiFields(keys, vals map[string]*yaml.Node) {
	for _, f := range apiFields {
		if k, ok := keys[f.key]; ok {
			feature := "api-field"
			if f.key == "customers" || f.key == "customer_filters" {
				feature = "customers"
			}
			r.change(k, feature, "%s%s was an API field the earlier runner did not read, and hunt-runner refuses it: %s", f.key, flow(vals[f.key]), f.change)
		}
	}
}

// flow renders a short value for a message: " [acme, globex]".
func flow(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return " " + n.Value
	case yaml.SequenceNode:
		var parts []string
		for _, e := range n.Content {
			parts = append(parts, e.Value)
		}
		return " [" + strings.Join(parts, ", ") + "]"
	}
	return ""
}

func (r *reporter) query(keys, vals map[string]*yaml.Node) {
	q, ok := vals["query"]
	if !ok || strings.TrimSpace(q.Value) == "" {
		if _, hasRules := keys["rules"]; !hasRules {
			r.change(&yaml.Node{Line: 1, Column: 1}, "query", "no query: the earlier runner loaded this hunt with no statement and failed every fire without advancing; write query: with one SELECT over {window}")
		}
		return
	}
	if m := insertRe.FindStringSubmatch(q.Value); m != nil {
		r.change(keys["query"], "query", "the query inserts into %s; hunt-runner runs a read-only SELECT and stores its rows in hunt_findings: keep only the SELECT part", m[1])
	}
}

func (r *reporter) caps(keys, vals map[string]*yaml.Node) {
	for _, key := range []string{"max_detections", "max_detections_per_run"} {
		k, ok := keys[key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(vals[key].Value)
		if err != nil || n < 1 {
			r.change(k, "detection-cap", "%s: %s is not a positive number; write `max_findings: 1000` (at most 10,000)", key, vals[key].Value)
			continue
		}
		if n > 10000 {
			r.change(k, "detection-cap", "%s: %d is above the ceiling of 10,000 (the earlier runner cut it too); write `max_findings: 10000`", key, n)
			continue
		}
		r.change(k, "detection-cap", "%s: %d: write `max_findings: %d` (hunt-runner's cap on the findings one run stores; default 1000, at most 10,000)", key, n, n)
	}
	if _, hasRules := keys["rules"]; hasRules {
		return
	}
	if _, capped := keys["max_findings"]; capped {
		return
	}
	if k, ok := keys["query"]; ok {
		if _, set := keys["max_detections"]; set {
			return
		}
		if _, set := keys["max_detections_per_run"]; set {
			return
		}
		r.note(k, "detection-cap", "the earlier runner stored every row a direct query returned; hunt-runner stores at most max_findings per run (default 1000, ceiling 10,000) and counts the rest as findings_dropped: if this query can return more, set max_findings: (up to 10000) or aggregate")
	}
}
