package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/hunttest"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// previewFlags are shared by preview and diff: the range cap and the per-window timeout.
func previewFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "max-windows", Value: hunttest.DefaultMaxWindows, EnvVars: envFor("max-windows"),
			Usage: "most windows one hunt is previewed over (each is one query on the server)"},
		&cli.DurationFlag{Name: "window-timeout", EnvVars: envFor("window-timeout"),
			Usage: "limit per window, when shorter than the hunt's timeout: (which applies otherwise)"},
		workloadPreviewFlag(),
	}
}

func previewCommand() *cli.Command {
	return &cli.Command{
		Name:      "preview",
		Usage:     "run a hunt over a past range, window by window as its schedule would, and print the findings; writes nothing",
		ArgsUsage: "HUNT",
		Description: "Runs HUNT (from --hunts-dir or --git-url, or --hunt-file for a file not published yet) on the\n" +
			"configured ClickHouse over every window its schedule gives between --from and --to: one per fire\n" +
			"F with F − interval ≥ --from and F ≤ --to, reading [F − interval, F) shifted back by the delay,\n" +
			"which is what `run` reads and commits for those fires while it keeps up. The statement, its\n" +
			"containment check, its settings and max_findings are a fire's; it runs as --hunts-user, as\n" +
			"run does. Nothing is written: not findings, not any coordination table, not a sink.\n\n" +
			"--from and --to are RFC 3339 times, or durations before now (--from 24h); --to defaults to now.\n" +
			"Exit status: 0 previewed (with or without findings), 1 error (range over --max-windows, a\n" +
			"window over its timeout, an unknown hunt), 2 usage.",
		Flags: concat([]cli.Flag{
			&cli.StringFlag{Name: "from", Required: true, Usage: "start of the range: RFC 3339, or a duration before now (24h, 7d)"},
			&cli.StringFlag{Name: "to", Usage: "end of the range: RFC 3339, or a duration before now (default now)"},
			&cli.StringFlag{Name: "hunt-file", Usage: "preview the hunt in this file instead of the hunt source's"},
			&cli.BoolFlag{Name: "json", EnvVars: envFor("json"), Usage: "print every window and its findings as JSON"},
		}, previewFlags(), interactiveClickhouseFlags(), huntsFlags(), sourceFlags()),
		Action: previewAction,
	}
}

// previewTime reads an RFC 3339 time, or a duration before now.
func previewTime(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := schedule.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, cli.Exit(fmt.Sprintf("--%s %q: write an RFC 3339 time (2026-01-01T00:00:00Z) or a duration before now (24h, 7d)", flag, s), exitUsage)
}

func previewAction(c *cli.Context) error {
	log := newLogger(c)
	if c.NArg() != 1 {
		return cli.Exit("preview takes one HUNT id", exitUsage)
	}
	id := c.Args().First()
	now := time.Now().UTC()
	from, err := previewTime("from", c.String("from"), now)
	if err != nil {
		return err
	}
	to, err := previewTime("to", c.String("to"), now)
	if err != nil {
		return err
	}
	if to.After(now) {
		return cli.Exit(fmt.Sprintf("--to %s is in the future: a preview reads past windows only", to.Format(time.RFC3339)), exitUsage)
	}
	h, err := previewHunt(c, log, id)
	if err != nil {
		return err
	}
	p, closeConns, err := newPreviewer(c, log)
	if err != nil {
		return err
	}
	defer closeConns()
	var windows []hunttest.Window
	err = p.Preview(c.Context, h, from, to, func(w hunttest.Window) error {
		windows = append(windows, w)
		if !c.Bool("json") && len(w.Findings) > 0 {
			printWindow(c.App.Writer, w)
		}
		return nil
	})
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Hunt    string            `json:"hunt"`
			From    time.Time         `json:"from"`
			To      time.Time         `json:"to"`
			Windows []hunttest.Window `json:"windows"`
		}{h.ID, from, to, windows})
	}
	findings, with := 0, 0
	for _, w := range windows {
		findings += len(w.Findings)
		if len(w.Findings) > 0 {
			with++
		}
	}
	fmt.Fprintf(c.App.Writer, "%s: %s in %d of %d windows (every %s) from %s to %s; nothing written\n", h.ID,
		nounCount(findings, "finding"), with, len(windows), schedule.FormatInterval(h.Interval),
		windows[0].Start.Format(time.RFC3339), windows[len(windows)-1].End.Format(time.RFC3339))
	return nil
}

