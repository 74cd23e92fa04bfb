package main

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/store"
)

func triggerCommand() *cli.Command {
	return &cli.Command{
		Name:      "trigger",
		Usage:     "queue a run-now request for a hunt",
		ArgsUsage: "HUNT",
		Description: "The runner runs the request when nothing scheduled is owed, over [watermark, fire); the\n" +
			"watermark then equals the requested fire. The request is counted by the due backlog, so it\n" +
			"wakes a scaled-to-zero runner. --fire defaults to ClickHouse's now and may not be in the future.\n" +
			"A hunt that is not published, or is disabled or removed (tombstoned in hunt_schedule), is refused:\n" +
			"no runner would run the request. --force queues it anyway, for a runner that has the hunt loaded\n" +
			"but whose set was not materialised.",
		Flags: concat(interactiveClickhouseFlags(), []cli.Flag{
			forceFlag(),
			&cli.StringFlag{Name: "fire", Usage: "end of the requested window: RFC 3339 time or epoch seconds (default: now)"},
			&cli.StringFlag{Name: "requested-by", Usage: "who asks, recorded in hunt_request (default: user@host)"},
		}),
		Action: triggerAction,
	}
}

// parseFireFlag accepts epoch seconds or an RFC 3339 time.
func parseFireFlag(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, fmt.Errorf("--fire %q: want epoch seconds or an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
	}
	return t.Unix(), nil
}

func triggerAction(c *cli.Context) error {
	args, err := interspersedArgs(c)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return cli.Exit("trigger needs exactly one HUNT id", exitUsage)
	}
	id := args[0]
	var fire int64
	if f := c.String("fire"); f != "" {
		if fire, err = parseFireFlag(f); err != nil {
			return cli.Exit(err.Error(), exitUsage)
		}
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
	if fire == 0 {
		fire = now
	}
	if fire > now {
		return cli.Exit(fmt.Sprintf("--fire %s is in the future (server now %s): a request covers data up to its fire",
			time.Unix(fire, 0).UTC().Format(time.RFC3339), time.Unix(now, 0).UTC().Format(time.RFC3339)), exitUsage)
	}
	if _, err := requirePublished(c, conn, chOpts.Database, id); err != nil {
		return err
	}
	by := c.String("requested-by")
	if by == "" {
		by = defaultRequester()
	}
	if err := store.New(conn, chOpts.Database).Request(c.Context, id, fire, by); err != nil {
		return cli.Exit(fmt.Sprintf("queue request: %v", err), exitError)
	}
	fmt.Fprintf(c.App.Writer, "queued %s fire %s (requested by %s)\n", id, time.Unix(fire, 0).UTC().Format(time.RFC3339), by)
	return nil
}

func defaultRequester() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return name
}
