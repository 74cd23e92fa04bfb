package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/schedule"
)

func materialiseCommand() *cli.Command {
	return &cli.Command{
		Name:  "materialise",
		Usage: "publish the hunt schedule into hunt_schedule (only the difference; tombstones for removed hunts)",
		Description: `Loads the hunts (--hunts-dir or --git-url), computes each hunt's schedule row (interval and
phase offset, the same --spread-fraction as the runners) and compares it with what is published:
it writes rows only for new, re-enabled and changed hunts, and a tombstone (enabled=0, interval 0)
for every published hunt that was removed or disabled. A second run with the same hunts writes
nothing. The published set's hash goes to hunt_publish, so runners can tell a stale table.

The KEDA backlog (hunt-runner due, the shim, hunt_backlog_v1) reads this table, so run
materialise whenever hunts change, e.g. as an Argo CD PostSync hook.

Invalid hunt files are reported on stderr and left out: a hunt that is new is not published, and
while any file is invalid no published hunt is tombstoned for being absent (the broken file may
define it). If the source cannot be read at all, nothing is written. An empty set of hunts is
refused unless --allow-empty (it would tombstone every hunt).

--dry-run prints the diff (+ added, ~ changed old → new, - tombstoned) and writes nothing.

Exit status: 0 nothing to change, 3 changed (or, with --dry-run, would change), 1 error, 2 usage.
Jobs that only care about success (a Helm hook, a CronJob) pass --changed-exit-code=0.`,
		Flags: concat(clickhouseFlags(), sourceFlags(), []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", EnvVars: envFor("dry-run"),
				Usage: "print the diff and write nothing"},
			&cli.BoolFlag{Name: "allow-empty", EnvVars: envFor("allow-empty"),
				Usage: "publish an empty hunt set, tombstoning every published hunt"},
			&cli.IntFlag{Name: "changed-exit-code", Value: exitChanged, EnvVars: envFor("changed-exit-code"),
				Usage: "exit status when something was (or, with --dry-run, would be) written; 0 for jobs"},
		}),
		Action: runMaterialise,
	}
}

func runMaterialise(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("materialise takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	log := newLogger(c)
	src, err := huntSource(c, log)
	if err != nil {
		return err
	}
	set, err := src.Load(c.Context)
	if err != nil {
		return cli.Exit(fmt.Sprintf("read hunts from %s: %v; nothing written", src, err), exitError)
	}
	display := sourcePath(c, c.String("hunts-dir"))
	for _, p := range set.Problems {
		p.File = display(p.File)
		fmt.Fprintf(c.App.ErrWriter, "%s (left out)\n", p.Error())
	}
	rows, err := scheduleRows(set)
	if err != nil {
		return cli.Exit(fmt.Sprintf("%v; nothing written", err), exitError)
	}

	conn, opts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	source := set.Source
	if set.Commit != "" {
		source += "@" + set.Commit
	}
	d, err := schedule.Materialise(c.Context, schedule.NewClickHouseStore(conn, opts.Database), rows, set.Hash,
		schedule.MaterialiseOptions{
			DryRun:     c.Bool("dry-run"),
			AllowEmpty: c.Bool("allow-empty"),
			Source:     source,
			KeepAbsent: len(set.Problems) > 0,
		})
	if errors.Is(err, schedule.ErrEmptySet) {
		return cli.Exit(fmt.Sprintf("%s has no hunts: %v", src, err), exitError)
	}
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	fmt.Fprint(c.App.Writer, d.String())
	log.Info("materialise", "database", opts.Database, "source", source, "dry_run", d.DryRun,
		"added", len(d.Added), "changed", len(d.Changed), "tombstoned", len(d.Tombstoned),
		"unchanged", d.Unchanged, "kept", len(d.Kept), "rows_written", d.RowsWritten,
		"set_hash", d.SetHash, "problems", len(set.Problems))
	if code := c.Int("changed-exit-code"); d.HasChanges() && code != exitOK {
		return cli.Exit("", code)
	}
	return nil
}

// scheduleRows turns a hunt set into hunt_schedule rows. configsrc already computed each
// hunt's offset (spread with --spread-fraction, or pinned by its cron), so it is used as is.
func scheduleRows(set *configsrc.Set) ([]schedule.Row, error) {
	rows := make([]schedule.Row, 0, len(set.Hunts))
	for _, h := range set.Hunts {
		if !h.Enabled {
			rows = append(rows, schedule.Row{HuntID: h.ID, ConfigHash: h.Hash})
			continue
		}
		spec := schedule.Spec{Interval: h.Interval, Offset: h.Offset, Pinned: true}
		// f only matters for unpinned specs; the offset here is always the one configsrc chose.
		r, err := schedule.NewRow(h.ID, spec, schedule.DefaultSpreadFraction, h.Hash)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.File, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}
