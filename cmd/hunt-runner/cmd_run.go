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
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/runner"
)

// runFlags are the worker loop's own flags.
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: ":8080", EnvVars: envFor("listen"),
			Usage: "address serving /metrics, /healthz, /readyz, the status page (/) and the read-only API (/api/v1/…)"},
		durationFlag(&cli.DurationFlag{Name: "tick", Value: 5 * time.Second, EnvVars: envFor("tick"),
			Usage: "how often due fires are planned and claimed"}),
		&cli.IntFlag{Name: "concurrency", Value: 4, EnvVars: envFor("concurrency"),
			Usage: "hunt runs in flight at once in this process"},
		&cli.IntFlag{Name: "cap", Value: runner.CapDefault, EnvVars: envFor("cap"),
			Usage: "most runs of this hunt set's hunts (live fires and backfill chunks, queued or running) in flight across every pod of the set at once; every pod of the set must use the same value. 0: no cap"},
		&cli.IntFlag{Name: "max-queued", EnvVars: envFor("max-queued"),
			Usage: "won fires that may wait for a run slot (default 0: sized to what the slots finish during two claim cycles); a claim takes at most concurrency + max-queued − held"},
		durationFlag(&cli.DurationFlag{Name: "lease", Value: lease.DefaultLease, EnvVars: envFor("lease"),
			Usage: "lease length; renewed every lease/3 while a hunt runs"}),
		durationFlag(&cli.DurationFlag{Name: "settle", Value: lease.DefaultSettle, EnvVars: envFor("settle"),
			Usage: "claim settle; must exceed twice the replica lag (lease must be at least 4× settle)"}),
		durationFlag(&cli.DurationFlag{Name: "grace", Value: 30 * time.Second, EnvVars: envFor("grace"),
			Usage: "on SIGTERM, how long running hunts may finish before they are cancelled"}),
		&cli.StringFlag{Name: "owner", EnvVars: envFor("owner"),
			Usage: "this runner's identity in lease rows (default: the host name, the pod name under Kubernetes)"},
		&cli.Int64Flag{Name: "max-finding-bytes", Value: runner.DefaultMaxFindingBytes, EnvVars: envFor("max-finding-bytes"),
			Usage: fmt.Sprintf("bytes one finding's JSON document may hold (at least %d); a longer one is stored as a truncation record "+
				"(hr_truncated_bytes, hr_hash, hr_prefix) and counted in hunt_runner_findings_truncated_total", runner.MinMaxFindingBytes)},
		&cli.Int64Flag{Name: "max-run-findings-bytes", Value: runner.DefaultMaxRunFindingsBytes, EnvVars: envFor("max-run-findings-bytes"),
			Usage: "bytes of findings (documents and labels) one run holds and stores; the rest are counted in the run's findings_dropped. " +
				"The server stops sending at the cap, so a pod needs about 6 × concurrency × this much memory for findings at worst"},
		metricsPerHuntFlag(),
	}
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "worker loop: claim and run due hunts exactly once across pods; /metrics /healthz /readyz on --listen",
		Description: "Every --tick the runner reads ClickHouse's clock and the coordination state in one query,\n" +
			"claims every due fire in one batch and runs the winners, at most --concurrency at a time.\n" +
			"SIGTERM stops claiming and lets running hunts finish within --grace; the exit code is then 0.",
		Flags:  concat(clickhouseFlags(), sourceFlags(), runFlags(), statusAuthFlags(), huntsFlags(), workloadFlags(), []cli.Flag{notifyConfigFlag, huntSetFlag()}),
		Action: runAction,
	}
}

func runAction(c *cli.Context) error {
	log := newLogger(c)
	ctx := c.Context // cancelled on SIGINT/SIGTERM (main.go)

	set, err := huntSet(c, hunt.HuntSetDefault)
	if err != nil {
		return err
	}
	src, err := huntSource(c, log)
	if err != nil {
		return err
	}
	notifyCfg, err := loadNotifyConfig(c)
	if err != nil {
		return err
	}
	token, err := statusToken(c, c.String("listen"))
	if err != nil {
		return err
	}
	links, err := readStatusLinks(c)
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
	if err := checkLayout(c, conn, chOpts.Database); err != nil {
		return err
	}
	workloads := attrib.Workloads{Live: c.String("workload-live"), Backfill: c.String("workload-backfill")}
	if err := checkWorkloads(c, conn, workloads); err != nil {
		return err
	}

	huntConn, err := openHuntsClickHouse(c, log)
	if err != nil {
		return err
	}
	if huntConn != nil {
		defer huntConn.Close()
	}
	policy, err := huntPolicy(c)
	if err != nil {
		return err
	}
	w, err := buildWorker(ctx, workerConfig{
		conn: conn, huntConn: huntConn, database: chOpts.Database, consistency: string(chOpts.Consistency),
		huntSet: set, owner: owner, service: "hunt-runner", src: src, policy: policy, reload: c.Duration("reload-interval"),
		listen: c.String("listen"), statusToken: token, links: links, replicas: true, perHunt: c.Int("metrics-per-hunt"),
		lease: lease.Options{Lease: c.Duration("lease"), Settle: c.Duration("settle")},
		loop: runner.Options{Tick: c.Duration("tick"), Concurrency: c.Int("concurrency"), MaxQueued: c.Int("max-queued"),
			Grace: c.Duration("grace"), MaxFindingBytes: c.Int64("max-finding-bytes"), MaxRunFindingsBytes: c.Int64("max-run-findings-bytes"),
			Workloads: workloads, Cap: c.Int("cap")},
	}, log)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	defer w.close()
	if _, _, err := w.loader.Load(ctx); err != nil {
		// Not fatal: the loader retries every --reload-interval and the runner stays unready.
		log.Error("hunt definitions could not be loaded yet; retrying", "source", src.String(), "error", err)
	}
	disp, err := newNotifyDispatcher(notifyCfg, conn, chOpts.Database, owner, w.loader.Current, w.tel.Meter, log, 0)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	// Flat, readable attributes: the redacted URL and the user, not a dump of the options struct.
	log.Info("hunt-runner run starting", "version", buildVersion(), "owner", owner,
		"clickhouse_url", chstore.Redact(chOpts.URL), "clickhouse_user", chOpts.User, "database", chOpts.Database,
		"source", src.String(), "tick", c.Duration("tick").String(), "concurrency", c.Int("concurrency"),
		"lease", c.Duration("lease").String(), "settle", c.Duration("settle").String(), "grace", c.Duration("grace").String(),
		"listen", w.server.BoundAddr(), "otlp", w.tel.OTLP)

	// controller-runtime style: every long-lived part is Start(ctx) error under one errgroup;
	// the signal is handled once, in main.
	g, gctx := errgroup.WithContext(ctx)
	w.start(g, gctx)
	if disp != nil { // notify: decoupled from the runner, it reads committed runs from ClickHouse
		g.Go(func() error { return disp.Start(gctx) })
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return cli.Exit(fmt.Sprintf("run: %v", err), exitError)
	}
	log.Info("hunt-runner run stopped")
	return nil
}
