package status

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// LiveWithin is how recent a runner's heartbeat must be for status to count it live. Runners
// beat every 30 s (runner.HeartbeatEvery), or every tick when the tick is longer, and a tick
// backs off to at most 30 s while ClickHouse is unreachable: two minutes is four missed beats
// at the default, so a busy server or a slow tick never flaps a runner out of the list. It is
// not 3× the tick: status does not know each runner's tick, and the default 5 s tick would
// drop runners between two beats.
const LiveWithin = 2 * time.Minute

// LiveRule is LiveWithin in words, as the JSON reports carry it.
var LiveRule = fmt.Sprintf("last_tick within %v of the server's now", LiveWithin)

// Runner is one runner as GET /api/v1/runners and status list it.
type Runner struct {
	Owner string `json:"owner"`
	// LastSeen is its newest heartbeat or, when no runner records heartbeats, its newest claim
	// or finished attempt.
	LastSeen string `json:"last_seen"`
	// LiveLeases counts the hunts whose newest lease it holds now.
	LiveLeases int `json:"live_leases"`
	// RunsInWindow counts its finished attempts (commits included) within the window.
	RunsInWindow uint64 `json:"runs_in_window"`

	// From the heartbeat (hunt_runner_heartbeat); absent in the lease-derived fallback.
	Version string `json:"version,omitempty"`
	HuntSet string `json:"hunt_set,omitempty"`
	SetHash string `json:"set_hash,omitempty"`
	Hunts   uint32 `json:"hunts"`
	Started string `json:"started,omitempty"`
	// Live: the heartbeat is within LiveWithin (status lists only live runners).
	Live bool `json:"live"`
}

// RunnersReport is GET /api/v1/runners.
type RunnersReport struct {
	Now           string   `json:"now"`
	WindowSeconds int64    `json:"window_seconds"`
	Source        string   `json:"source"`
	Live          string   `json:"live,omitempty"` // LiveRule, with heartbeats
	Runners       []Runner `json:"runners"`
}

// Where RunnersReport's list comes from.
const (
	runnersSourceHeartbeat = "heartbeats (hunt_runner_heartbeat): runners that ticked within the window"
	// runnersSource is the fallback while the heartbeat table is empty (runners of a release
	// before heartbeats): a runner that claimed nothing and finished nothing is not listed.
	runnersSource = "derived from lease claims (hunt_lease) and finished attempts (hunt_runs) within the window; " +
		"the heartbeat table is empty, so an idle runner is not listed"
)

// beat is one runner's newest heartbeat row.
type beat struct {
	owner, version, huntSet, setHash string
	hunts                            uint32
	lastTick, started                time.Time
}

// readHeartbeats reads the newest heartbeat of every runner in the table, by owner, and the
// server's now. A database whose schema predates the table has none.
func readHeartbeats(ctx context.Context, conn driver.Conn, database string) ([]beat, time.Time, error) {
	rows, err := conn.Query(ctx, `SELECT owner, argMax(version, last_tick), argMax(hunt_set, last_tick),
    argMax(set_hash, last_tick), argMax(hunts, last_tick), max(last_tick), argMax(started, last_tick), any(now64(3))
FROM `+table(database, schema.TableHeartbeat)+`
GROUP BY owner ORDER BY owner`)
	if err != nil {
		var ex *clickhouse.Exception
		if errors.As(err, &ex) && ex.Code == 60 { // UNKNOWN_TABLE: `hunt-runner schema` not run since
			return nil, time.Time{}, nil
		}
		return nil, time.Time{}, fmt.Errorf("read %s: %w", schema.TableHeartbeat, err)
	}
	defer rows.Close()
	var out []beat
	var now time.Time
	for rows.Next() {
		var b beat
		if err := rows.Scan(&b.owner, &b.version, &b.huntSet, &b.setHash, &b.hunts, &b.lastTick, &b.started, &now); err != nil {
			return nil, time.Time{}, fmt.Errorf("read %s: %w", schema.TableHeartbeat, err)
		}
		out = append(out, b)
	}
	return out, now, rows.Err()
}

