package configsrc

import (
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

func TestSourcesAndBudgetDecode(t *testing.T) {
	src := notifyBase + "sources:\n  - {table: logs.events, time_column: ts, max_silence: 15m}\n  - table: dns\n    time_column: _time\n    max_silence: 1h\n" +
		"max_rows_read: 1000000\nmax_bytes_read: 2GiB\non_budget: skip\n"
	p, probs := decodeHunt("h.yaml", []byte(src), 0.8)
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	h := p.hunt
	want := []hunt.Source{{Table: "logs.events", TimeColumn: "ts", MaxSilence: 15 * time.Minute, Line: 5},
		{Table: "dns", TimeColumn: "_time", MaxSilence: time.Hour, Line: 6}}
	if len(h.Sources) != 2 || h.Sources[0] != want[0] || h.Sources[1] != want[1] {
		t.Errorf("Sources = %+v, want %+v", h.Sources, want)
	}
	if h.MaxRowsRead != 1000000 || h.MaxBytesRead != 2<<30 || h.OnBudget != hunt.OnBudgetSkip {
		t.Errorf("budget = %d rows, %d bytes, on_budget %q", h.MaxRowsRead, h.MaxBytesRead, h.OnBudget)
	}
	plain, _ := decodeHunt("h.yaml", []byte(notifyBase), 0.8)
	if plain.hunt.OnBudget != hunt.OnBudgetDefault || plain.hunt.MaxRowsRead != 0 || plain.hunt.Sources != nil {
		t.Errorf("a hunt without the keys decoded as %+v", plain.hunt)
	}
	if plain.hunt.Hash == h.Hash {
		t.Error("sources and the budget do not change the revision")
	}
	// The operator's default applies to a hunt that sets none, and is part of its revision.
	def, probs := decodeHuntPolicy("h.yaml", []byte(notifyBase), 0.8, Policy{Budget: Budget{MaxRowsReadDefault: 500, MaxBytesReadDefault: 1 << 20}})
	if len(probs) > 0 || def.hunt.MaxRowsRead != 500 || def.hunt.MaxBytesRead != 1<<20 || def.hunt.Hash == plain.hunt.Hash {
		t.Errorf("with defaults: %+v, %v", def.hunt, probs)
	}
}

func TestSourcesAndBudgetProblems(t *testing.T) {
	ceil := Policy{Budget: Budget{MaxRowsReadCeiling: 1000, MaxBytesReadCeiling: 1 << 30}, CoordinationDatabase: "hunt_runner"}
	tests := []struct{ extra, want string }{
		{"sources: logs\n", "h.yaml:4:10: sources must be a non-empty list"},
		{"sources: [logs]\n", "h.yaml:4:11: a sources entry must be a mapping"},
		{"sources: [{time_column: ts, max_silence: 1m}]\n", "h.yaml:4:11: a sources entry needs table:"},
		{"sources: [{table: t, max_silence: 1m}]\n", "h.yaml:4:11: a sources entry needs time_column:"},
		{"sources: [{table: t, time_column: ts}]\n", "h.yaml:4:11: a sources entry needs max_silence:"},
		{"sources: [{table: t, time_column: ts, max_silence: soon}]\n", "h.yaml:4:52: sources.max_silence"},
		{"sources: [{table: t, time_column: ts, max_silence: 0}]\n", "h.yaml:4:52: sources.max_silence"},
		{"sources: [{table: 'a.b.c', time_column: ts, max_silence: 1m}]\n", "h.yaml:4:19: sources.table must be db.table or table"},
		{"sources: [{table: t, time_column: 'a b', max_silence: 1m}]\n", "h.yaml:4:35: sources.time_column must be a bare column name"},
		{"sources: [{table: t, time_column: ts, max_silence: 1m, silence: 2m}]\n", "h.yaml:4:56: unknown key; known keys: max_silence, table, time_column"},
		{"sources: [{table: t, time_column: ts, max_silence: 1m}, {table: t, time_column: ts, max_silence: 1m}]\n", "h.yaml:4:65: sources lists this table twice"},
		{"sources: [{table: system.query_log, time_column: event_time, max_silence: 1m}]\n", "h.yaml:4:19: sources.table is held to the rules"},
		{"sources: [{table: hunt_runner.hunt_watermark, time_column: updated, max_silence: 1m}]\n", "h.yaml:4:19: sources.table is held to the rules"},
		{"sources: [{table: hunt_lease, time_column: claimed, max_silence: 1m}]\n", "h.yaml:4:19: sources.table is held to the rules"},
		{"max_rows_read: 1001\n", "h.yaml:4:16: max_rows_read 1001 is above the operator's ceiling of 1000"},
		{"max_rows_read: 0\n", "h.yaml:4:16: max_rows_read must be a whole number"},
		{"max_rows_read: 10k\n", "h.yaml:4:16: max_rows_read must be a whole number"},
		{"max_rows_read: [1]\n", "h.yaml:4:16: max_rows_read must be a whole number"},
		{"max_bytes_read: 2GiB\n", "h.yaml:4:17: max_bytes_read 2GiB is above the operator's ceiling"},
		{"max_bytes_read: 2 parsecs\n", "h.yaml:4:17: max_bytes_read must be a size"},
		{"max_bytes_read: 1.5GB\n", "h.yaml:4:17: max_bytes_read must be a size"},
		{"on_budget: retry\n", "h.yaml:4:12: on_budget must be fail"},
	}
	for _, tt := range tests {
		_, probs := decodeHuntPolicy("h.yaml", []byte(notifyBase+tt.extra), 0.8, ceil)
		found := false
		for _, p := range probs {
			if strings.HasPrefix(p.Error(), tt.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: problems %v, want one starting %q", tt.extra, probs, tt.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"1": 1, "2GiB": 2 << 30, "500MB": 500e6, "3 kib": 3 << 10, "7B": 7, "1TB": 1e12} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1", "1.5GB", "2 parsecs", "99999999999999999999", "20000000TiB"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
}

func TestBudgetCheck(t *testing.T) {
	if err := (Budget{MaxRowsReadDefault: 10, MaxRowsReadCeiling: 5}).Check(); err == nil {
		t.Error("a rows default above its ceiling passed")
	}
	if err := (Budget{MaxBytesReadDefault: 10, MaxBytesReadCeiling: 5}).Check(); err == nil {
		t.Error("a bytes default above its ceiling passed")
	}
	if err := (Budget{MaxRowsReadDefault: 10}).Check(); err != nil {
		t.Errorf("no ceiling: %v", err)
	}
}
