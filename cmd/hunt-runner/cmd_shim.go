package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/shim"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// kedaDefaultTimeout is KEDA's HTTP timeout for a metrics-api trigger (KEDA_HTTP_DEFAULT_TIMEOUT).
const kedaDefaultTimeout = 3 * time.Second

func shimCommand() *cli.Command {
	return &cli.Command{
		Name:  "shim",
		Usage: "serve the due backlog (and other catalogue queries) to KEDA's metrics-api scaler",
		Description: `Endpoints (JSON, always 200 with a number unless the request itself is wrong):
  GET /keda/hunt-backlog          {"value": N}  hunts due now, from the hunt_backlog_v1 view
  GET /keda/pressure?service=S    {"value": N}  highest 1-minute average of S's *scaling_pressure gauges, 0..100
  GET /q/NAME?PARAM=VALUE…        any query of the catalogue
  /healthz  /readyz  /metrics

When ClickHouse fails (down, slow, bad answer) the shim answers 200 with the last good value, or
the query's cold_hold when it has none, so a ClickHouse fault never scales the runner. Unknown
queries are 404, missing or invalid parameters 400; both are configuration mistakes.

Connect as the scaler identity from "hunt-runner provision --role scaler", never the runner's:
its password comes from HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file (a mounted
Secret). --queries FILE is deep-merged over the built-in catalogue (--print-queries shows it); a
catalogue that does not parse or validate stops the shim at start.`,
		Flags: concat(clickhouseFlags(), []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: shim.DefaultListen, EnvVars: envFor("listen"),
				Usage: "address to serve on"},
			&cli.StringFlag{Name: "queries", EnvVars: envFor("queries"),
				Usage: "YAML catalogue deep-merged over the built-in one (adds queries, changes fields)"},
			&cli.StringFlag{Name: "token-file", EnvVars: envFor("token-file"),
				Usage: "file holding a bearer token that /keda/* and /q/* then require (KEDA authMode: bearer)"},
			durationFlag(&cli.DurationFlag{Name: "timeout", Value: shim.DefaultTimeout, EnvVars: envFor("timeout"),
				Usage: "client deadline of queries that set none; keep it below the KEDA trigger's timeout (3s by default)"}),
			durationFlag(&cli.DurationFlag{Name: "max-stale", Value: shim.DefaultMaxStale, EnvVars: envFor("max-stale"),
				Usage: "age past which a held value is reported stale (it is still served); per query: max_stale"}),
			&cli.StringFlag{Name: "otel-database", Value: "otel", EnvVars: envFor("otel-database"),
				Usage: "database of the OpenTelemetry exporter's otel_metrics_gauge ($otel in the catalogue)"},
			&cli.BoolFlag{Name: "print-queries", EnvVars: envFor("print-queries"),
				Usage: "print the built-in catalogue and exit"},
		}),
		Action: runShim,
	}
}

