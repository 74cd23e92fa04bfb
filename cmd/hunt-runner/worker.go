package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"golang.org/x/sync/errgroup"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/serve"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/runner"
	"github.com/hunt-runner/hunt-runner/store"
)

// workerConfig is what `run` and `dev` choose differently for the one worker they both start:
// the loader, the loop and the --listen server, built by buildWorker.
type workerConfig struct {
	conn        driver.Conn
	huntConn    driver.Conn // nil: hunts run on conn
	database    string
	huntSet     string // the set the loaded hunts are published as; its hash is checked
	consistency string // resolved mode, for the metric
	owner       string
	service     string // telemetry service name
	src         configsrc.Source
	policy      configsrc.Policy
	reload      time.Duration
	listen      string
	statusToken string         // bearer token of the status page and API ("" : none)
	links       statusLinks    // the status page's links out
	loop        runner.Options // timing and sizing; owner, database, connections and telemetry are set here
	lease       lease.Options  // Lease and Settle; the rest is set here
	onRun       func(runner.RunReport)
	replicas    bool // export the replica delay (run); dev has one node
	perHunt     int  // hunts with metric series of their own (--metrics-per-hunt)
}

// worker is one assembled runner process: hunt loading with the server check, the loop, and
// the probes, metrics, status API and page on --listen.
type worker struct {
	loader  *configsrc.Loader
	runner  *runner.Runner
	server  *serve.Server
	ops     *ops
	tel     *serve.Telemetry
	metrics *runner.Metrics
	coord   *lease.Coordinator
}

// buildWorker assembles a worker; nothing runs until start. The caller loads hunts first
// (worker.loader.Load) as it sees fit, and closes the telemetry (worker.close) when done.
func buildWorker(ctx context.Context, cfg workerConfig, log *slog.Logger) (*worker, error) {
	st := store.New(cfg.conn, cfg.database)
	lo := cfg.lease
	lo.Owner, lo.Logger = cfg.owner, log
	coord, err := lease.New(st.Leases(), lo)
	if err != nil {
		return nil, err
	}
	tel, err := runnerTelemetry(ctx, cfg.service, cfg.perHunt)
	if err != nil {
		return nil, err
	}
	w := &worker{tel: tel, coord: coord}
	if w.metrics, err = runner.NewMetrics(tel.Meter, coord.Options().Settle, runner.WithPerHunt(cfg.perHunt)); err != nil {
		w.close()
		return nil, err
	}
	w.metrics.SetConsistency(cfg.consistency)
	w.loader = configsrc.NewLoader(countingSource{cfg.src, w.metrics}, cfg.reload, log, configsrc.WithServerCheck(cfg.conn, cfg.policy), configsrc.WithCheckCache(st),
		configsrc.WithPublished(publishedDefinitions(cfg.conn, cfg.database, cfg.huntSet)))
	opts := cfg.loop
	conn, db := cfg.conn, cfg.database
	opts.HuntConn, opts.Owner, opts.Database = cfg.huntConn, cfg.owner, db
	opts.Lease, opts.Settle = coord.Options().Lease, coord.Options().Settle
	opts.Version = buildVersion() // recorded in the heartbeat
	if cfg.huntSet != "" {
		opts.HuntSet = cfg.huntSet // recorded in the heartbeat too; the runner defaults it
	}
	opts.Logger, opts.Metrics, opts.Tracer, opts.OnRun = log, w.metrics, tel.Tracer, cfg.onRun
	opts.PublishedHash = publishedHash(conn, db, cfg.huntSet)
	opts.HuntFiles = func() string {
		set := w.loader.Current()
		if set == nil {
			return ""
		}
		return huntFilesOf(set).HeartbeatJSON()
	}
	if cfg.replicas {
		opts.ReplicaDelay = st.ReplicaDelay
	}
	if w.runner, err = runner.New(conn, coord, st, loadedSet(w.loader.Current), opts); err != nil {
		w.close()
		return nil, err
	}
	w.ops = &ops{conn: conn, database: db, loader: w.loader, metrics: w.metrics, tick: w.runner.Tick(), log: log, token: cfg.statusToken, links: cfg.links}
	w.server = w.ops.server(cfg.listen, tel, w.runner.Ready)
	if err := w.server.Listen(); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// start runs every part of the worker under g until ctx ends.
func (w *worker) start(g *errgroup.Group, ctx context.Context) {
	g.Go(func() error { return w.loader.Start(ctx) })
	g.Go(func() error { return w.runner.Start(ctx) })
	g.Go(func() error { return w.server.Start(ctx) })
	g.Go(func() error { return w.ops.watchHealth(ctx) })
}

// close flushes the telemetry.
func (w *worker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.tel.Shutdown(ctx)
}

// publishedHash reads the hash hunt set set last published (the default set when set is ""),
// which the runner compares with the set it loaded: another set's publication must neither
// raise nor hide a mismatch.
// publishedDefinitions reads the definition hash per hunt of set's live publication, which the
// loader keeps when a duplicate id appears (configsrc.WithPublished).
func publishedDefinitions(conn driver.Conn, database, set string) func(context.Context) (map[string]string, error) {
	if set == "" {
		set = hunt.HuntSetDefault
	}
	return func(ctx context.Context) (map[string]string, error) {
		p, err := store.New(conn, database).Schedule().Published(ctx, set)
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for id, r := range p.Rows {
			if r.Set == set && r.Enabled {
				out[id] = r.ConfigHash
			}
		}
		return out, nil
	}
}

func publishedHash(conn driver.Conn, database, set string) func(context.Context) (string, error) {
	if set == "" {
		set = hunt.HuntSetDefault
	}
	return func(ctx context.Context) (string, error) {
		return store.New(conn, database).Schedule().PublishedSetHash(ctx, set)
	}
}
