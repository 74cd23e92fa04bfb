package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/hunt-runner/hunt-runner/store"
	"github.com/urfave/cli/v2"
)

func dueCommand() *cli.Command {
	return &cli.Command{
		Name:  "due",
		Usage: "print the number of hunts due now (the KEDA backlog)",
		Description: `Runs the due backlog query — the same SQL as the KEDA shim and the hunt_backlog_v1 view — on
ClickHouse's clock and prints the count as a plain integer: the hunts due by the one due
predicate (docs/schedule.md, "The due predicate"; the runners plan with the same one). It needs
only the tables: no runner has to be alive.

--explain also lists the due hunts, most overdue first, with their latest fire, watermark and
lease; --json prints {"due": N} or, with --explain,
{"due": N, "hunts": [{"hunt_id", "fire", "watermark", "lease_until"}…]} (times RFC 3339, UTC;
null when the hunt never ran or was never claimed). The count and the list are two queries, so
a hunt that comes due between them can make them differ by one.

It counts the hunts of every hunt set, as the shim and KEDA do (one runner deployment per
database serves them all); --hunt-set counts (and lists) one set only.

Exit status: 0 (whatever the count), 1 if the query failed — a failure is never printed as 0.`,
		Flags: concat(interactiveClickhouseFlags(), []cli.Flag{
			&cli.BoolFlag{Name: "explain", EnvVars: envFor("explain"),
				Usage: "list the due hunts with their fire, watermark and lease"},
			&cli.BoolFlag{Name: "json", EnvVars: envFor("json"),
				Usage: "print JSON"},
			&cli.IntFlag{Name: "limit", Value: 100, EnvVars: envFor("limit"),
				Usage: "with --explain, list at most this many hunts (0: all)"},
			// No default: the backlog is every set's unless narrowed.
			&cli.StringFlag{Name: "hunt-set", EnvVars: envFor("hunt-set"),
				Usage: "count only this hunt set's due hunts (default: every set, as the shim and KEDA count)"},
		}),
		Action: runDue,
	}
}

type dueOutput struct {
	Due   uint64          `json:"due"`
	Hunts []store.DueHunt `json:"hunts,omitempty"`
}

func runDue(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("due takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	if c.Int("limit") < 0 {
		return cli.Exit("--limit must be 0 (all) or positive", exitUsage)
	}
	set, err := huntSet(c, "")
	if err != nil {
		return err
	}
	log := newLogger(c)
	conn, opts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	st := store.New(conn, opts.Database)
	n, err := st.CountDue(c.Context, set)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	out := dueOutput{Due: n}
	if c.Bool("explain") {
		out.Hunts, err = st.DueHunts(c.Context, set, c.Int("limit"))
		if err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		if out.Hunts == nil {
			out.Hunts = []store.DueHunt{}
		}
	}
	w := c.App.Writer
	if c.Bool("json") {
		if c.Bool("explain") {
			// Always print the list, empty or not, so consumers can rely on the key.
			return json.NewEncoder(w).Encode(struct {
				Due   uint64          `json:"due"`
				Hunts []store.DueHunt `json:"hunts"`
			}{out.Due, out.Hunts})
		}
		return json.NewEncoder(w).Encode(out)
	}
	fmt.Fprintln(w, n)
	if !c.Bool("explain") || len(out.Hunts) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HUNT_ID\tFIRE\tWATERMARK\tLEASE_UNTIL\tREQUESTED")
	for _, h := range out.Hunts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.HuntID, h.Fire.Format(time.RFC3339),
			orDash(h.Watermark, time.RFC3339), orDash(h.LeaseUntil, "2006-01-02T15:04:05.000Z07:00"), orDash(h.RequestedFire, time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if limit := c.Int("limit"); limit > 0 && len(out.Hunts) == limit && uint64(limit) < n {
		fmt.Fprintf(w, "(first %d of %d; --limit 0 lists all)\n", limit, n)
	}
	return nil
}

func orDash(t *time.Time, layout string) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(layout)
}