func printWindow(w io.Writer, win hunttest.Window) {
	fmt.Fprintf(w, "window %s to %s (fire %s): %s", win.Start.Format(time.RFC3339), win.End.Format(time.RFC3339),
		win.Fire.Format(time.RFC3339), nounCount(len(win.Findings), "finding"))
	if win.Dropped > 0 {
		fmt.Fprintf(w, " (%d more past max_findings)", win.Dropped)
	}
	fmt.Fprintln(w)
	for _, f := range win.Findings {
		fmt.Fprintf(w, "  %s\n", f)
	}
}

// previewHunt finds the hunt to preview: in --hunt-file, or in the hunt source.
func previewHunt(c *cli.Context, log *slog.Logger, id string) (hunt.Hunt, error) {
	var set *configsrc.Set
	where := ""
	if file := c.String("hunt-file"); file != "" {
		staged, _, err := stageFiles([]string{file})
		if err != nil {
			return hunt.Hunt{}, cli.Exit(fmt.Sprintf("--hunt-file: %v", err), exitUsage)
		}
		defer os.RemoveAll(staged)
		src, err := huntSourceWith(c, log, staged, -1)
		if err != nil {
			return hunt.Hunt{}, err
		}
		if set, err = src.Load(c.Context); err != nil {
			return hunt.Hunt{}, cli.Exit(fmt.Sprintf("--hunt-file: %v", err), exitError)
		}
		for _, p := range set.Problems {
			p.File = file
			return hunt.Hunt{}, cli.Exit(p.Error(), exitError)
		}
		where = file
	} else {
		src, err := huntSourceWith(c, log, c.String("hunts-dir"), -1)
		if err != nil {
			return hunt.Hunt{}, err
		}
		if set, err = src.Load(c.Context); err != nil {
			return hunt.Hunt{}, cli.Exit(fmt.Sprintf("read hunts from %s: %v", src, err), exitError)
		}
		where = src.String()
	}
	h, ok := set.Get(id)
	if !ok {
		ids := make([]string, 0, len(set.Hunts))
		for _, h := range set.Hunts {
			ids = append(ids, h.ID)
		}
		return hunt.Hunt{}, cli.Exit(fmt.Sprintf("no valid hunt %q in %s (hunts: %s)", id, where, strings.Join(ids, ", ")), exitError)
	}
	return *h, nil
}

// newPreviewer connects for previews: the main connection checks each hunt (as the runner's
// loader), the hunts identity (--hunts-user) runs it. Neither needs hunt-runner's tables, and
// the main connection carries no coordination settings: a preview touches no coordination table.
func newPreviewer(c *cli.Context, log *slog.Logger) (*hunttest.Previewer, func(), error) {
	policy, err := huntPolicy(c)
	if err != nil {
		return nil, nil, err
	}
	o := clickhouseOptions(c)
	if ep, err := chstore.ParseURL(o.URL); !c.IsSet("database") && (err != nil || ep.Database == "") {
		o.Database = "default"
	}
	o.SkipConsistency, o.AllowMissingDatabase = true, true
	o, err = o.WithDefaults()
	if err != nil {
		return nil, nil, cli.Exit(fmt.Sprintf("ClickHouse settings: %v", err), exitUsage)
	}
	conn, err := chstore.Open(c.Context, o, log)
	if err != nil {
		return nil, nil, cli.Exit(fmt.Sprintf("connect to ClickHouse: %v", err), exitError)
	}
	hunts, err := openHuntsClickHouse(c, log)
	if err != nil {
		conn.Close()
		return nil, nil, cli.Exit(err.Error(), exitError)
	}
	var huntConn driver.Conn = conn
	if hunts != nil {
		huntConn = hunts
	}
	p := &hunttest.Previewer{Check: conn, Hunts: huntConn, Policy: policy,
		MaxWindows: c.Int("max-windows"), WindowTimeout: c.Duration("window-timeout"), Workload: c.String("workload-preview")}
	if err := checkWorkloads(c, conn, attrib.Workloads{Preview: p.Workload}); err != nil {
		if hunts != nil {
			hunts.Close()
		}
		conn.Close()
		return nil, nil, err
	}
	return p, func() {
		if hunts != nil {
			hunts.Close()
		}
		conn.Close()
	}, nil
}
