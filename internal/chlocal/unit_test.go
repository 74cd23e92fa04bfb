package chlocal

import (
	"errors"
	"testing"
)

func TestParseException(t *testing.T) {
	for _, tc := range []struct {
		in   string
		code int
		name string
		msg  string
	}{
		{"Code: 62. DB::Exception: Syntax error: failed at position 1 (SELEC): SELEC 1. (SYNTAX_ERROR)", 62, "SYNTAX_ERROR", "Syntax error: failed at position 1 (SELEC): SELEC 1"},
		{"Code: 60. DB::Exception: Unknown table expression identifier 'x' in scope SELECT * FROM x. (UNKNOWN_TABLE) (version 26.5.1.1)", 60, "UNKNOWN_TABLE", "Unknown table expression identifier 'x' in scope SELECT * FROM x"},
		{"Code: 115. DB::Exception: Code: 115. DB::Exception: Unknown setting 'zz'. (UNKNOWN_SETTING) (version 26.5.1.1). (UNKNOWN_SETTING)", 115, "UNKNOWN_SETTING", "Unknown setting 'zz'"},
		{"something broke", 1001, "STD_EXCEPTION", "something broke"},
	} {
		ex := parseException(tc.in)
		if ex.code != tc.code || ex.name != tc.name || ex.msg != tc.msg {
			t.Errorf("parseException(%q) = %+v, want {%d %s %q}", tc.in, ex, tc.code, tc.name, tc.msg)
		}
	}
	ex := parseException("Code: 60. DB::Exception: Unknown table x. (UNKNOWN_TABLE)")
	if got, want := ex.body("26.5.1.1"), "Code: 60. DB::Exception: Unknown table x (UNKNOWN_TABLE) (version 26.5.1.1)\n"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
	if ex.status() != 404 || parseException("Code: 62. DB::Exception: x. (SYNTAX_ERROR)").status() != 400 {
		t.Error("wrong HTTP status mapping")
	}
}

func TestRewriteReplicated(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{
			"CREATE TABLE db.t ON CLUSTER '{cluster}' (a String, ts DateTime) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/t', '{replica}', ts) ORDER BY a",
			"CREATE TABLE db.t (a String, ts DateTime) ENGINE = ReplacingMergeTree(ts) ORDER BY a",
		},
		{
			"CREATE TABLE t ON CLUSTER main (a UInt8) ENGINE = ReplicatedMergeTree ORDER BY a",
			"CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY a",
		},
		{
			"CREATE TABLE t (a Int8, s Int8) ENGINE = ReplicatedCollapsingMergeTree('/p','r',s) ORDER BY a",
			"CREATE TABLE t (a Int8, s Int8) ENGINE = CollapsingMergeTree(s) ORDER BY a",
		},
		{
			"CREATE TABLE t (a Int8) ENGINE = ReplicatedReplacingMergeTree('/p', 'r') ORDER BY a",
			"CREATE TABLE t (a Int8) ENGINE = ReplacingMergeTree() ORDER BY a",
		},
		{
			"CREATE DATABASE IF NOT EXISTS hr ON CLUSTER `c1` ENGINE = Replicated('/clickhouse/databases/hr', '{shard}', '{replica}')",
			"CREATE DATABASE IF NOT EXISTS hr ENGINE = Atomic",
		},
		{
			"CREATE TABLE hr.t (a UInt8) ENGINE = ReplicatedReplacingMergeTree ORDER BY a",
			"CREATE TABLE hr.t (a UInt8) ENGINE = ReplacingMergeTree ORDER BY a",
		},
		{"ALTER TABLE t ON CLUSTER \"c\" ADD COLUMN x UInt8", "ALTER TABLE t ADD COLUMN x UInt8"},
		{"DROP TABLE IF EXISTS t ON CLUSTER '{cluster}' SYNC", "DROP TABLE IF EXISTS t SYNC"},
		// Not DDL: left alone, even when it mentions the words.
		{"SELECT 'ReplicatedMergeTree ON CLUSTER x'", "SELECT 'ReplicatedMergeTree ON CLUSTER x'"},
		{"INSERT INTO t VALUES ('ON CLUSTER c')", "INSERT INTO t VALUES ('ON CLUSTER c')"},
	} {
		if got := rewriteReplicated(tc.in); got != tc.want {
			t.Errorf("rewriteReplicated(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestStripDropSync(t *testing.T) {
	for in, want := range map[string]string{
		"DROP TABLE t SYNC":               "DROP TABLE t",
		"DROP DATABASE IF EXISTS d SYNC;": "DROP DATABASE IF EXISTS d",
		"drop table t sync\n":             "drop table t",
		"DROP TABLE t":                    "DROP TABLE t",
		"SELECT 'x SYNC'":                 "SELECT 'x SYNC'",
		"SYSTEM SYNC REPLICA t":           "SYSTEM SYNC REPLICA t",
	} {
		if got := stripDropSync(in); got != want {
			t.Errorf("stripDropSync(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	if v, err := checkVersion("26.5.1.1"); err != nil || v != [3]uint64{26, 5, 1} {
		t.Fatalf("checkVersion(26.5.1.1) = %v, %v", v, err)
	}
	for _, bad := range []string{"25.8.1.1", "27.1.1.1", "junk", ""} {
		if _, err := checkVersion(bad); !errors.Is(err, ErrVersion) {
			t.Errorf("checkVersion(%q) = %v, want ErrVersion", bad, err)
		}
	}
}

func TestInsertDataSplit(t *testing.T) {
	for _, tc := range []struct{ in, head, tail string }{
		{"INSERT INTO t (a, b) FORMAT Native", "INSERT INTO t (a, b)", " FORMAT Native"},
		{"INSERT INTO `db`.`t` (a) SETTINGS insert_deduplication_token = 'x' FORMAT Native", "INSERT INTO `db`.`t` (a)", " SETTINGS insert_deduplication_token = 'x' FORMAT Native"},
		{"insert into t format CSV\n", "insert into t", " format CSV"},
	} {
		m := insertDataRe.FindStringSubmatch(tc.in)
		if m == nil || m[1] != tc.head || m[2] != tc.tail {
			t.Errorf("split(%q) = %q, want [%q %q]", tc.in, m, tc.head, tc.tail)
		}
	}
	if insertDataRe.MatchString("INSERT INTO t VALUES") || insertDataRe.MatchString("SELECT 1 FORMAT Native") {
		t.Error("matched a statement without body data")
	}
}
