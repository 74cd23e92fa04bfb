package status

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// fix is the fixture's database and the server instant it was written at. Status reads it
// with the snapshot's clock pinned a second after that instant (store), so a minute boundary
// passing between writing and reading, on a loaded machine, changes nothing a test sees.
type fix struct {
	*chtest.DB
	at time.Time
}

func (f *fix) store() Reader {
	return pinnedClock{Reader: store.New(f.Conn, f.Name), now: f.at.Add(time.Second)}
}

// pinnedClock is a Reader whose snapshots read the server's clock as now.
type pinnedClock struct {
	Reader
	now time.Time
}

func (p pinnedClock) Snapshot(ctx context.Context) (store.Snapshot, error) {
	snap, err := p.Reader.Snapshot(ctx)
	snap.Now = p.now
	return snap, err
}

// fixture is a database a person would want to look at: a healthy hunt with a recorded gap,
// a hunt failing since it was published (8 failed attempts, never a success), a hunt a
// runner ran that nobody published, a hunt materialise retired, and a published hunt that is
// disabled. Every time is relative to one reading of ClickHouse's clock, f.at.
func fixture(t *testing.T) *fix {
	t.Helper()
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	d := db.Name
	var at uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&at); err != nil {
		t.Fatal(err)
	}
	pin := strings.NewReplacer("now64(6)", fmt.Sprintf("toDateTime64(%d, 6, 'UTC')", at),
		"now64(3)", fmt.Sprintf("toDateTime64(%d, 3, 'UTC')", at), "now()", fmt.Sprintf("toDateTime(%d, 'UTC')", at))
	for _, q := range []string{
		// Published 10 minutes ago; retired is a tombstone, and quiet is disabled in its file.
		`INSERT INTO ` + d + `.hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) VALUES
		   ('healthy', 60, 7, 1, 'h1', now64(6) - INTERVAL 10 MINUTE),
		   ('failing', 60, 0, 1, 'h2', now64(6) - INTERVAL 10 MINUTE),
		   ('retired', 0, 0, 0, '', now64(6) - INTERVAL 10 MINUTE),
		   ('monthly', 2592000, 0, 1, 'h3', now64(6) - INTERVAL 60 DAY)`,
		// monthly committed its current fire ten days ago: outside the window status reads.
		`INSERT INTO ` + d + `.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows,
		   run_started, gap_start, gap_end, findings_dropped, kind)
		 SELECT 'monthly', toDateTime(intDiv(toUnixTimestamp(now()), 2592000) * 2592000, 'UTC') AS wm, generateUUIDv4(),
		   now64(6) - INTERVAL 10 DAY, generateUUIDv4(), 'pod-a', wm - 2592000, 0, now64(6) - INTERVAL 10 DAY,
		   toDateTime(0, 'UTC'), toDateTime(0, 'UTC'), 0, 'scheduled'`,
		// healthy committed its latest fire with 5 findings, after an outage that skipped a range.
		`INSERT INTO ` + d + `.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows,
		   run_started, gap_start, gap_end, findings_dropped, kind)
		 SELECT 'healthy', toDateTime(intDiv(toUnixTimestamp(now()) - 7, 60) * 60 + 7, 'UTC') AS wm, generateUUIDv4(), now64(6),
		   generateUUIDv4(), 'pod-a', wm - 60, 5, now64(6) - INTERVAL 2 SECOND, wm - 7200, wm - 60, 2, 'scheduled'`,
		// failing: one failed attempt a minute for the last 8 minutes.
		`INSERT INTO ` + d + `.hunt_run (hunt_id, fire, run_id, owner, status, window_start, window_end, rows_written,
		   started, finished, error, findings_dropped, kind)
		 SELECT 'failing', toStartOfMinute(now()) - toIntervalMinute(number) AS f, generateUUIDv4(), 'pod-b', 'failed',
		   f - 60, f, 0, f + 1, toDateTime64(f, 6, 'UTC') + toIntervalSecond(2),
		   'Code: 60. DB::Exception: Unknown table expression identifier ''logins''', 0, 'scheduled'
		 FROM numbers(8)`,
		`INSERT INTO ` + d + `.hunt_state VALUES
		   ('failing', 'failed', 8, 'Unknown table', toStartOfMinute(now()), now64(6), toDateTime64(0, 3, 'UTC'), 0, 0),
		   ('ghost', 'ok', 0, '', toStartOfMinute(now()), now64(6), toDateTime64(0, 3, 'UTC'), 2, 1),
		   ('retired', 'ok', 0, '', toStartOfMinute(now()) - 3600, now64(6), toDateTime64(0, 3, 'UTC'), 0, 0)`,
		`INSERT INTO ` + d + `.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows,
		   run_started, gap_start, gap_end, findings_dropped, kind, overran)
		 VALUES ('ghost', toStartOfMinute(now()), generateUUIDv4(), now64(6), generateUUIDv4(), 'pod-c',
		   toStartOfMinute(now()) - 60, 1, now64(6), toDateTime(0, 'UTC'), toDateTime(0, 'UTC'), 0, 'scheduled', 1)`,
		// pod-a holds a live lease on healthy's next fire.
		`INSERT INTO ` + d + `.hunt_lease VALUES ('healthy', toDateTime(intDiv(toUnixTimestamp(now()) - 7, 60) * 60 + 67, 'UTC'), 'pod-a', generateUUIDv4(), now64(6),
		   now64(3) + INTERVAL 1 MINUTE)`,
	} {
		if err := db.Conn.Exec(ctx, pin.Replace(q)); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	return &fix{DB: db, at: time.Unix(int64(at), 0).UTC()}
}

func fixtureEntries() []hunt.Hunt {
	return []hunt.Hunt{
		{ID: "healthy", Interval: time.Minute, Offset: 7 * time.Second, Enabled: true},
		{ID: "failing", Interval: time.Minute, Enabled: true},
		{ID: "quiet", Interval: time.Hour, Enabled: false},
		{ID: "fresh", Interval: time.Hour, Enabled: true}, // in the files, not yet materialised
		{ID: "monthly", Interval: 2592000 * time.Second, Enabled: true},
	}
}

func read(t *testing.T, db *fix, entries []hunt.Hunt) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Read(ctx, db.store(), entries)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
