package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func schemaCommand() *cli.Command {
	return &cli.Command{
		Name:  "schema",
		Usage: "create hunt-runner's coordination tables and the KEDA backlog view in ClickHouse, or print their DDL",
		Description: `Creates the database (--database) and every coordination table with CREATE … IF NOT EXISTS,
and the KEDA backlog view hunt_backlog_v1 (what the shim and KEDA read) with CREATE OR REPLACE,
so a newer release's schema refreshes it. Then it reports what it created. Re-running creates
nothing and prints "schema up to date: nothing to do". Existing tables are never dropped, and
altered only to upgrade an older layout or to set the retention (both reported); a table whose engine does
not match the topology (e.g. created on one node before replication was set up) is listed and
the command exits 1.

The table engines depend on the topology:
  single      one node: ReplacingMergeTree / MergeTree
  replicated  a Replicated database; Replicated*MergeTree without arguments
  cluster     ON CLUSTER --cluster; Replicated*MergeTree('/clickhouse/tables/{shard}/<db>/<table>', '{replica}')
  cloud       ClickHouse Cloud: as replicated, database with the service's default engine
  auto        (default) ask the server: Cloud, else the database's engine is Replicated, else
              {shard}/{replica} macros with --cluster in system.clusters, else single

--print writes the DDL to stdout and exits without connecting (auto prints single), so it can be
reviewed or applied by other tooling:

  hunt-runner schema --print --topology cluster --cluster main > schema.sql
  HUNT_RUNNER_CLICKHOUSE_PASSWORD=… hunt-runner schema --clickhouse-url clickhouse://ch:9000

--findings-ttl (default 90d) is hunt_findings' retention. --commits-ttl is how long each commit
row of hunt_watermark (a committed run's record in hunt_runs, and what makes its findings visible
in hunt_findings_committed) is kept before a hunt's older commits roll up into its newest one,
which carries the progress; it defaults to the longer of 90d and --findings-ttl, and a value
shorter than --findings-ttl is refused (committed findings would be hidden while still kept).
When a table's TTL differs, schema changes it with ALTER TABLE … MODIFY TTL and
materialize_ttl_after_modify = 0 (no mutation: rows already stored expire or roll up as merges
reach them) and reports it; otherwise it does nothing.

Upgrades: a database of an earlier layout is upgraded in place and the new version recorded in
hunt_schema once every step is done; run, shim, materialise and import-legacy refuse a database
until then. A schema that failed part-way is resumed by running it again: each step skips what
is done, and nothing copied is lost or copied twice.`,
		Flags: concat(interactiveClickhouseFlags(), []cli.Flag{
			&cli.BoolFlag{Name: "print", EnvVars: envFor("print"),
				Usage: "print the DDL and exit without connecting"},
			&cli.StringFlag{Name: "topology", Value: string(schema.TopologyAuto), EnvVars: envFor("topology"),
				Usage: "table engines: auto, single, replicated, cluster or cloud"},
			&cli.StringFlag{Name: "cluster", Value: "default", EnvVars: envFor("cluster"),
				Usage: "cluster name for --topology cluster (ON CLUSTER) and for auto-detection"},
			&cli.StringFlag{Name: "findings-ttl", Value: fmt.Sprintf("%dd", schema.DefaultFindingsTTLDays), EnvVars: envFor("findings-ttl"),
				Usage: "how long hunt_findings keeps findings, in whole days (e.g. 30d, 365d); changed only when it differs, without rewriting existing parts"},
			&cli.StringFlag{Name: "commits-ttl", EnvVars: envFor("commits-ttl"),
				Usage: "how long each commit row (a committed run's record, which keeps its findings visible) is kept before a hunt's older commits roll up into its newest, in whole days; at least --findings-ttl. Default: the longer of 90d and --findings-ttl"},
		}),
		Action: runSchema,
	}
}

