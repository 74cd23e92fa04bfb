package main

import (
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

func pauseCommand() *cli.Command {
	return &cli.Command{
		Name:      "pause",
		Usage:     "stop claiming a hunt (and its backfills) until resumed, for a while, or until a time",
		ArgsUsage: "HUNT",
		Description: "The pause is a row in hunt_pause, so it holds across pods and restarts. Runners stop\n" +
			"claiming the hunt at their next tick; a run already in flight finishes. The due backlog\n" +
			"leaves the hunt out, so autoscaling does not wake for it. Without --for or --until it lasts\n" +
			"until `hunt-runner resume HUNT`. On resume the hunt continues from its watermark within\n" +
			"max_catchup; older fires are recorded as a gap (replay them with `backfill HUNT --gaps`).\n" +
			"HUNT must be an enabled hunt of the published schedule (a typo is refused with the nearest id);\n" +
			"--force pauses any id, for a hunt about to be published.",
		Flags: concat(clickhouseFlags(), []cli.Flag{
			&cli.StringFlag{Name: "for", Usage: "pause for this long (30m, 2h, 1d12h)"},
			&cli.StringFlag{Name: "until", Usage: "pause until this time: RFC 3339 or epoch seconds"},
			&cli.StringFlag{Name: "reason", Usage: "why, shown by status"},
			&cli.StringFlag{Name: "by", Usage: "who pauses, shown by status (default: user@host)"},
			forceFlag(),
		}),
		Action: pauseAction,
	}
}

func resumeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "end a hunt's pause",
		ArgsUsage: "HUNT",
		Description: "HUNT must be paused, or an enabled hunt of the published schedule (a typo is refused with\n" +
			"the nearest id); --force writes the resume for any id.",
		Flags: concat(clickhouseFlags(), []cli.Flag{
			&cli.StringFlag{Name: "by", Usage: "who resumes (default: user@host)"},
			forceFlag(),
		}),
		Action: resumeAction,
	}
}

// oneHunt returns the single HUNT argument of c.
func oneHunt(c *cli.Context) (string, error) {
	args, err := interspersedArgs(c)
	if err != nil {
		return "", err
	}
	if len(args) != 1 {
		return "", cli.Exit(c.Command.Name+" needs exactly one HUNT id", exitUsage)
	}
	return args[0], nil
}

func byFlag(c *cli.Context) string {
	if by := c.String("by"); by != "" {
		return by
	}
	return defaultRequester()
}

func pauseAction(c *cli.Context) error {
	id, err := oneHunt(c)
	if err != nil {
		return err
	}
	p := store.Pause{HuntID: id, Reason: c.String("reason"), By: byFlag(c)}
	if c.String("for") != "" && c.String("until") != "" {
		return cli.Exit("pause: give --for or --until, not both", exitUsage)
	}
	if f := c.String("for"); f != "" {
		if p.For, err = parseDuration(f); err != nil {
			return cli.Exit("pause: --for: "+err.Error(), exitUsage)
		}
		if p.For < time.Second {
			return cli.Exit(fmt.Sprintf("pause: --for %s is shorter than a second; leave --for out to pause until resumed", f), exitUsage)
		}
	}
	var until int64
	if u := c.String("until"); u != "" {
		if until, err = parseFireFlag(u); err != nil {
			return cli.Exit("pause: --until: "+err.Error(), exitUsage)
		}
		p.Until = time.Unix(until, 0).UTC()
	}
	log := newLogger(c)
	conn, chOpts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	now, err := serverNow(c, conn)
	if err != nil {
		return err
	}
	if until != 0 && until <= now {
		return cli.Exit(fmt.Sprintf("pause: --until %s is not in the future (server now %s)", rfcSec(until), rfcSec(now)), exitUsage)
	}
	if _, err := requirePublished(c, conn, chOpts.Database, id); err != nil {
		return err
	}
	if err := store.New(conn, chOpts.Database).Pause(c.Context, p); err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	switch {
	case p.For > 0:
		fmt.Fprintf(c.App.Writer, "paused %s until %s (for %s) by %s\n", id, rfcSec(now+int64(p.For/time.Second)), schedule.FormatInterval(p.For), p.By)
	case until != 0:
		fmt.Fprintf(c.App.Writer, "paused %s until %s by %s\n", id, rfcSec(until), p.By)
	default:
		fmt.Fprintf(c.App.Writer, "paused %s until resumed by %s\n", id, p.By)
	}
	return nil
}

func resumeAction(c *cli.Context) error {
	id, err := oneHunt(c)
	if err != nil {
		return err
	}
	log := newLogger(c)
	conn, chOpts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	wm := store.New(conn, chOpts.Database)
	snap, err := wm.Snapshot(c.Context)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	if !snap.Hunts[id].PausedAt(snap.Now) {
		// Resuming a paused hunt is always allowed (even one retired since); anything else
		// must be a hunt that exists, or the resume is a typo's ghost row.
		if _, err := requirePublished(c, conn, chOpts.Database, id); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "warning: %s is not paused; writing the resume anyway\n", id)
	}
	if err := wm.Resume(c.Context, id, byFlag(c)); err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	fmt.Fprintf(c.App.Writer, "resumed %s\n", id)
	return nil
}

func rfcSec(s int64) string { return time.Unix(s, 0).UTC().Format(time.RFC3339) }

// serverNow reads ClickHouse's clock in epoch seconds: pauses, backfills and run-now requests
// are judged against it, never against this machine's.
func serverNow(c *cli.Context, conn driver.Conn) (int64, error) {
	now, err := store.New(conn, "").ServerClock(c.Context)
	if err != nil {
		return 0, cli.Exit(fmt.Sprintf("read the server clock: %v", err), exitError)
	}
	return now.Unix(), nil
}
