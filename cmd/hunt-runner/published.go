package main

import (
	"fmt"
	"sort"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/status"
	"github.com/hunt-runner/hunt-runner/store"
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
func requirePublished(c *cli.Context, conn driver.Conn, database, id string) (*hunt.Hunt, error) {
	sched, err := status.Published(c.Context, store.New(conn, database))
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("%s: %v", c.Command.Name, err), exitError)
	}
	problem := ""
	var ids []string
	for i, e := range sched {
		if e.ID == id {
			if e.Enabled {
				return &sched[i], nil
			}
			problem = "is disabled or removed (tombstoned in hunt_schedule)"
		}
		if e.Enabled {
			ids = append(ids, e.ID)
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

// nearestID suggests the id closest to s (configsrc.Suggest over the ids in order, so the
// answer does not depend on the order they were read in).
func nearestID(s string, ids []string) string {
	sort.Strings(ids)
	return configsrc.Suggest(s, ids)
}
