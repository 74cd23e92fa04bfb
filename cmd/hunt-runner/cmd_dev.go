package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/runner"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/shim"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "everything in one process on the embedded engine: schema, sample data, materialise, runner, shim",
		Description: "Starts ClickHouse embedded (chDB, from CHDB_LIB_PATH; `make chdb` fetches it), creates the\n" +
			"schema and a `sample` database of auth, process and DNS events that keeps growing, loads the\n" +
			"hunts (default examples/hunts, reloaded on change), materialises them and runs them, printing\n" +
			"every run and its findings. Ctrl-C stops it. Nothing here is meant for production.",
		Flags: concat(sourceFlags(), statusAuthFlags(), []cli.Flag{
			chdbLibFlag(),
			&cli.StringFlag{Name: "clickhouse-listen", Value: "127.0.0.1:8123", Usage: "where the embedded ClickHouse serves its HTTP interface"},
			&cli.StringFlag{Name: "data", Usage: "chDB data directory, kept across runs (default: a temporary directory)"},
			&cli.StringFlag{Name: "database", Value: chstore.DefaultDatabase, Usage: "coordination database"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", Usage: "runner /metrics /healthz /readyz"},
			&cli.StringFlag{Name: "shim-listen", Value: "127.0.0.1:8081", Usage: "KEDA shim (GET /keda/hunt-backlog); empty disables it"},
			durationFlag(&cli.DurationFlag{Name: "tick", Value: 2 * time.Second, Usage: "runner tick"}),
			&cli.IntFlag{Name: "concurrency", Value: 4, Usage: "hunt runs in flight"},
			durationFlag(&cli.DurationFlag{Name: "sample-every", Value: 5 * time.Second, Usage: "how often fresh sample events are generated"}),
			durationFlag(&cli.DurationFlag{Name: "backfill", Value: 15 * time.Minute, Usage: "sample events generated into the past at start"}),
			&cli.IntFlag{Name: "show", Value: 3, Usage: "findings printed per run"},
			notifyConfigFlag,
			huntSetFlag(),
			metricsPerHuntFlag(),
			&cli.StringFlag{Name: "receiver-listen", Value: "127.0.0.1:8082", Usage: "local receiver that prints notifications (the default sink)"},
		}),
		Action: devAction,
	}
}

// embeddedEngine is the in-process ClickHouse of `dev` (chlocal.Server).
type embeddedEngine interface {
	URL() string
	Close() error
}

// devEngine is the embedded ClickHouse with the schema and the sample data generator.
type devEngine struct {
	srv         embeddedEngine
	conn        driver.Conn
	consistency chstore.ConsistencyReport
	gen         *sampleGenerator
}

func (e *devEngine) close() {
	e.conn.Close()
	e.srv.Close()
}

// startDevEngine starts chDB, applies the schema to db and sets up the sample data.
func startDevEngine(ctx context.Context, c *cli.Context, out io.Writer, db string, log *slog.Logger) (*devEngine, error) {
	fmt.Fprintln(out, "starting embedded ClickHouse (chDB)…")
	srv, err := startEmbedded(ctx, c.String("chdb-lib"), c.String("clickhouse-listen"), c.String("data"), log)
	if err != nil {
		return nil, err
	}
	conn, consistency, err := chstore.OpenConsistent(ctx, chstore.Options{URL: srv.URL(), Database: "default"}, log)
	if err != nil {
		srv.Close()
		return nil, cli.Exit(fmt.Sprintf("connect to the embedded ClickHouse: %v", err), exitError)
	}
	e := &devEngine{srv: srv, conn: conn, consistency: consistency}
	if _, err := applySchema(ctx, conn, db, schema.TopologySingle, ""); err != nil {
		e.close()
		return nil, cli.Exit(err.Error(), exitError)
	}
	e.gen = &sampleGenerator{conn: conn, log: log, every: c.Duration("sample-every"), backfill: c.Duration("backfill")}
	if err := e.gen.setup(ctx); err != nil {
		e.close()
		return nil, cli.Exit(err.Error(), exitError)
	}
	fmt.Fprintf(out, "ClickHouse at %s (database %s, sample data in `sample`)\n", srv.URL(), db)
	return e, nil
}

// devLogLevel keeps the terminal for runs and findings (warn) unless --log-level says otherwise.
func devLogLevel(c *cli.Context) string {
	for _, lc := range c.Lineage() {
		if lc.IsSet("log-level") {
			return lc.String("log-level")
		}
	}
	return "warn"
}

