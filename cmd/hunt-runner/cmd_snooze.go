package main

import (
	"cmp"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

func snoozeCommand() *cli.Command {
	return &cli.Command{
		Name:      "snooze",
		Usage:     "mute a hunt's notifications for a while, until a time, or until unsnoozed; it keeps running",
		ArgsUsage: "HUNT | --list",
		Description: "The snooze is a row in hunt_snooze, so it holds across pods and restarts. The hunt keeps\n" +
			"running and committing findings; only its notifications stop. Every delivery due while the\n" +
			"snooze holds is recorded as muted (see `notify status`) and is never sent later: the end of a\n" +
			"snooze brings the next fire, not a backlog. Without --for or --until it lasts until\n" +
			"`hunt-runner unsnooze HUNT`. --list shows the live snoozes.\n" +
			"HUNT must be an enabled hunt of the published schedule (a typo is refused with the nearest id);\n" +
			"--force snoozes any id, for a hunt about to be published.",
		Flags: concat(clickhouseFlags(), []cli.Flag{
			&cli.StringFlag{Name: "for", Usage: "snooze for this long (30m, 2h, 1d12h)"},
			&cli.StringFlag{Name: "until", Usage: "snooze until this time: RFC 3339 or epoch seconds"},
			&cli.StringFlag{Name: "reason", Usage: "why, shown by snooze --list and in each muted delivery"},
			&cli.StringFlag{Name: "by", Usage: "who snoozes (default: user@host)"},
			&cli.BoolFlag{Name: "list", Usage: "list the live snoozes instead"},
			forceFlag(),
		}),
		Action: snoozeAction,
	}
}

func unsnoozeCommand() *cli.Command {
	return &cli.Command{
		Name:      "unsnooze",
		Usage:     "end a hunt's snooze: deliveries due from now on are sent",
		ArgsUsage: "HUNT",
		Description: "Deliveries muted during the snooze stay muted. HUNT must be snoozed, or an enabled hunt of the\n" +
			"published schedule; --force writes the unsnooze for any id.",
		Flags: concat(clickhouseFlags(), []cli.Flag{
			&cli.StringFlag{Name: "by", Usage: "who unsnoozes (default: user@host)"},
			forceFlag(),
		}),
		Action: unsnoozeAction,
	}
}

func snoozeAction(c *cli.Context) error {
	if c.Bool("list") {
		return snoozeList(c)
	}
	id, err := oneHunt(c)
	if err != nil {
		return err
	}
	r := store.SnoozeRequest{HuntID: id, Reason: c.String("reason"), By: byFlag(c)}
	if c.String("for") != "" && c.String("until") != "" {
		return cli.Exit("snooze: give --for or --until, not both", exitUsage)
	}
	if f := c.String("for"); f != "" {
		if r.For, err = parseDuration(f); err != nil {
			return cli.Exit("snooze: --for: "+err.Error(), exitUsage)
		}
		if r.For < time.Second {
			return cli.Exit(fmt.Sprintf("snooze: --for %s is shorter than a second; leave --for out to snooze until unsnoozed", f), exitUsage)
		}
	}
	var until int64
	if u := c.String("until"); u != "" {
		if until, err = parseFireFlag(u); err != nil {
			return cli.Exit("snooze: --until: "+err.Error(), exitUsage)
		}
		r.Until = time.Unix(until, 0).UTC()
	}
	conn, chOpts, err := openClickHouse(c, newLogger(c))
	if err != nil {
		return err
	}
	defer conn.Close()
	now, err := serverNow(c, conn)
	if err != nil {
		return err
	}
	if until != 0 && until <= now {
		return cli.Exit(fmt.Sprintf("snooze: --until %s is not in the future (server now %s)", rfcSec(until), rfcSec(now)), exitUsage)
	}
	if _, err := requirePublished(c, conn, chOpts.Database, id); err != nil {
		return err
	}
	if err := store.New(conn, chOpts.Database).Snooze(c.Context, r); err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	switch {
	case r.For > 0:
		fmt.Fprintf(c.App.Writer, "snoozed %s until %s (for %s) by %s\n", id, rfcSec(now+int64(r.For/time.Second)), schedule.FormatInterval(r.For), r.By)
	case until != 0:
		fmt.Fprintf(c.App.Writer, "snoozed %s until %s by %s\n", id, rfcSec(until), r.By)
	default:
		fmt.Fprintf(c.App.Writer, "snoozed %s until unsnoozed by %s\n", id, r.By)
	}
	return nil
}

// liveSnoozes reads the snoozes that hold at the server's now, by hunt id.
func liveSnoozes(c *cli.Context, st *store.Store, now int64) ([]store.Snooze, error) {
	all, err := st.Snoozes(c.Context)
	if err != nil {
		return nil, cli.Exit(err.Error(), exitError)
	}
	var out []store.Snooze
	for _, z := range all {
		if z.LiveAt(time.Unix(now, 0)) {
			out = append(out, z)
		}
	}
	slices.SortFunc(out, func(a, b store.Snooze) int { return cmp.Compare(a.HuntID, b.HuntID) })
	return out, nil
}

func snoozeList(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return cli.Exit("snooze --list takes no HUNT", exitUsage)
	}
	conn, chOpts, err := openClickHouse(c, newLogger(c))
	if err != nil {
		return err
	}
	defer conn.Close()
	now, err := serverNow(c, conn)
	if err != nil {
		return err
	}
	live, err := liveSnoozes(c, store.New(conn, chOpts.Database), now)
	if err != nil {
		return err
	}
	if len(live) == 0 {
		fmt.Fprintln(c.App.Writer, "no hunt is snoozed")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HUNT\tUNTIL\tBY\tSINCE\tREASON")
	for _, z := range live {
		until := "unsnoozed"
		if !z.Until.IsZero() {
			until = z.Until.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", z.HuntID, until, z.By, z.Updated.UTC().Format(time.RFC3339), cmp.Or(z.Reason, "-"))
	}
	return tw.Flush()
}

func unsnoozeAction(c *cli.Context) error {
	id, err := oneHunt(c)
	if err != nil {
		return err
	}
	conn, chOpts, err := openClickHouse(c, newLogger(c))
	if err != nil {
		return err
	}
	defer conn.Close()
	now, err := serverNow(c, conn)
	if err != nil {
		return err
	}
	st := store.New(conn, chOpts.Database)
	live, err := liveSnoozes(c, st, now)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(live, func(z store.Snooze) bool { return z.HuntID == id }) {
		// Unsnoozing a snoozed hunt is always allowed (even one retired since); anything else
		// must be a hunt that exists, or the row is a typo's ghost.
		if _, err := requirePublished(c, conn, chOpts.Database, id); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "warning: %s is not snoozed; writing the unsnooze anyway\n", id)
	}
	if err := st.Unsnooze(c.Context, id, byFlag(c)); err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	fmt.Fprintf(c.App.Writer, "unsnoozed %s\n", id)
	return nil
}
