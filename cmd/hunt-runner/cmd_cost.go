package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/hunttest"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// costSinceDefault is cost's period when --since is not given.
const costSinceDefault = 7 * 24 * time.Hour

func costCommand() *cli.Command {
	return &cli.Command{
		Name:  "cost",
		Usage: "rank hunts by what they read, from the server's query log; --estimate HUNT asks what one window would read",
		Description: "Every statement hunt-runner sends carries a JSON log_comment naming its hunt, fire, run and kind\n" +
			"(docs/operations.md, \"Attribution\"). cost reads system.query_log (finished and failed statements) and\n" +
			"prints, per hunt (--by hunt) or hunt set (--by set), the runs, statements, failures, rows and bytes\n" +
			"read, duration and peak memory over the last --since, ranked by bytes read, with the trend of bytes\n" +
			"read against the period of the same length before. Previews, tests and estimates count under their\n" +
			"hunt; the runners' own claims and commits under " + attrib.KeyCoordination + ". Each server logs its own\n" +
			"statements: on a cluster, --cluster reads every replica's log. The user needs SELECT on\n" +
			"system.query_log, and the server's query log must be on (its <query_log> configuration section).\n\n" +
			"--estimate HUNT loads the hunt as validate and preview do (--hunts-dir, --git-url or --hunt-file),\n" +
			"checks its containment first (an unchecked hunt never reaches the server), then runs EXPLAIN ESTIMATE\n" +
			"and EXPLAIN indexes = 1 of the exact statement of its last whole window, as --hunts-user, and\n" +
			"reports parts, rows and granules per table. A table of which no index or partition key prunes a\n" +
			"single granule is flagged: that hunt reads all of it every window. It is meant for operators,\n" +
			"not for unreviewed pull requests: the estimate runs on the server.\n\n" +
			"Exit status: 0 printed, 1 error (query log off or not readable, hunt not found or refused), 2 usage.",
		Flags: concat([]cli.Flag{
			durationFlag(&cli.DurationFlag{Name: "since", Value: costSinceDefault, EnvVars: envFor("since"),
				Usage: "the period ranked: the last 30m, 24h, 7d; the trend compares it with the period before"}),
			&cli.StringFlag{Name: "by", Value: attrib.ByHunt, EnvVars: envFor("by"), Usage: "group by hunt or by hunt set (set)"},
			&cli.BoolFlag{Name: "json", EnvVars: envFor("json"), Usage: "print JSON"},
			&cli.StringFlag{Name: "query-log", Value: attrib.QueryLogDefault, EnvVars: envFor("query-log"),
				Usage: "the query log table, database.table (a copy kept elsewhere, a Distributed table over the nodes' logs)"},
			&cli.StringFlag{Name: "cluster", EnvVars: envFor("cluster"),
				Usage: "read the query log of every replica of this cluster (clusterAllReplicas)"},
			&cli.StringFlag{Name: "estimate", Usage: "estimate what one window of this hunt reads, instead of the leaderboard"},
			&cli.StringFlag{Name: "hunt-file", Usage: "with --estimate: the hunt in this file instead of the hunt source's"},
		}, interactiveClickhouseFlags(), huntsFlags(), sourceFlags()),
		Action: costAction,
	}
}

func costAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("cost takes no arguments (got %q); the hunt to estimate is --estimate HUNT", c.Args().First()), exitUsage)
	}
	log := newLogger(c)
	if id := c.String("estimate"); id != "" {
		return estimateAction(c, log, id)
	}
	if c.IsSet("hunt-file") {
		return cli.Exit("--hunt-file goes with --estimate HUNT", exitUsage)
	}
	since := c.Duration("since")
	if since < time.Second {
		return cli.Exit(fmt.Sprintf("--since %s: give a period of at least a second (30m, 24h, 7d)", since), exitUsage)
	}
	by := c.String("by")
	if by != attrib.ByHunt && by != attrib.BySet {
		return cli.Exit(fmt.Sprintf("--by %q: write hunt or set", by), exitUsage)
	}
	o := attrib.CostOptions{Since: since, By: by, QueryLog: c.String("query-log"), Cluster: c.String("cluster")}
	conn, closeConn, err := openServer(c, log)
	if err != nil {
		return err
	}
	defer closeConn()
	board, err := attrib.Leaderboard(c.Context, conn, o)
	if err != nil {
		switch {
		case errors.Is(err, attrib.ErrOptions):
			return cli.Exit(err.Error(), exitUsage)
		case errors.Is(err, attrib.ErrQueryLog):
			return cli.Exit(err.Error(), exitError)
		}
		return cli.Exit(fmt.Sprintf("read the query log: %v", err), exitError)
	}
	if c.Bool("json") {
		if board == nil {
			board = []attrib.Cost{}
		}
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Since   string        `json:"since"`
			By      string        `json:"by"`
			Entries []attrib.Cost `json:"entries"`
		}{schedule.FormatInterval(since), by, board})
	}
	printLeaderboard(c.App.Writer, board, o)
	return nil
}