// devPublisher publishes the loaded schedule the way `materialise` would, after every reload,
// so the backlog the embedded shim serves is always the loaded set's.
type devPublisher struct {
	out   io.Writer
	store *store.Schedule
	set   string // the hunt set published (--hunt-set)
}

func (p *devPublisher) materialise(ctx context.Context, s *configsrc.Set) {
	diff, err := schedule.Materialise(ctx, p.store, devScheduleRows(s), s.Hash,
		schedule.MaterialiseOptions{Set: p.set, AllowEmpty: true, Source: s.Source})
	if err != nil {
		fmt.Fprintf(p.out, "materialise failed: %v\n", err)
		return
	}
	if diff.HasChanges() {
		fmt.Fprintf(p.out, "materialised %d hunts: %d added, %d changed, %d tombstoned\n",
			len(s.Hunts), len(diff.Added), len(diff.Changed), len(diff.Tombstoned))
	}
}

// follow re-materialises whenever the loader picks up a change, until ctx ends.
func (p *devPublisher) follow(ctx context.Context, loader *configsrc.Loader) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-loader.Changes():
			fmt.Fprintf(p.out, "hunts reloaded (%d hunts, %d problems)\n", len(s.Hunts), len(s.Problems))
			p.materialise(ctx, s)
		}
	}
}

func devAction(c *cli.Context) error {
	out := c.App.Writer
	log := buildLogger(os.Stderr, devLogLevel(c), "text")
	ctx := c.Context

	if !c.IsSet("hunts-dir") && !c.IsSet("git-url") {
		if err := c.Set("hunts-dir", "examples/hunts"); err != nil {
			return err
		}
	}
	huntSetName, err := huntSet(c, hunt.HuntSetDefault)
	if err != nil {
		return err
	}
	src, err := huntSource(c, log)
	if err != nil {
		return err
	}

	db := c.String("database")
	eng, err := startDevEngine(ctx, c, out, db, log)
	if err != nil {
		return err
	}
	defer eng.close()
	srv, conn, consistency, gen := eng.srv, eng.conn, eng.consistency, eng.gen

	policy, err := huntPolicy(c)
	if err != nil {
		return err
	}
	owner := "dev"
	if h, err := os.Hostname(); err == nil {
		owner = h + "-dev"
	}
	token, err := statusToken(c, c.String("listen"))
	if err != nil {
		return err
	}
	links, err := readStatusLinks(c)
	if err != nil {
		return err
	}
	printer := &runPrinter{w: out, store: store.New(conn, db), show: c.Int("show")}
	w, err := buildWorker(ctx, workerConfig{
		conn: conn, database: db, huntSet: huntSetName, consistency: string(consistency.Mode), owner: owner, service: "hunt-runner-dev",
		src: src, policy: policy, reload: c.Duration("reload-interval"), listen: c.String("listen"),
		statusToken: token, links: links, perHunt: c.Int("metrics-per-hunt"),
		loop:  runner.Options{Tick: c.Duration("tick"), Concurrency: c.Int("concurrency")},
		onRun: printer.print,
	}, log)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	defer w.close()
	loader := w.loader
	set, _, err := loader.Load(ctx)
	if err != nil {
		return cli.Exit(fmt.Sprintf("load hunts from %s: %v", src, err), exitError)
	}
	select { // the first load is announced on Changes too; it is materialised just below
	case <-loader.Changes():
	default:
	}
	for _, p := range set.Problems {
		fmt.Fprintf(out, "hunt file problem: %s\n", p.Error())
	}
	pub := &devPublisher{out: out, store: store.New(conn, db).Schedule(), set: huntSetName}
	pub.materialise(ctx, set)
	printHunts(out, set)

	notifiers, err := devNotify(c, out, conn, db, owner, loader.Current, w.tel.Meter, log)
	if err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	w.start(g, gctx)
	g.Go(func() error { return gen.Start(gctx) })
	for _, start := range notifiers {
		g.Go(func() error { return start(gctx) })
	}
	g.Go(func() error { return pub.follow(gctx, loader) })
	if addr := c.String("shim-listen"); addr != "" {
		sh, err := shim.New(shim.Options{Conn: conn, Database: db, Listen: addr, Logger: log})
		if err != nil {
			return cli.Exit(fmt.Sprintf("shim: %v", err), exitError)
		}
		g.Go(func() error { return sh.Start(gctx) })
		fmt.Fprintf(out, "KEDA shim at http://%s/keda/hunt-backlog\n", addr)
	}
	fmt.Fprintf(out, "status page at http://%s/ and runner metrics at /metrics\n", w.server.BoundAddr())
	printFindingsHowTo(out, srv.URL(), db, selfCommand())
	fmt.Fprint(out, "Ctrl-C to stop\n\n")
	err = g.Wait()
	fmt.Fprintln(out, "\nstopped")
	if err != nil && !errors.Is(err, context.Canceled) {
		return cli.Exit(err.Error(), exitError)
	}
	return nil
}

