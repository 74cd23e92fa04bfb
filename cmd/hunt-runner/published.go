package main

import (
	"fmt"
	"sort"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/status"
)

// forceFlag lets trigger, pause, resume and backfill act on a hunt the published schedule
// does not run: a runner that has the hunt loaded but whose set was not materialised, or a
// pause written ahead of a publication.
func forceFlag() cli.Flag {
	return &cli.BoolFlag{Name: "force", Usage: "act even if the hunt is not an enabled hunt of the published schedule (a typo is otherwise refused)"}
}

// requirePublished is the one check of trigger, pause, resume and backfill: id must be an
// enabled hunt of the published schedule, because a row for any other id is work no runner
// does (and a ghost row in status). It returns the hunt's entry; with --force an unpublished
// id is a warning and the entry is nil. The refusal names the nearest published id.
func requirePublished(c *cli.Context, conn driver.Conn, database, id string) (*status.Entry, error) {
	sched, err := status.Published(c.Context, conn, database)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("%s: %v", c.Command.Name, err), exitError)
	}
	problem := ""
	var ids []string
	for i, e := range sched {
		if e.HuntID == id {
			if e.Enabled {
				return &sched[i], nil
			}
			problem = "is disabled or removed (tombstoned in hunt_schedule)"
		}
		if e.Enabled {
			ids = append(ids, e.HuntID)
		}
	}
	if problem == "" {
		problem = "is not in the published schedule (hunt_schedule)"
		if s := nearestID(id, ids); s != "" {
			problem += fmt.Sprintf("; did you mean %q?", s)
		}
	}
	if !c.Bool("force") {
		return nil, cli.Exit(fmt.Sprintf("%s: %q %s, so no runner would act on it; check the id with `hunt-runner status`, "+
			"publish the hunt with `hunt-runner materialise`, or pass --force to write it anyway", c.Command.Name, id, problem), exitError)
	}
	fmt.Fprintf(c.App.ErrWriter, "warning: %q %s; written anyway (--force): only a runner that has it loaded acts on it\n", id, problem)
	return nil, nil
}

// nearestID suggests the id closest to s by edit distance when it is close enough to be a
// typo: at most a third of its length, at least 1 and at most 3 edits.
func nearestID(s string, ids []string) string {
	sort.Strings(ids)
	best, bestD := "", 1<<30
	for _, id := range ids {
		if d := editDistance(s, id); d < bestD {
			best, bestD = id, d
		}
	}
	if best != "" && bestD <= min(3, max(1, len(best)/3)) {
		return best
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
