package chstore

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConsistency(t *testing.T) {
	for in, want := range map[string]Consistency{
		"": ConsistencyAuto, "auto": ConsistencyAuto, " Quorum ": ConsistencyQuorum,
		"single-endpoint": ConsistencySingleEndpoint, "sequential": ConsistencySequential,
	} {
		if got, err := ParseConsistency(in); err != nil || got != want {
			t.Errorf("ParseConsistency(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"strong", "single", "quorum,sequential"} {
		if _, err := ParseConsistency(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseConsistency(%q) = %v, want ErrConfig", bad, err)
		}
	}
}

func TestConsistencySettings(t *testing.T) {
	q := ConsistencyQuorum.Settings()
	if q["insert_quorum"] != "auto" || q["insert_quorum_parallel"] != 0 || q["select_sequential_consistency"] != 1 || len(q) != 3 {
		t.Errorf("quorum settings %v", q)
	}
	s := ConsistencySequential.Settings()
	if s["select_sequential_consistency"] != 1 || len(s) != 1 {
		t.Errorf("sequential settings %v (SharedMergeTree needs the read setting only)", s)
	}
	if ConsistencySingleEndpoint.Settings() != nil || ConsistencyAuto.Settings() != nil {
		t.Error("single-endpoint and auto must add no settings")
	}
}

func TestTableKind(t *testing.T) {
	for _, tc := range []struct {
		engines map[string]string
		want    TableKind
	}{
		{nil, TablesMissing},
		{map[string]string{"hunt_lease": "ReplacingMergeTree", "hunt_run": "MergeTree"}, TablesPlain},
		{map[string]string{"hunt_lease": "ReplicatedReplacingMergeTree", "hunt_run": "ReplicatedMergeTree"}, TablesReplicated},
		{map[string]string{"hunt_lease": "SharedReplacingMergeTree"}, TablesShared},
		// Half-migrated: the strongest need wins, whatever the map order.
		{map[string]string{"hunt_lease": "ReplacingMergeTree", "hunt_watermark": "ReplicatedReplacingMergeTree", "hunt_run": "SharedMergeTree"}, TablesReplicated},
		{map[string]string{"hunt_lease": "ReplacingMergeTree", "hunt_run": "SharedMergeTree"}, TablesShared},
	} {
		for range 20 { // map iteration order varies
			if got := tableKind(tc.engines); got != tc.want {
				t.Fatalf("tableKind(%v) = %s, want %s", tc.engines, got, tc.want)
			}
		}
	}
}

// The matrix of tables × mode × endpoints: what is refused, what is warned about.
func TestConsistencyCheck(t *testing.T) {
	type outcome int
	const (
		ok outcome = iota
		warn
		refuse
	)
	for _, tc := range []struct {
		tables    TableKind
		mode      Consistency
		endpoints int
		want      outcome
		mention   string
	}{
		{TablesReplicated, ConsistencyQuorum, 2, ok, ""},
		{TablesReplicated, ConsistencyQuorum, 1, ok, ""},
		{TablesReplicated, ConsistencySingleEndpoint, 2, refuse, "list one host"},
		{TablesReplicated, ConsistencySequential, 3, refuse, "--consistency quorum"},
		{TablesReplicated, ConsistencySingleEndpoint, 1, warn, "same replica"},
		{TablesReplicated, ConsistencySequential, 1, warn, "quorum"},
		{TablesPlain, ConsistencySingleEndpoint, 1, ok, ""},
		{TablesPlain, ConsistencySingleEndpoint, 2, refuse, "list one host"},
		{TablesPlain, ConsistencyQuorum, 1, warn, "change nothing"},
		{TablesPlain, ConsistencySequential, 1, warn, "change nothing"},
		{TablesShared, ConsistencySequential, 2, ok, ""},
		{TablesShared, ConsistencyQuorum, 1, ok, ""},
		{TablesShared, ConsistencySingleEndpoint, 1, warn, "sequential"},
		{TablesMissing, ConsistencyQuorum, 2, ok, ""},
		{TablesUnknown, ConsistencySingleEndpoint, 2, refuse, "list one host"},
	} {
		r := ConsistencyReport{Tables: tc.tables, Mode: tc.mode, Endpoints: tc.endpoints,
			Engines: map[string]string{"hunt_lease": "X"}}
		err := r.check()
		var got outcome
		text := ""
		switch {
		case err != nil:
			got, text = refuse, err.Error()
			if !errors.Is(err, ErrConsistency) {
				t.Errorf("%s/%s/%d: %v does not wrap ErrConsistency", tc.tables, tc.mode, tc.endpoints, err)
			}
		case len(r.Warnings) > 0:
			got, text = warn, strings.Join(r.Warnings, "; ")
		}
		if got != tc.want || !strings.Contains(text, tc.mention) {
			t.Errorf("tables %s, mode %s, %d endpoints: outcome %d %q; want %d mentioning %q",
				tc.tables, tc.mode, tc.endpoints, got, text, tc.want, tc.mention)
		}
	}
}

// auto's refusal says that auto chose, and why, rather than blame a flag nobody set.
func TestConsistencyCheckAuto(t *testing.T) {
	r := ConsistencyReport{Requested: ConsistencyAuto, Mode: ConsistencySingleEndpoint, Tables: TablesPlain,
		Endpoints: 2, Reason: "coordination tables are not replicated"}
	err := r.check()
	if !errors.Is(err, ErrConsistency) || !strings.Contains(err.Error(), "--consistency auto found") ||
		!strings.Contains(err.Error(), "schema --topology replicated") {
		t.Errorf("auto → single-endpoint with two hosts: %v", err)
	}
}

// single-endpoint with several hosts is refused before connecting; other modes are not.
func TestWithDefaultsConsistency(t *testing.T) {
	multi := "clickhouse://ch1:9000,ch2:9000/db"
	if _, err := (Options{URL: multi, Consistency: ConsistencySingleEndpoint}).WithDefaults(); !errors.Is(err, ErrConfig) ||
		!errors.Is(err, ErrConsistency) {
		t.Errorf("single-endpoint with two hosts: %v, want ErrConfig and ErrConsistency", err)
	}
	for _, c := range []Consistency{"", ConsistencyAuto, ConsistencyQuorum, ConsistencySequential} {
		o, err := Options{URL: multi, Consistency: c}.WithDefaults()
		if err != nil {
			t.Errorf("%q with two hosts: %v", c, err)
		}
		if c == "" && o.Consistency != ConsistencyAuto {
			t.Errorf("empty consistency became %q, want auto", o.Consistency)
		}
	}
	if _, err := (Options{URL: multi, Consistency: ConsistencySingleEndpoint, SkipConsistency: true}).WithDefaults(); err != nil {
		t.Errorf("a connection that skips consistency (hunts) was refused: %v", err)
	}
	if _, err := (Options{URL: multi, Consistency: "strict"}).WithDefaults(); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown mode: %v", err)
	}
}