func (b beat) runner(now time.Time, within time.Duration) Runner {
	return Runner{Owner: b.owner, LastSeen: rfcMilli(b.lastTick), Version: b.version, HuntSet: b.huntSet,
		SetHash: b.setHash, Hunts: b.hunts, Started: rfcMilli(b.started), Live: now.Sub(b.lastTick) <= within}
}

func rfcMilli(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// LiveRunners lists the runners whose newest heartbeat is within `within` of the server's now
// (status uses LiveWithin), by owner.
func LiveRunners(ctx context.Context, conn driver.Conn, database string, within time.Duration) ([]Runner, error) {
	beats, now, err := readHeartbeats(ctx, conn, database)
	if err != nil {
		return nil, err
	}
	out := []Runner{}
	for _, b := range beats {
		if r := b.runner(now, within); r.Live {
			out = append(out, r)
		}
	}
	return out, nil
}

// Runners lists the runners whose heartbeat is within window, each marked live by LiveWithin,
// with the leases they hold now (from the snapshot's newest lease per hunt) and their finished
// attempts within window. While the heartbeat table is empty (runners of an earlier release),
// it lists instead the owners that claimed a fire or finished an attempt within window, and
// Source says so.
func Runners(ctx context.Context, conn driver.Conn, store Snapshotter, database string, window time.Duration) (RunnersReport, error) {
	snap, err := store.Snapshot(ctx)
	if err != nil {
		return RunnersReport{}, fmt.Errorf("runners: %w", err)
	}
	beats, beatNow, err := readHeartbeats(ctx, conn, database)
	if err != nil {
		return RunnersReport{}, fmt.Errorf("runners: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT owner, max(seen), sum(run) FROM (
    SELECT owner, claimed AS seen, 0 AS run FROM `+table(database, schema.TableLease)+`
    WHERE claimed > now64(6) - toIntervalSecond({w:UInt32})
    UNION ALL
    SELECT owner, finished AS seen, 1 AS run FROM `+table(database, schema.ViewRuns)+`
    WHERE finished > now64(6) - toIntervalSecond({w:UInt32}) AND status != 'gap' AND owner != ''
) GROUP BY owner ORDER BY owner`, clickhouse.Named("w", uint32(window/time.Second)))
	if err != nil {
		return RunnersReport{}, fmt.Errorf("runners: %w", err)
	}
	defer rows.Close()
	live := map[string]int{}
	for _, h := range snap.Hunts {
		if h.LeaseHeld(snap.Now) {
			live[h.LeaseOwner]++
		}
	}
	out := RunnersReport{Now: snap.Now.UTC().Format(time.RFC3339Nano), WindowSeconds: int64(window / time.Second),
		Source: runnersSource, Runners: []Runner{}}
	var derived []Runner
	runs := map[string]uint64{}
	for rows.Next() {
		var r Runner
		var seen time.Time
		if err := rows.Scan(&r.Owner, &seen, &r.RunsInWindow); err != nil {
			return RunnersReport{}, fmt.Errorf("runners: %w", err)
		}
		r.LastSeen, r.LiveLeases = rfc(seen), live[r.Owner]
		derived = append(derived, r)
		runs[r.Owner] = r.RunsInWindow
	}
	if err := rows.Err(); err != nil {
		return RunnersReport{}, fmt.Errorf("runners: %w", err)
	}
	if len(beats) == 0 {
		out.Runners = append(out.Runners, derived...)
		return out, nil
	}
	out.Source, out.Live = runnersSourceHeartbeat, LiveRule
	for _, b := range beats {
		if beatNow.Sub(b.lastTick) > window {
			continue
		}
		r := b.runner(beatNow, LiveWithin)
		r.LiveLeases, r.RunsInWindow = live[r.Owner], runs[r.Owner]
		out.Runners = append(out.Runners, r)
	}
	sort.Slice(out.Runners, func(i, j int) bool { return out.Runners[i].Owner < out.Runners[j].Owner })
	return out, nil
}