// openServer connects for commands that read the server rather than hunt-runner's tables (cost):
// no coordination database is needed, and no consistency settings are applied.
func openServer(c *cli.Context, log *slog.Logger) (driver.Conn, func(), error) {
	o := clickhouseOptions(c)
	if ep, err := chstore.ParseURL(o.URL); !c.IsSet("database") && (err != nil || ep.Database == "") {
		o.Database = "default"
	}
	o.SkipConsistency, o.AllowMissingDatabase = true, true
	o, err := o.WithDefaults()
	if err != nil {
		return nil, nil, cli.Exit(fmt.Sprintf("ClickHouse settings: %v", err), exitUsage)
	}
	conn, err := chstore.Open(c.Context, o, log)
	if err != nil {
		return nil, nil, cli.Exit(fmt.Sprintf("connect to ClickHouse: %v", err), exitError)
	}
	return conn, func() { conn.Close() }, nil
}

func printLeaderboard(w io.Writer, board []attrib.Cost, o attrib.CostOptions) {
	period := schedule.FormatInterval(o.Since)
	if len(board) == 0 {
		fmt.Fprintf(w, "no hunt-runner statements in %s in the last %s: either nothing ran, or the statements are not logged "+
			"(log_queries=0 for the users hunt-runner connects as, or another node's log: --cluster)\n", o.QueryLog, period)
		return
	}
	key := "HUNT"
	if o.By == attrib.BySet {
		key = "HUNT SET"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tRUNS\tSTATEMENTS\tFAILED\tREAD ROWS\tREAD BYTES\tDURATION\tPEAK MEMORY\tTREND\t\n", key)
	for _, e := range board {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", e.Key, e.Runs, e.Statements, e.Failed, e.ReadRows,
			bytesText(e.ReadBytes), (time.Duration(e.DurationMS) * time.Millisecond).String(), bytesText(e.PeakMemory), e.Trend())
	}
	tw.Flush()
	fmt.Fprintf(w, "last %s, ranked by bytes read; trend: bytes read against the %s before\n", period, period)
}

// bytesText is n bytes as people read it: 512 B, 1.5 KiB, 3.2 GiB.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func estimateAction(c *cli.Context, log *slog.Logger, id string) error {
	for _, f := range []string{"by", "query-log", "cluster", "since"} {
		if c.IsSet(f) {
			return cli.Exit(fmt.Sprintf("--%s is for the leaderboard, not --estimate", f), exitUsage)
		}
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
	est, err := hunttest.EstimateHunt(c.Context, p.Check, p.Hunts, p.Policy, h, time.Now())
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(est)
	}
	printEstimate(c.App.Writer, est)
	return nil
}

func printEstimate(w io.Writer, est hunttest.Estimate) {
	fmt.Fprintf(w, "%s: one window, %s to %s (fire %s)\n", est.Hunt, est.Window.Start.Format(time.RFC3339),
		est.Window.End.Format(time.RFC3339), est.Window.Fire.Format(time.RFC3339))
	if len(est.Tables) == 0 {
		fmt.Fprintln(w, "reads no MergeTree table (nothing for EXPLAIN ESTIMATE to count)")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TABLE\tPARTS\tROWS\tGRANULES\tOF\tPRUNED")
		for _, t := range est.Tables {
			pruned := "yes"
			if t.FullScan {
				pruned = "NO: reads every granule"
			}
			total := "-"
			if t.TotalGranules > 0 {
				total = fmt.Sprint(t.TotalGranules)
			}
			fmt.Fprintf(tw, "%s.%s\t%d\t%d\t%d\t%s\t%s\n", t.Database, t.Table, t.Parts, t.Rows, t.Granules, total, pruned)
		}
		tw.Flush()
	}
	var full []string
	for _, t := range est.Tables {
		if t.FullScan {
			full = append(full, t.Database+"."+t.Table)
		}
	}
	if len(full) > 0 {
		fmt.Fprintf(w, "warning: %s: no index or partition key prunes a granule, so every window reads the whole table; "+
			"filter on the table's sorting key (its time column) with {window_start} and {window_end}\n", strings.Join(full, ", "))
	}
	fmt.Fprintf(w, "\nEXPLAIN indexes = 1:\n%s", est.Plan)
}

// statusRunCosts is how many of a hunt's runs `status HUNT` shows the cost of.
const statusRunCosts = 5

// printRunCosts prints what hunt's last runs cost, from the query log, for `status HUNT`; one
// line saying why when the query log cannot be read.
func printRunCosts(c *cli.Context, conn driver.Conn, hunt string) {
	w := c.App.Writer
	runs, err := attrib.RunCosts(c.Context, conn, attrib.CostOptions{}, hunt, statusRunCosts)
	switch {
	case err != nil:
		fmt.Fprintf(w, "cost of %s's last runs: not available: %v\n", hunt, err)
		return
	case len(runs) == 0:
		fmt.Fprintf(w, "cost of %s's last runs: none in %s in the last %s\n", hunt, attrib.QueryLogDefault,
			schedule.FormatInterval(attrib.RunCostsLookback))
		return
	}
	fmt.Fprintf(w, "cost of %s's last runs (%s):\n", hunt, attrib.QueryLogDefault)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  STARTED\tKIND\tFIRE\tSTATEMENTS\tFAILED\tREAD ROWS\tREAD BYTES\tDURATION\tPEAK MEMORY")
	for _, r := range runs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", r.Started.UTC().Format(time.RFC3339), r.Kind, r.Fire,
			r.Statements, r.Failed, r.ReadRows, bytesText(r.ReadBytes), (time.Duration(r.DurationMS) * time.Millisecond).String(),
			bytesText(r.PeakMemory))
	}
	tw.Flush()
}
