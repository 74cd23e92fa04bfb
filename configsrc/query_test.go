package configsrc

import (
	"strings"
	"testing"
)

const win = " WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}"

// TestCheckQuery covers what the corpus does not: look-alikes that must pass, and clause forms.
func TestCheckQuery(t *testing.T) {
	for _, tc := range []struct {
		q, want string // want "" = accepted
	}{
		{"SELECT format, settings FROM t" + win, ""},
		{"SELECT x AS format FROM t" + win + " ORDER BY format", ""},
		{"SELECT URLHierarchy(u), decodeURLComponent(u), fileName FROM t" + win, ""},
		{"SELECT dictGet('geo', 'country', ip) FROM t" + win, "dictGet() reads a dictionary that is not allowed; an operator can allow it with --allow-dictionaries"},
		{"SELECT dictGet(concat('ge', 'o'), 'country', ip) FROM t" + win, "must name its dictionary in a plain string literal"},
		{"SELECT 'url(x); DROP' FROM t" + win + " -- s3('x')", ""},
		{"(SELECT 1 FROM t" + win + ") UNION ALL (SELECT 2 FROM t" + win + ")", ""},
		{"SELECT 1 FROM t" + win + ";  -- trailing\n", ""},
		{"SELECT * FROM merge(currentDatabase(), '^events')" + win, "table function merge()"},
		{"SELECT * FROM numbers(10) AS n, sample.t" + win, ""},
		{"SELECT * FROM zeros(10) AS n, sample.t" + win, "table function zeros()"},
		{"SELECT * FROM numbers(10000000) AS n" + win, "generates more than 1000000 rows"},
		{"SELECT hasColumnInTable('db', 't', 'c') FROM sample.t" + win, "hasColumnInTable(), which is not on hunt-runner's function allowlist"},
		{"SELECT countIf(x > 1), sumArrayIfOrNull(a, b), uniqState(u) FROM sample.t" + win, ""},
		{"SELECT * APPLY toString FROM sample.t" + win, "APPLY"},
		{"SELECT * FROM sample.t AS a JOIN view(SELECT 1 AS x) AS v ON a.x = v.x" + win, "table function view()"},
		{"SELECT * FROM sample.t ARRAY JOIN splitByChar(',', s) AS part" + win, ""},
		{"SELECT * FROM sample.t AS a JOIN sample.u AS b ON lower(a.x) = lower(b.x)" + win, ""},
		{"SELECT * FROM sample.t FINAL, filesystem('/etc')" + win, "lists files on the server's filesystem"},
		{"SELECT $$x$$, $tag$ url('http://h/') $$ $tag$ FROM sample.t" + win, ""},
		{"SELECT 1 FROM sample.t" + win + " AND x = $$ ) UNION ALL SELECT 1 $$", ""},
		{"SELECT $$unclosed FROM sample.t" + win, "unterminated heredoc"},
		{"SELECT 1 FROM sample.t" + win + ") UNION ALL (SELECT 1", "closes a bracket the query did not open"},
		{"SELECT 1 FROM sample.t" + win + " AND x IN ((1)", "1 opened and never closed"},
		{"SELECT [1, 2) FROM sample.t" + win, "closes a bracket"},
		{"SELECT 1 FROM sample.t" + win + " SETTINGS `max_execution_time` = 0", "SETTINGS max_execution_time is not allowed"},
		{"SELECT 1 FROM sample.t" + win + " SETTINGS max_threads = 1, \"readonly\" = 0", "SETTINGS readonly is not allowed"},
		{"SELECT 1 FROM sample.t" + win + " SETTINGS max_threads = 1, log_comment = 'x'", "not on hunt-runner's settings allowlist"},
		{"SELECT 1 FROM sample.t" + win + " SETTINGS max_threads = 2, max_block_size = 1000", ""},
		{"SELECT 1 FROM sample.t" + win + " SETTINGS join_use_nulls = 2", "SETTINGS join_use_nulls takes 0 or 1"},
		{"SELECT 1 FROM sample.t" + win + " SETTINGS max_block_size = 1e9", "takes a whole number at most 1048576"},
		{"SELECT 1 FROM sample.t" + win + " SETTINGS join_algorithm = 'hash', optimize_read_in_order = true", ""},
		{"SELECT settings FROM sample.t" + win + " AND settings = 1", ""},
		{"SELECT * FROM system.query_log" + win, "reads system tables"},
		{"SELECT * FROM `system`.`tables`" + win, "reads system tables"},
		{"SELECT * FROM INFORMATION_SCHEMA.TABLES" + win, "reads system tables"},
		{"SELECT `a\\nb` FROM sample.t" + win, "backslash or control character"},
		{"SELECT sample.`a\tb` FROM sample.t" + win, "backslash or control character"},
		{"SELECT 1 FROM sample.t" + win + " # a comment\n", ""},
		{"SELECT 1 FROM t" + win + " FORMAT JSON", "FORMAT clause"},
		{"SELECT 1 FROM t" + win + " FORMAT JSON SETTINGS max_threads = 1", "FORMAT clause"},
		{"SELECT 1 FROM t" + win + " SETTINGS Readonly = 0", "SETTINGS Readonly is not allowed"},
		{"SELECT * FROM REMOTE('h', db.t)" + win, "queries another ClickHouse server"},
		{"SELECT * FROM clusterAllReplicas('c', db.t)" + win, "fans the query out"},
		{"SELECT * FROM icebergS3('https://b/x')" + win, "data lake"},
		{"SELECT * FROM postgresql('h:5432', 'db', 't', 'u', 'p')" + win, "PostgreSQL"},
		{"SELECT * FROM executable('x.sh', TabSeparated, 'a String')" + win, "runs a program"},
		{"SELECT * FROM input('a String')" + win, "reads data sent by the client"},
		{"INSERT INTO x SELECT 1", "an INSERT statement"},
		{"SET readonly = 0", "a SET statement"},
		{"SYSTEM FLUSH LOGS", "a SYSTEM statement"},
		{"SHOW TABLES", `must start with SELECT or WITH`},
		{"SELECT 1 /* open", "unterminated /* comment"},
		{"SELECT `col FROM t", "unterminated quoted identifier"},
		{"-- only a comment", "only comments"},
		{"SELECT 1; SELECT 2", "a second one starts here"},
		{"SELECT 1 FROM t WHERE ts >= {window_start:DateTime64(3)}", "does not use both"},
	} {
		_, issues := checkQuery(tc.q)
		var msgs []string
		for _, is := range issues {
			msgs = append(msgs, is.msg)
		}
		got := strings.Join(msgs, " | ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%q:\n got  %q\n want %q", tc.q, got, tc.want)
		}
	}
}

func TestExpandWindow(t *testing.T) {
	q := "SELECT 1 FROM t WHERE {window} AND x = '{window}' OR {window}"
	info, issues := checkQuery(q)
	if len(issues) != 0 {
		t.Fatal(issues)
	}
	got := expandWindow(q, info.windowTokens, "`event time`")
	want := "SELECT 1 FROM t WHERE (`event time` >= {window_start:DateTime64(3)} AND `event time` < {window_end:DateTime64(3)}) AND x = '{window}' OR (`event time` >= {window_start:DateTime64(3)} AND `event time` < {window_end:DateTime64(3)})"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
