package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/legacy"
)

func importLegacyCommand() *cli.Command {
	return &cli.Command{
		Name:  "import-legacy",
		Usage: "carry the earlier (Python) runner's watermarks over, so each hunt continues where it stopped",
		Description: `Reads the earlier runner's hunt_watermark (and hunt_state, if present) in --from-database and,
for every hunt loaded from --hunts-dir or --git-url, writes one commit row of kind "imported" into
hunt-runner's hunt_watermark: the hunt's first run then starts exactly at the earlier watermark
(shifted by the hunt's delay:), so no window is re-run and none skipped. A watermark that is not
on the hunt's new schedule makes a first window from it to the next fire. hunt_runs lists the
row with status "imported"; overrun_count and too_aggressive are carried into hunt_state.

Stop the earlier runner first (docs/migration.md), and start hunt-runner's runners only after the
import: while any of them is live (a heartbeat in hunt_runner_heartbeat within the last 2 minutes)
the import refuses and writes nothing, since an imported row can move a watermark beneath a lease
a runner holds; --dry-run lists them, and --force imports anyway (only when none of them runs the
imported hunts). Forced or not, a hunt whose lease is live and not spent is refused (exit 1)
naming the lease's owner: import it again once the lease is free. Each write lands only while the hunt has no
watermark at or past the imported one, so a hunt that hunt-runner already runs ahead of is left
alone, and a second import writes nothing. Earlier hunts that are not in the loaded set are
listed and skipped.

--dry-run prints the plan (hunt, earlier watermark in UTC, what happens) and writes nothing.

Exit status: 0 success, whether or not it imported anything; 1 error, or an earlier watermark
that cannot be imported; 2 usage. --detailed-exitcode, as materialise's: 0 nothing to import,
2 imported (or, with --dry-run, would import), 1 any error, usage errors included.`,
		Flags: concat(interactiveClickhouseFlags(), sourceFlags(), []cli.Flag{
			&cli.StringFlag{Name: "from-database", EnvVars: envFor("from-database"),
				Usage: "database holding the earlier runner's hunt_watermark and hunt_state (its DFE_CLICKHOUSE_DATA_DATABASE, default dfe)"},
			&cli.BoolFlag{Name: "dry-run", EnvVars: envFor("dry-run"), Usage: "print the plan and write nothing"},
			// No environment variable, as trigger's --force: overriding a refusal is a decision
			// made on the command line each time, not a setting that lingers in a Job's env.
			&cli.BoolFlag{Name: "force",
				Usage: "import even while hunt-runner runners are live in --database (their heartbeats are recent); only when none of them runs the imported hunts"},
			&cli.BoolFlag{Name: "detailed-exitcode", EnvVars: envFor("detailed-exitcode"),
				Usage: "exit 2 when something was (or, with --dry-run, would be) imported, 0 when nothing was"},
		}),
		Action: importLegacyAction,
	}
}

// importLegacyAction maps the outcome to the exit status the way materialise does.
func importLegacyAction(c *cli.Context) error {
	changed, err := runImportLegacy(c)
	return detailedExit(changed, err, c.Bool("detailed-exitcode"))
}

func runImportLegacy(c *cli.Context) (changed bool, err error) {
	if c.NArg() > 0 {
		return false, cli.Exit(fmt.Sprintf("import-legacy takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	from := c.String("from-database")
	if from == "" {
		return false, cli.Exit("give --from-database DB: the earlier runner's database (DFE_CLICKHOUSE_DATA_DATABASE, default dfe)", exitUsage)
	}
	log := newLogger(c)
	src, set, err := loadHunts(c, log)
	if err != nil {
		return false, err
	}
	if len(set.Hunts) == 0 {
		return false, cli.Exit(fmt.Sprintf("no hunts loaded from %s; nothing written", src), exitError)
	}
	display := sourcePath(c, c.String("hunts-dir"))
	var broken []string
	for _, p := range set.Problems {
		broken = append(broken, p.File)
		p.File = display(p.File)
		fmt.Fprintf(c.App.ErrWriter, "%s (not imported)\n", p.Error())
	}
	conn, opts, err := openClickHouse(c, log)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := checkLayout(c, conn, opts.Database); err != nil {
		return false, err
	}
	res, err := legacy.Import(c.Context, conn, set.Hunts, legacy.Options{From: from, Database: opts.Database,
		DryRun: c.Bool("dry-run"), Force: c.Bool("force"), Broken: broken})
	if errors.Is(err, legacy.ErrSchema) || errors.Is(err, legacy.ErrLive) {
		return false, cli.Exit(err.Error()+"; nothing written", exitError)
	}
	if err != nil {
		return false, cli.Exit(err.Error(), exitError)
	}
	res.Print(c.App.Writer)
	log.Info("import-legacy", "from", from, "database", opts.Database, "dry_run", res.DryRun,
		"imported", res.Count(legacy.ActionImport), "already_imported", res.Count(legacy.ActionDone),
		"left_alone", res.Count(legacy.ActionAhead)+res.Count(legacy.ActionOvertaken), "skipped", res.Count(legacy.ActionNotLoaded),
		"refused", res.Count(legacy.ActionRefused))
	if n := res.Count(legacy.ActionRefused); n > 0 {
		return res.Changed(), cli.Exit(fmt.Sprintf("%d earlier watermark(s) could not be imported (listed as refused)", n), exitError)
	}
	return res.Changed(), nil
}

// legacyReport is validate --legacy-report: the earlier runner's features in the files of dir
// that do not carry over, one line each, or JSON.
func legacyReport(c *cli.Context, dir string) error {
	if dir == "" {
		return cli.Exit("--legacy-report reads a directory: give DIR or --hunts-dir (for a git repository, a checkout of it)", exitUsage)
	}
	rep, err := legacy.ReportDir(dir)
	if err != nil {
		return cli.Exit(fmt.Sprintf("legacy report: %v", err), exitError)
	}
	w := c.App.Writer
	if c.Bool("json") {
		out := struct {
			Files    int              `json:"files"`
			Findings []legacy.Finding `json:"findings"`
		}{Files: rep.Files, Findings: []legacy.Finding{}}
		for _, f := range rep.Findings {
			f.File = filepath.Join(dir, filepath.FromSlash(f.File))
			out.Findings = append(out.Findings, f)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		for _, f := range rep.Findings {
			f.File = filepath.Join(dir, filepath.FromSlash(f.File))
			fmt.Fprintln(w, f.String())
		}
		fmt.Fprintf(w, "%s: %s read; %s to make and %s, in %s\n", dir, nounCount(rep.Files, "hunt file"),
			nounCount(rep.Changes(), "change"), nounCount(len(rep.Findings)-rep.Changes(), "note"), nounCount(rep.FilesWithFindings(), "file"))
	}
	// Notes describe behaviour that changes by itself; only a needed change fails, as in validate.
	if rep.Changes() > 0 {
		return cli.Exit("", exitError)
	}
	if rep.Files == 0 {
		return cli.Exit(fmt.Sprintf("no hunt files (*.yaml, *.yml) found in %s", dir), exitError)
	}
	return nil
}