func runShim(c *cli.Context) error {
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("shim takes no arguments, got %q", c.Args().Slice()), exitUsage)
	}
	if c.Bool("print-queries") {
		_, err := c.App.Writer.Write(shim.BuiltinCatalogue())
		return err
	}
	log := newLogger(c)
	o, err := clickhouseOptions(c).WithDefaults()
	if err != nil {
		return cli.Exit(fmt.Sprintf("ClickHouse settings: %v", err), exitUsage)
	}
	chOpts, err := o.ClickHouseOptions()
	if err != nil {
		return cli.Exit(fmt.Sprintf("ClickHouse settings: %v", err), exitUsage)
	}
	var override []byte
	source := ""
	if path := c.String("queries"); path != "" {
		if override, err = os.ReadFile(path); err != nil {
			return cli.Exit(fmt.Sprintf("--queries: %v", err), exitUsage)
		}
		source = path
	}
	token := ""
	if path := c.String("token-file"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cli.Exit(fmt.Sprintf("--token-file: %v", err), exitUsage)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return cli.Exit(fmt.Sprintf("--token-file %s is empty", path), exitUsage)
		}
	}
	// No ping: the shim must come up, be ready and answer cold_hold while ClickHouse is down.
	// clickhouse.Open dials lazily, on the first query.
	if err := shimConsistency(c, o, chOpts, log); err != nil {
		return err
	}
	conn, err := clickhouse.Open(chOpts)
	if err != nil {
		return fmt.Errorf("ClickHouse at %s: %w", chstore.Redact(o.URL), err)
	}
	defer conn.Close()
	if err := shimLayout(c, o, conn, log); err != nil {
		return err
	}
	if chOpts.Auth.Username == "default" {
		log.Warn("the shim connects as ClickHouse's default user; give it the scaler identity (hunt-runner provision --role scaler)")
	}
	log.Info("KEDA shim using ClickHouse", "clickhouse_url", chstore.Redact(o.URL), "user", chOpts.Auth.Username,
		"database", o.Database, "otel_database", c.String("otel-database"))

	s, err := shim.New(shim.Options{
		Conn:           conn,
		Database:       o.Database,
		OtelDatabase:   c.String("otel-database"),
		Override:       override,
		OverrideSource: source,
		Timeout:        c.Duration("timeout"),
		MaxStale:       c.Duration("max-stale"),
		Listen:         c.String("listen"),
		Token:          token,
		Logger:         log,
		Redact:         []string{o.Password},
	})
	if errors.Is(err, shim.ErrCatalogue) {
		return cli.Exit(err.Error(), exitUsage)
	}
	if err != nil {
		return err
	}
	// A query still running when KEDA gives up turns into a scaler error, and KEDA's fallback
	// then overrides the other triggers: exactly what holding exists to prevent.
	for _, name := range s.Catalogue().Names() {
		if q, _ := s.Catalogue().Lookup(name); q.Timeout >= kedaDefaultTimeout {
			log.Warn("query timeout is not below KEDA's default trigger timeout; raise the trigger's timeout or KEDA may give up first",
				"query", name, "timeout", q.Timeout, "keda_timeout", kedaDefaultTimeout)
		}
	}
	return s.Start(c.Context)
}

// shimConsistency checks and logs the consistency mode, deciding auto with one attempt bounded
// by --timeout, but puts no settings on the shim's connection: its identity's profile is
// readonly = 1 (provision --role scaler), which refuses every setting a query arrives with,
// connection-level ones included, and the backlog it reads is a scaling signal that tolerates
// replica lag. When ClickHouse cannot be asked at start the shim goes on rather than stay down;
// a configuration that cannot be correct still stops it, as it stops every command.
func shimConsistency(c *cli.Context, o chstore.Options, chOpts *clickhouse.Options, log *slog.Logger) error {
	probe, err := clickhouse.Open(chOpts)
	if err != nil {
		return fmt.Errorf("ClickHouse at %s: %w", chstore.Redact(o.URL), err)
	}
	defer probe.Close()
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	rep, err := chstore.ResolveConsistency(ctx, probe, o.Database, o.Consistency, len(chOpts.Addr))
	switch {
	case err != nil && rep.Mode == "":
		msg := err.Error()
		if o.Password != "" { // the driver's URL holds no password; a server echo might
			msg = strings.ReplaceAll(msg, o.Password, "xxxxx")
		}
		log.Warn("cannot decide --consistency auto while ClickHouse does not answer", "error", msg)
		return nil
	case err != nil:
		return cli.Exit(err.Error(), exitUsage)
	}
	log.Info("ClickHouse consistency (the shim only reads the backlog and sends no settings)", rep.LogAttrs()...)
	for _, w := range rep.Warnings {
		log.Warn(w, "consistency", string(rep.Mode))
	}
	return nil
}

// shimLayout refuses a database whose recorded layout is not this release's (its due counts
// would be wrong), but, as shimConsistency, lets the shim come up when ClickHouse cannot be
// asked at start: it then answers cold_hold until it can.
func shimLayout(c *cli.Context, o chstore.Options, conn driver.Conn, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	err := schema.CheckLayout(ctx, conn, o.Database)
	switch {
	case errors.Is(err, schema.ErrLayout):
		return cli.Exit("shim: "+err.Error(), exitError)
	case err != nil:
		msg := err.Error()
		if o.Password != "" {
			msg = strings.ReplaceAll(msg, o.Password, "xxxxx")
		}
		log.Warn("cannot check the schema layout while ClickHouse does not answer", "error", msg)
	}
	return nil
}
