package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
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

--hunt-set (default "default") names the set published: only its hunts are tombstoned, so teams or
Helm releases publish into one database without retiring each other's hunts. A hunt id live in
another set is refused, naming both sets, and nothing is written; an id the other set retired may
be taken over.

--dry-run prints the diff (+ added, ~ changed old → new, - tombstoned) and writes nothing.

Exit status: 0 success, whether or not it changed anything; 1 error; 2 usage error.
--detailed-exitcode, as terraform plan's: 0 nothing to change, 2 changed (or, with --dry-run,
would change), 1 any error, usage errors included. The older --changed-exit-code=N (exit N
when something changed) still works; until this release it defaulted to 3.`,
		Flags: concat(interactiveClickhouseFlags(), sourceFlags(), []cli.Flag{
			huntSetFlag(),
			&cli.BoolFlag{Name: "dry-run", EnvVars: envFor("dry-run"),
				Usage: "print the diff and write nothing"},
			&cli.BoolFlag{Name: "allow-empty", EnvVars: envFor("allow-empty"),
				Usage: "publish an empty hunt set, tombstoning every published hunt"},
			&cli.BoolFlag{Name: "detailed-exitcode", EnvVars: envFor("detailed-exitcode"),
				Usage: "exit 0 when nothing changed, 2 when something was (or, with --dry-run, would be) written, 1 on any error"},
			&cli.IntFlag{Name: "changed-exit-code", EnvVars: envFor("changed-exit-code"),
				Usage: "exit status when something was (or would be) written (kept for existing jobs; prefer --detailed-exitcode)"},
		}),
		Action: materialiseAction,
	}
}

// exitDetailedChanged is terraform plan -detailed-exitcode's "succeeded with changes".
const exitDetailedChanged = 2

// materialiseAction maps the outcome to the exit status. Publishing is success: CI jobs and
// Helm hooks treat any non-zero status as failure, so "changed" gets its own status only
// when asked for.
func materialiseAction(c *cli.Context) error {
	detailed := c.Bool("detailed-exitcode")
	if detailed && c.IsSet("changed-exit-code") {
		return cli.Exit("give --detailed-exitcode or --changed-exit-code, not both", exitUsage)
	}
	changed, err := runMaterialise(c)
	if err == nil && changed && !detailed && c.Int("changed-exit-code") != exitOK {
		return cli.Exit("", c.Int("changed-exit-code"))
	}
	return detailedExit(changed, err, detailed)
}

// detailedExit maps a command's outcome to its exit status. Under --detailed-exitcode 2 means
// "changed", so a usage error (also 2) exits 1 instead and cannot look like a change.
func detailedExit(changed bool, err error, detailed bool) error {
	var ec cli.ExitCoder
	switch {
	case err != nil && detailed && errors.As(err, &ec) && ec.ExitCode() == exitUsage:
		return cli.Exit(err.Error(), exitError)
	case err != nil:
		return err
	case changed && detailed:
		return cli.Exit("", exitDetailedChanged)
	}
	return nil
}

// runMaterialise publishes the schedule and reports whether it wrote (or would write) rows.
func runMaterialise(c *cli.Context) (bool, error) {
	if c.NArg() > 0 {
		return false, cli.Exit(fmt.Sprintf("materialise takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	huntSetName, err := huntSet(c, hunt.HuntSetDefault)
	if err != nil {
		return false, err
	}
	log := newLogger(c)
	src, set, err := loadHunts(c, log)
	if err != nil {
		return false, err
	}
	display := sourcePath(c, c.String("hunts-dir"))
	for _, p := range set.Problems {
		p.File = display(p.File)
		fmt.Fprintf(c.App.ErrWriter, "%s (left out)\n", p.Error())
	}
	rows, err := schedule.RowsOf(&set.Set)
	if err != nil {
		return false, cli.Exit(fmt.Sprintf("%v; nothing written", err), exitError)
	}

	conn, opts, err := openClickHouse(c, log)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := checkLayout(c, conn, opts.Database); err != nil {
		return false, err
	}
	source := set.Source
	if set.Commit != "" {
		source += "@" + set.Commit
	}
	d, err := schedule.Materialise(c.Context, store.New(conn, opts.Database).Schedule(), rows, set.Hash,
		schedule.MaterialiseOptions{
			Set:        huntSetName,
			DryRun:     c.Bool("dry-run"),
			AllowEmpty: c.Bool("allow-empty"),
			Source:     source,
			KeepAbsent: len(set.Problems) > 0,
		})
	if errors.Is(err, schedule.ErrEmptySet) {
		return false, cli.Exit(fmt.Sprintf("%s has no hunts: %v", src, err), exitError)
	}
	if err != nil {
		return false, cli.Exit(err.Error(), exitError)
	}
	fmt.Fprint(c.App.Writer, d.String())
	log.Info("materialise", "database", opts.Database, "hunt_set", huntSetName, "source", source, "dry_run", d.DryRun,
		"added", len(d.Added), "changed", len(d.Changed), "tombstoned", len(d.Tombstoned),
		"unchanged", d.Unchanged, "kept", len(d.Kept), "rows_written", d.RowsWritten,
		"set_hash", d.SetHash, "problems", len(set.Problems))
	return d.HasChanges(), nil
}
