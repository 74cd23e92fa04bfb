package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/runner"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/watermark"
)

// runFlags are the worker loop's own flags.
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: ":8080", EnvVars: envFor("listen"),
			Usage: "address serving /metrics, /healthz, /readyz, the status page (/) and the read-only API (/api/v1/…)"},
		&cli.DurationFlag{Name: "tick", Value: 5 * time.Second, EnvVars: envFor("tick"),
			Usage: "how often due fires are planned and claimed"},
		&cli.IntFlag{Name: "concurrency", Value: 4, EnvVars: envFor("concurrency"),
			Usage: "hunt runs in flight at once in this process"},
		&cli.IntFlag{Name: "max-queued", EnvVars: envFor("max-queued"),
			Usage: "won fires that may wait for a run slot (default 0: sized to what the slots finish during one claim cycle); a claim takes at most concurrency + max-queued − held"},
		&cli.DurationFlag{Name: "lease", Value: lease.DefaultLease, EnvVars: envFor("lease"),
			Usage: "lease length; renewed every lease/3 while a hunt runs"},
		&cli.DurationFlag{Name: "settle", Value: lease.DefaultSettle, EnvVars: envFor("settle"),
			Usage: "claim settle; must exceed twice the replica lag (lease must be at least 4× settle)"},
		&cli.DurationFlag{Name: "grace", Value: 30 * time.Second, EnvVars: envFor("grace"),
			Usage: "on SIGTERM, how long running hunts may finish before they are cancelled"},
		&cli.StringFlag{Name: "owner", EnvVars: envFor("owner"),
			Usage: "this runner's identity in lease rows (default: the host name, the pod name under Kubernetes)"},
	}
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "worker loop: claim and run due hunts exactly once across pods; /metrics /healthz /readyz on --listen",
		Description: "Every --tick the runner reads ClickHouse's clock and the coordination state in one query,\n" +
			"claims every due fire in one batch and runs the winners, at most --concurrency at a time.\n" +
			"SIGTERM stops claiming and lets running hunts finish within --grace; the exit code is then 0.",
		Flags:  concat(clickhouseFlags(), sourceFlags(), runFlags(), huntsFlags(), []cli.Flag{notifyConfigFlag}),
		Action: runAction,
	}
}

func runAction(c *cli.Context) error {
	log := newLogger(c)
	ctx := c.Context // cancelled on SIGINT/SIGTERM (main.go)

	src, err := huntSource(c, log)
	if err != nil {
		return err
	}
	notifyCfg, err := loadNotifyConfig(c)
	if err != nil {
		return err
	}
	owner := c.String("owner")
	if owner == "" {
		if owner, err = os.Hostname(); err != nil || owner == "" {
			return cli.Exit("cannot tell the host name; set --owner", exitUsage)
		}
	}

	conn, chOpts, err := openClickHouse(c, log)
	if err != nil {
		return err
	}
	defer conn.Close()

	coord, err := lease.New(conn, lease.Options{Owner: owner, Lease: c.Duration("lease"), Settle: c.Duration("settle"),
		Database: chOpts.Database, Logger: log})
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	tel, err := runnerTelemetry(ctx, "hunt-runner")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	metrics, err := runner.NewMetrics(tel.Meter, c.Duration("settle"))
	if err != nil {
		return err
	}
	metrics.SetConsistency(string(chOpts.Consistency))

	policy, err := huntPolicy(c)
	if err != nil {
		return err
	}
	loader := configsrc.NewLoader(countingSource{src, metrics}, c.Duration("reload-interval"), log, configsrc.WithServerCheck(conn, policy))
	if _, _, err := loader.Load(ctx); err != nil {
		// Not fatal: the loader retries every --reload-interval and the runner stays unready.
		log.Error("hunt definitions could not be loaded yet; retrying", "source", src.String(), "error", err)
	}
	adapter := &setAdapter{current: loader.Current}

	huntConn, err := openHuntsClickHouse(c, log)
	if err != nil {
		return err
	}
	if huntConn != nil {
		defer huntConn.Close()
	}
	r, err := runner.New(conn, coord, watermark.New(conn, chOpts.Database), adapter.Source(), runner.Options{
		HuntConn: huntConn, Owner: owner, Database: chOpts.Database, Tick: c.Duration("tick"), Concurrency: c.Int("concurrency"),
		MaxQueued: c.Int("max-queued"), Lease: c.Duration("lease"), Grace: c.Duration("grace"), Settle: c.Duration("settle"),
		Logger: log, Metrics: metrics, Tracer: tel.Tracer,
		PublishedHash: func(ctx context.Context) (string, error) {
			return schedule.PublishedSetHash(ctx, conn, chOpts.Database)
		},
		ReplicaDelay: coord.ReplicaDelay,
	})
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	disp, err := newNotifyDispatcher(notifyCfg, conn, chOpts.Database, owner, loader.Current, tel.Meter, log, 0)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	o := &ops{conn: conn, database: chOpts.Database, loader: loader, metrics: metrics, tick: c.Duration("tick"), log: log}
	srv := o.server(c.String("listen"), tel, r.Ready)
	if err := srv.Listen(); err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	// Flat, readable attributes: the redacted URL and the user, not a dump of the options struct.
	log.Info("hunt-runner run starting", "version", buildVersion(), "owner", owner,
		"clickhouse_url", chstore.Redact(chOpts.URL), "clickhouse_user", chOpts.User, "database", chOpts.Database,
		"source", src.String(), "tick", c.Duration("tick").String(), "concurrency", c.Int("concurrency"),
		"lease", c.Duration("lease").String(), "settle", c.Duration("settle").String(), "grace", c.Duration("grace").String(),
		"listen", srv.BoundAddr(), "otlp", tel.OTLP)

	// controller-runtime style: every long-lived part is Start(ctx) error under one errgroup;
	// the signal is handled once, in main.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return loader.Start(gctx) })
	g.Go(func() error { return r.Start(gctx) })
	g.Go(func() error { return srv.Start(gctx) })
	if disp != nil { // notify: decoupled from the runner, it reads committed runs from ClickHouse
		g.Go(func() error { return disp.Start(gctx) })
	}
	g.Go(func() error { return o.watchHealth(gctx) })
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return cli.Exit(fmt.Sprintf("run: %v", err), exitError)
	}
	log.Info("hunt-runner run stopped")
	return nil
}