func runSchema(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("schema takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	topo, err := schema.ParseTopology(c.String("topology"))
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	cluster := c.String("cluster")
	if topo == schema.TopologyCluster && cluster == "" {
		return cli.Exit("--topology cluster needs --cluster", exitUsage)
	}
	ret, err := retentionFlags(c)
	if err != nil {
		return err
	}
	if c.Bool("print") {
		// Only the database name matters here; a password file or TLS setting that would fail
		// to connect must not stop a review of the DDL.
		// A URL that does not parse is still an error unless --database makes it irrelevant:
		// its path may name the database, and the DDL must not silently target another.
		o := clickhouseOptions(c)
		ep, err := chstore.ParseURL(o.URL)
		if err != nil && !c.IsSet("database") {
			return cli.Exit(err.Error(), exitUsage)
		}
		database := o.Database
		if database == "" {
			database = ep.Database // clickhouseOptions leaves it to the URL's path
		}
		return printSchema(c.App.Writer, database, topo, cluster, ret)
	}

	log := newLogger(c)
	o := clickhouseOptions(c)
	o.AllowMissingDatabase = true // creating it is the point
	conn, o, err := openWith(c, o, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	rep, err := applySchema(c.Context, conn, o.Database, topo, cluster)
	if err != nil {
		return err
	}
	did, err := schema.ApplyRetention(c.Context, conn, rep.Database, rep.Topology, cluster, ret)
	rep.Upgraded = append(rep.Upgraded, did...)
	if err != nil {
		writeReport(c.App.Writer, rep)
		return cli.Exit(err.Error(), exitError)
	}
	log.Info("schema applied", "database", rep.Database, "topology", string(rep.Topology),
		"created", len(rep.Created), "existing", len(rep.Existing))
	writeReport(c.App.Writer, rep)
	if len(rep.Mismatched) > 0 {
		for _, m := range rep.Mismatched {
			log.Warn("coordination table has the wrong engine for the topology", "table", m, "topology", string(rep.Topology))
		}
		return cli.Exit(fmt.Sprintf("%d tables have engines that do not match topology %s (listed above); "+
			"schema never alters tables: migrate them, or pass the --topology they were created with", len(rep.Mismatched), rep.Topology), exitError)
	}
	return nil
}

// applySchema is schema.Apply plus the KEDA backlog view, which store builds on its due SQL
// (store/schema cannot import store). Without the view the shim answers a cold 0 and a runner
// scaled to zero never wakes, so it is part of the schema, not of an optional step.
func applySchema(ctx context.Context, conn driver.Conn, database string, topo schema.Topology, cluster string) (schema.Report, error) {
	rep, err := schema.Apply(ctx, conn, database, topo, cluster)
	if err != nil {
		return rep, err
	}
	v, existed, err := store.ApplyBacklogView(ctx, conn, rep.Database, rep.Topology, cluster)
	if err != nil {
		return rep, err
	}
	if existed {
		rep.Existing = append(rep.Existing, v.Name)
	} else {
		rep.Created = append(rep.Created, v.Name)
	}
	return rep, nil
}

// retentionFlags reads --findings-ttl and --commits-ttl, refusing settings that contradict
// each other before anything connects.
func retentionFlags(c *cli.Context) (schema.Retention, error) {
	var r schema.Retention
	var err error
	if r.FindingsDays, err = ttlDays(c.String("findings-ttl")); err != nil {
		return r, cli.Exit("--findings-ttl: "+err.Error(), exitUsage)
	}
	if c.String("commits-ttl") != "" {
		if r.CommitsDays, err = ttlDays(c.String("commits-ttl")); err != nil {
			return r, cli.Exit("--commits-ttl: "+err.Error(), exitUsage)
		}
	}
	if _, err := schema.RetentionStatements("", schema.TopologySingle, "", r); err != nil {
		return r, cli.Exit(err.Error(), exitUsage)
	}
	return r, nil
}

// ttlDays reads a TTL flag with the flags' duration grammar; ClickHouse's TTL here is in days,
// so anything else would be silently rounded.
func ttlDays(text string) (int, error) {
	d, err := parseDuration(text)
	if err != nil {
		return 0, err
	}
	const day = 24 * time.Hour
	if d < day || d%day != 0 {
		return 0, fmt.Errorf("%s is not a whole number of days (at least 1d)", text)
	}
	return int(d / day), nil
}

func printSchema(w io.Writer, database string, topo schema.Topology, cluster string, ret schema.Retention) error {
	if topo == schema.TopologyAuto {
		topo = schema.TopologySingle
	}
	stmts := append(schema.DDL(database, topo, cluster), store.BacklogViewStatement(database, topo, cluster))
	// The DDL creates the default retention; another one is these ALTERs, as schema applies them.
	alters, err := schema.RetentionStatements(database, topo, cluster, ret)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	stmts = append(stmts, alters...)
	_, err = fmt.Fprintf(w, "-- hunt-runner schema: database %s, topology %s\n\n%s",
		database, topo, schema.Script(stmts))
	return err
}

func writeReport(w io.Writer, rep schema.Report) {
	switch {
	case len(rep.Created) == 0 && len(rep.Mismatched) == 0 && len(rep.Upgraded) == 0:
		fmt.Fprintf(w, "schema up to date: nothing to do (database %s, topology %s, %d objects)\n",
			rep.Database, rep.Topology, len(rep.Existing))
		return
	case len(rep.Created) == 0:
		fmt.Fprintf(w, "schema: nothing created (database %s, topology %s, %d objects)\n",
			rep.Database, rep.Topology, len(rep.Existing))
	default:
		fmt.Fprintf(w, "schema applied (database %s, topology %s):\n", rep.Database, rep.Topology)
		for _, name := range rep.Created {
			fmt.Fprintf(w, "  created  %s\n", name)
		}
		if len(rep.Existing) > 0 {
			fmt.Fprintf(w, "  %d objects already existed\n", len(rep.Existing))
		}
	}
	// Upgrades (added columns, a changed TTL) alter existing tables: say so, every time.
	for _, u := range rep.Upgraded {
		fmt.Fprintf(w, "  upgraded  %s\n", u)
	}
	for _, m := range rep.Mismatched {
		fmt.Fprintf(w, "  WRONG ENGINE  %s\n", m)
	}
}

// checkLayout refuses, with schema.CheckLayout's message (which names `hunt-runner schema`), a
// database whose recorded layout is not this release's. The commands that act on the
// coordination state call it right after connecting.
func checkLayout(c *cli.Context, conn driver.Conn, database string) error {
	err := schema.CheckLayout(c.Context, conn, database)
	if errors.Is(err, schema.ErrLayout) {
		return cli.Exit(c.Command.Name+": "+err.Error(), exitError)
	}
	return err
}
