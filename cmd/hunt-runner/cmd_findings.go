package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/notify"
)

func findingsCommand() *cli.Command {
	return &cli.Command{
		Name:      "findings",
		Usage:     "print committed findings, newest first",
		ArgsUsage: "[HUNT]",
		Description: "Only findings of runs that committed (hunt_watermark holds their run) are printed; rows of\n" +
			"attempts that failed or were lost never are. docs/findings.md has the same SQL for Grafana.",
		Flags: concat(clickhouseFlags(), []cli.Flag{
			durationFlag(&cli.DurationFlag{Name: "since", Value: time.Hour, Usage: "fires at or after now − since (30m, 6h, 7d)"}),
			&cli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many findings"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON array"},
		}),
		Action: findingsAction,
	}
}

func findingsAction(c *cli.Context) error {
	args, err := interspersedArgs(c)
	if err != nil {
		return err
	}
	if len(args) > 1 {
		return cli.Exit("findings takes at most one hunt id", exitUsage)
	}
	hunt := ""
	if len(args) == 1 {
		hunt = args[0]
	}
	if c.Int("limit") < 1 {
		return cli.Exit("--limit must be at least 1", exitUsage)
	}
	conn, o, err := openClickHouse(c, newLogger(c))
	if err != nil {
		return err
	}
	defer conn.Close()
	fs, err := notify.Findings(c.Context, conn, o.Database, hunt, time.Now().Add(-c.Duration("since")), c.Int("limit"))
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(fs)
	}
	printFindings(c.App.Writer, fs)
	return nil
}

func printFindings(w io.Writer, fs []notify.Finding) {
	if len(fs) == 0 {
		fmt.Fprintln(w, "no committed findings")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIRE\tHUNT\tSEVERITY\tFINDING")
	for _, f := range fs {
		text := string(f.Finding)
		if len(text) > 120 {
			text = text[:117] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Fire.UTC().Format(time.RFC3339), f.HuntID, f.Severity, text)
	}
	tw.Flush()
}
