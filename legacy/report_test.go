package legacy

import (
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/golden"
)

// TestReportCorpus: the report over a corpus of earlier-format files, line for line.
func TestReportCorpus(t *testing.T) {
	rep, err := ReportDir("testdata/corpus")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range rep.Findings {
		b.WriteString(f.String() + "\n")
	}
	golden.Check(t, "testdata/report.golden", b.String())
	if rep.Files != 26 {
		t.Errorf("%d files read, want 26 (*.yaml and *.yml, recursively)", rep.Files)
	}
	for _, f := range rep.Findings {
		if f.File == "rate-interval.yaml" {
			t.Errorf("a file of carried-over fields only has a finding: %s", f)
		}
	}
}

// TestReportCoversEveryEarlierField: each field of the earlier format that does not carry over
// as is gets a finding of its own, at its line, naming what to write instead; the fields that
// do carry over get none.
func TestReportCoversEveryEarlierField(t *testing.T) {
	const q = "query: SELECT 1 FROM t WHERE {window}\nmax_findings: 10\n"
	cases := []struct {
		name, file, body, feature, says string
		line                            int
		note                            bool
	}{
		{"rules", "h.yaml", "cron: '*/5 * * * *'\nrules: [a]\n", "rules", "query:", 2, false},
		{"rules cap", "h.yaml", "cron: '*/5 * * * *'\nrules: [a]\n", "detection-cap", "max_findings: 1000", 2, false},
		{"rule_name/source_table_name", "h.yaml", "cron: '*/5 * * * *'\nrules:\n  - rule_name: a\n    source_table_name: s.t\n", "global-table", "FROM", 4, false},
		{"target_table_name", "h.yaml", "cron: '*/5 * * * *'\nrules:\n  - rule_name: a\n    target_table_name: s.d\n", "global-table", "hunt_findings", 4, false},
		{"customers", "h.yaml", "interval: 5m\ncustomers: [acme]\n" + q, "customers", "remove it", 2, false},
		{"customer_filters", "h.yaml", "interval: 5m\ncustomer_filters: {a: b}\n" + q, "customers", "WHERE", 2, false},
		{"global_source_table_name", "h.yaml", "interval: 5m\nglobal_source_table_name: d.src\n" + q, "global-table", "name d.src in the query's FROM", 2, false},
		{"global_target_table_name", "h.yaml", "interval: 5m\nglobal_target_table_name: d.det\n" + q, "global-table", "hunt_findings", 2, false},
		{"target", "h.yaml", "interval: 5m\ntarget: d.det\n" + q, "global-table", "hunt_findings", 2, false},
		{"cron list", "h.yaml", "cron:\n  - '0 * * * *'\n  - '*/20 * * * *'\n" + q, "cron-list", "every 20m", 1, false},
		{"irregular cron", "h.yaml", "cron: '0 9,17 * * *'\n" + q, "irregular-cron", "`interval: 8h`", 1, false},
		{"anchored", "h.yaml", "schedule:\n  mode: anchored\n  cron: '15 3 * * *'\n" + q, "anchored", `cron: "15 3 * * *"`, 2, false},
		{"schedule.mode other", "h.yaml", "schedule:\n  mode: sliding\n  interval: 5m\n" + q, "schedule", "interval:", 2, false},
		{"schedule interval and cron", "h.yaml", "schedule:\n  interval: 5m\n  cron: '0 * * * *'\n" + q, "schedule", "remove schedule.cron", 3, false},
		{"schedule.interval boolean", "h.yaml", "schedule:\n  interval: true\n" + q, "interval", "1s", 2, false},
		{"schedule.interval float", "h.yaml", "schedule:\n  interval: 2.5\n" + q, "interval", "whole units", 2, false},
		{"max_detections_per_run", "h.yaml", "interval: 5m\nmax_detections_per_run: 20000\n" + q, "detection-cap", "max_findings: 10000", 2, false},
		{"max_detections", "h.yaml", "interval: 5m\nmax_detections: 300\n" + q, "detection-cap", "max_findings: 300", 2, false},
		{"uncapped direct query", "h.yaml", "interval: 5m\nquery: SELECT 1 FROM t WHERE {window}\n", "detection-cap", "max_findings", 2, true},
		{"INSERT query", "h.yaml", "interval: 5m\nquery: INSERT INTO d.det SELECT 1 FROM t WHERE {window}\nmax_findings: 1\n", "query", "SELECT", 2, false},
		{"no query", "h.yaml", "interval: 5m\n", "query", "query:", 1, false},
		{"log_buffer", "h.yaml", "interval: 5m\nlog_buffer: 60\n" + q, "api-field", "delay:", 2, false},
		{"scheduling_mode", "h.yaml", "interval: 5m\nscheduling_mode: pull\n" + q, "api-field", "remove it", 2, false},
		{"min_interval_seconds", "h.yaml", "interval: 5m\nmin_interval_seconds: 60\n" + q, "api-field", "remove it", 2, false},
		{"explain_queries", "h.yaml", "interval: 5m\nexplain_queries: true\n" + q, "api-field", "validate --clickhouse-url", 2, false},
		{"display_name", "h.yaml", "interval: 5m\ndisplay_name: X\n" + q, "identity", "description:", 2, false},
		{"name", "h.yaml", "interval: 5m\nname: X\n" + q, "identity", "description:", 2, false},
		{"hunt_id", "h.yaml", "interval: 5m\nhunt_id: X\n" + q, "identity", "id:", 2, false},
		{"id", "h.yaml", "interval: 5m\nid: other\n" + q, "identity", `"h"`, 2, true},
		{"enabled false", "h.yaml", "interval: 5m\nenabled: false\n" + q, "enabled", "enabled: false", 2, true},
		{"enabled false through an alias", "h.yaml", "labels: {off: &f false}\ninterval: 5m\nenabled: *f\n" + q, "enabled", "enabled: false", 3, true},
		{"schedule through an alias", "h.yaml", "base: &s {mode: anchored, cron: '0 * * * *', interval: 1h}\nschedule: *s\n" + q, "anchored", "schedule.mode anchored", 1, false},
		{"severity", "h.yaml", "interval: 5m\nseverity: high\n" + q, "severity", "severity: high", 2, true},
		{"cron pinned", "h.yaml", "cron: '*/10 * * * *'\n" + q, "cron-offset", "next cron fire", 1, true},
		{"top-level interval", "h.yaml", "interval: 5m\n" + q, "schedule", "every 5m", 1, true},
		{".yml file", "h.yml", "schedule: {mode: rate, interval: 5m}\n" + q, "unread-file", "*.yaml", 1, true},
		{"nested file", "d/h.yaml", "schedule: {mode: rate, interval: 5m}\n" + q, "unread-file", "directly", 1, true},
		{"not YAML", "h.yaml", "a: [\n", "yaml", "not valid YAML", 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := ReportFile(c.file, []byte(c.body))
			for _, f := range fs {
				if f.Feature == c.feature && f.Line == c.line && f.Note == c.note && strings.Contains(f.Message, c.says) {
					return
				}
			}
			t.Errorf("no %s finding (note %t) at line %d saying %q; got:\n%v", c.feature, c.note, c.line, c.says, fs)
		})
	}
	carried := "schedule:\n  mode: rate\n  cron: '*/5 * * * *'\ntimestamp_field: ts\ncheckpoint_timestamp_field: ts2\nenabled: true\n" + q
	for _, f := range ReportFile("h.yaml", []byte(carried)) {
		if !f.Note || f.Feature != "cron-offset" {
			t.Errorf("carried-over fields gave %s", f)
		}
	}
}

// TestOldInterval: the earlier runner's interval parsing, from the reference examples.
func TestOldInterval(t *testing.T) {
	for in, want := range map[string]int64{"*/5 * * * *": 300, "0 * * * *": 3600, "* * * * *": 60, "*/2 * * * *": 120,
		"0 9 * * 1-5": 86400, "30s": 30, "5m": 300, "1h": 3600, "2d": 172800, "1h30m": 5400, "2d12h": 216000, "90s": 90, "300": 300} {
		if got, _, ok := oldInterval(in); !ok || got != want {
			t.Errorf("oldInterval(%q) = %d, %t; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"banana", "", "5x", "1h30", "1h banana", "-5m"} {
		if got, _, ok := oldInterval(in); ok {
			t.Errorf("oldInterval(%q) = %d, want refused", in, got)
		}
	}
	if _, irregular, _ := oldInterval("0 9 * * 1-5"); !irregular {
		t.Error("weekdays not flagged irregular")
	}
}
