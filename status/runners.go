package status

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hunt-runner/hunt-runner/store"
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

// runnerOf is b as status lists it: live when its beat is within `within` of now.
func runnerOf(b store.HeartbeatRow, now time.Time, within time.Duration) Runner {
	return Runner{Owner: b.Owner, LastSeen: rfcMilli(b.LastTick), Version: b.Version, HuntSet: b.HuntSet,
		SetHash: b.SetHash, Hunts: b.Hunts, Started: rfcMilli(b.Started), Live: now.Sub(b.LastTick) <= within}
}

func rfcMilli(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// LiveRunners lists the runners whose newest heartbeat is within `within` of the server's now
// (status uses LiveWithin), by owner.
func LiveRunners(ctx context.Context, st HeartbeatReader, within time.Duration) ([]Runner, error) {
	beats, now, err := st.Heartbeats(ctx)
	if err != nil {
		return nil, err
	}
	out := []Runner{}
	for _, b := range beats {
		if r := runnerOf(b, now, within); r.Live {
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
func Runners(ctx context.Context, st Reader, window time.Duration) (RunnersReport, error) {
	snap, err := st.Snapshot(ctx)
	if err != nil {
		return RunnersReport{}, fmt.Errorf("runners: %w", err)
	}
	beats, beatNow, err := st.Heartbeats(ctx)
	if err != nil {
		return RunnersReport{}, fmt.Errorf("runners: %w", err)
	}
	acts, err := st.OwnerActivities(ctx, window)
	if err != nil {
		return RunnersReport{}, fmt.Errorf("runners: %w", err)
	}
	live := map[string]int{}
	for _, h := range snap.Hunts {
		if h.LeaseHeld(snap.Now) {
			live[h.LeaseOwner]++
		}
	}
	out := RunnersReport{Now: snap.Now.UTC().Format(time.RFC3339Nano), WindowSeconds: int64(window / time.Second),
		Source: runnersSource, Runners: []Runner{}}
	runs := map[string]uint64{}
	if len(beats) == 0 {
		for _, a := range acts {
			out.Runners = append(out.Runners, Runner{Owner: a.Owner, LastSeen: rfc(a.LastSeen), LiveLeases: live[a.Owner],
				RunsInWindow: a.Runs})
		}
		return out, nil
	}
	for _, a := range acts {
		runs[a.Owner] = a.Runs
	}
	out.Source, out.Live = runnersSourceHeartbeat, LiveRule
	for _, b := range beats {
		if beatNow.Sub(b.LastTick) > window {
			continue
		}
		r := runnerOf(b, beatNow, LiveWithin)
		r.LiveLeases, r.RunsInWindow = live[r.Owner], runs[r.Owner]
		out.Runners = append(out.Runners, r)
	}
	sort.Slice(out.Runners, func(i, j int) bool { return out.Runners[i].Owner < out.Runners[j].Owner })
	return out, nil
}
