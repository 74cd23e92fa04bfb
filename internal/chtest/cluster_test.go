package chtest

import "testing"

func TestReplicateEngines(t *testing.T) {
	for in, want := range map[string]string{
		"CREATE TABLE e (ts DateTime) ENGINE = MergeTree ORDER BY ts":                "CREATE TABLE e (ts DateTime) ENGINE = ReplicatedMergeTree ORDER BY ts",
		"CREATE TABLE e (a UInt8, v UInt64) engine=ReplacingMergeTree(v) ORDER BY a": "CREATE TABLE e (a UInt8, v UInt64) ENGINE = ReplicatedReplacingMergeTree(v) ORDER BY a",
		"CREATE TABLE e (a UInt8) ENGINE = ReplicatedMergeTree ORDER BY a":           "CREATE TABLE e (a UInt8) ENGINE = ReplicatedMergeTree ORDER BY a",
		"CREATE TABLE e (a UInt8) ENGINE = Memory":                                   "CREATE TABLE e (a UInt8) ENGINE = Memory",
		"INSERT INTO e SELECT 'ENGINE MergeTree'":                                    "INSERT INTO e SELECT 'ENGINE MergeTree'",
	} {
		if got := replicateEngines(in); got != want {
			t.Errorf("replicateEngines(%q) = %q, want %q", in, got, want)
		}
	}
}