// printFindingsHowTo says where findings land and gives commands to paste as they are.
func printFindingsHowTo(w io.Writer, url, db, self string) {
	q := strings.ReplaceAll(store.RecentFindingsSQL(db), "'", `'\''`)
	all, committed := store.FindingsTables(db)
	fmt.Fprintf(w, "findings are in %s; %s shows those of committed runs. Query them with:\n", all, committed)
	fmt.Fprintf(w, "  curl -sS '%s/' --data-binary '%s FORMAT PrettyCompact'\n", strings.TrimSuffix(url, "/"), q)
	fmt.Fprintf(w, "  %s status --clickhouse-url %s --database %s\n", self, url, db)
}

// selfCommand is how to run this binary again from the same shell: its path, or `go run` when
// it was built into a temporary directory by go run.
func selfCommand() string {
	if self := os.Args[0]; self != "" && !strings.Contains(self, "go-build") {
		return self
	}
	return "go run ./cmd/hunt-runner"
}

// devScheduleRows are the hunt_schedule rows of a set: enabled hunts only, so materialise
// tombstones disabled and removed ones.
func devScheduleRows(s *configsrc.Set) []schedule.Row {
	rows := make([]schedule.Row, 0, len(s.Hunts))
	for _, h := range s.Hunts {
		if !h.Enabled {
			continue
		}
		rows = append(rows, schedule.Row{HuntID: h.ID, IntervalSeconds: uint32(h.Interval / time.Second),
			PhaseOffset: uint32(h.Offset / time.Second), Enabled: true, ConfigHash: h.Hash})
	}
	return rows
}

func printHunts(w io.Writer, s *configsrc.Set) {
	fmt.Fprintf(w, "%d hunts from %s:\n", len(s.Hunts), s.Source)
	for _, h := range s.Hunts {
		state := "every " + schedule.FormatInterval(h.Interval)
		if !h.Enabled {
			state = "disabled"
		}
		fmt.Fprintf(w, "  %-22s %-14s %s\n", h.ID, state, h.Description)
	}
	fmt.Fprintln(w)
}

// runPrinter prints each finished run and a few of its findings.
type runPrinter struct {
	w     io.Writer
	store *store.Store
	show  int
	mu    sync.Mutex
}

func (p *runPrinter) print(rep runner.RunReport) {
	var b strings.Builder
	clock := func(t time.Time) string { return t.UTC().Format("15:04:05") }
	fire := clock(time.Unix(rep.Fire, 0))
	mark := map[hunt.RunStatus]string{hunt.RunSucceeded: "✓", hunt.RunFailed: "✗", hunt.RunLost: "↯", hunt.RunCancelled: "…"}[rep.Status]
	fmt.Fprintf(&b, "%s %s %-20s fire %s  window %s–%s", clock(time.Now()), mark, rep.HuntID, fire,
		clock(rep.WindowStart), clock(rep.WindowEnd))
	if rep.Requested {
		b.WriteString("  (run-now request)")
	}
	switch rep.Status {
	case hunt.RunSucceeded:
		fmt.Fprintf(&b, "  %d finding(s)  %v\n", rep.Rows, rep.Duration.Round(time.Millisecond))
		if rep.GapEnd > rep.GapStart {
			fmt.Fprintf(&b, "    gap recorded: %s–%s was skipped (longer than max_catchup)\n",
				time.Unix(rep.GapStart, 0).UTC().Format(time.RFC3339), time.Unix(rep.GapEnd, 0).UTC().Format(time.RFC3339))
		}
		if rep.Rows > 0 && p.show > 0 {
			for _, f := range p.findings(rep) {
				if len(f) > 150 {
					f = f[:147] + "..."
				}
				fmt.Fprintf(&b, "    %s\n", f)
			}
		}
	default:
		fmt.Fprintf(&b, "  %s: %v\n", rep.Status, rep.Err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	io.WriteString(p.w, b.String())
}

func (p *runPrinter) findings(rep runner.RunReport) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := p.store.CommittedFindingsOfRun(ctx, rep.HuntID, rep.RunID, p.show)
	if err != nil {
		return []string{"(could not read findings: " + err.Error() + ")"}
	}
	if rep.Rows > uint64(len(out)) {
		out = append(out, fmt.Sprintf("… and %d more", rep.Rows-uint64(len(out))))
	}
	return out
}
