package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"
	"go.opentelemetry.io/otel/metric"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/notify"
)

// notifyConfigFlag is shared by run, dev and validate.
var notifyConfigFlag = &cli.StringFlag{Name: "notify-config", EnvVars: envFor("notify-config"),
	Usage: "notification sinks, routes and mute time intervals (YAML, docs/findings.md); secrets are read from the files it names"}

// loadNotifyConfig parses --notify-config; nil when the flag is not set.
func loadNotifyConfig(c *cli.Context) (*notify.Config, error) {
	path := c.String("notify-config")
	if path == "" {
		return nil, nil
	}
	cfg, err := notify.LoadConfig(path)
	if err != nil {
		return nil, cli.Exit(err.Error(), exitUsage)
	}
	return cfg, nil
}

// newNotifyDispatcher builds the Dispatcher of run and dev from the loader's current set; nil
// (and no error) without a notify config. Its metrics go to the same meter as the runner's.
func newNotifyDispatcher(cfg *notify.Config, conn driver.Conn, database, owner string, current func() *configsrc.Set,
	meter metric.Meter, log *slog.Logger, poll time.Duration) (*notify.Dispatcher, error) {
	if cfg == nil {
		return nil, nil
	}
	m, err := notify.NewMetrics(meter)
	if err != nil {
		return nil, err
	}
	return notify.New(conn, loadedSet(current), notify.Options{Config: cfg, Database: database, Owner: owner,
		Logger: log, Metrics: m, Poll: poll})
}

// notifyProblems is validate's check of --notify-config: the file's own problems, and sinks a
// hunt's notify: names that the file does not define (at the hunt's id line).
func notifyProblems(c *cli.Context, set *configsrc.Set) []configsrc.Problem {
	path := c.String("notify-config")
	if path == "" {
		return nil
	}
	cfg, err := notify.LoadConfig(path)
	var ces notify.ConfigErrors
	switch {
	case errors.As(err, &ces):
		out := make([]configsrc.Problem, len(ces))
		for i, e := range ces {
			out[i] = configsrc.Problem{File: e.File, Line: e.Line, Column: e.Column, Message: e.Message}
		}
		return out
	case err != nil:
		return []configsrc.Problem{{File: path, Line: 1, Column: 1, Message: err.Error()}}
	}
	var out []configsrc.Problem
	for _, h := range set.Enabled() {
		for _, name := range cfg.UnknownSinks(h) {
			out = append(out, configsrc.Problem{File: h.File, Line: h.Line, Column: 1, HuntID: h.ID,
				Message: fmt.Sprintf("notify: sink %q is not defined in %s", name, path)})
		}
	}
	return out
}

// keepPath leaves the notify config's own path alone when validate maps hunt files to paths.
func keepPath(display func(string) string, notifyPath string) func(string) string {
	return func(p string) string {
		if notifyPath != "" && p == notifyPath {
			return p
		}
		return display(p)
	}
}

func notifyCommand() *cli.Command {
	since := durationFlag(&cli.DurationFlag{Name: "since", Value: 24 * time.Hour, Usage: "fires at or after now − since (30m, 6h, 7d)"})
	return &cli.Command{
		Name:  "notify",
		Usage: "notification deliveries: status (pending and dead letters) and retry (re-queue dead letters)",
		Subcommands: []*cli.Command{
			{
				Name:  "status",
				Usage: "delivery counts and every delivery not delivered (pending, delivering, retry, dead, muted)",
				Flags: concat(clickhouseFlags(), []cli.Flag{since, &cli.BoolFlag{Name: "json", Usage: "print JSON"}}),
				Action: func(c *cli.Context) error {
					conn, o, err := openClickHouse(c, newLogger(c))
					if err != nil {
						return err
					}
					defer conn.Close()
					rep, err := notify.Status(c.Context, conn, o.Database, time.Now().Add(-c.Duration("since")))
					if err != nil {
						return cli.Exit(err.Error(), exitError)
					}
					if c.Bool("json") {
						enc := json.NewEncoder(c.App.Writer)
						enc.SetIndent("", "  ")
						return enc.Encode(rep)
					}
					printNotifyStatus(c.App.Writer, rep)
					return nil
				},
			},
			{
				Name:  "retry",
				Usage: "re-queue dead letters (same idempotency key; the retry horizon starts again)",
				Description: "Re-queues the dead letters matching every given filter. With no filter, --all is required.\n" +
					"Example: hunt-runner notify retry --sink soc --since 6h",
				Flags: concat(clickhouseFlags(), []cli.Flag{since,
					&cli.StringFlag{Name: "hunt", Usage: "only this hunt"},
					&cli.StringFlag{Name: "sink", Usage: "only this sink"},
					&cli.TimestampFlag{Name: "fire", Layout: time.RFC3339, Usage: "only this fire (RFC 3339)"},
					&cli.BoolFlag{Name: "all", Usage: "every dead letter since --since"},
				}),
				Action: notifyRetryAction,
			},
		},
	}
}

func notifyRetryAction(c *cli.Context) error {
	f := notify.RetryFilter{HuntID: c.String("hunt"), Sink: c.String("sink"), Since: time.Now().Add(-c.Duration("since"))}
	if ts := c.Timestamp("fire"); ts != nil {
		f.Fire = *ts
		if f.Since.After(f.Fire) {
			f.Since = f.Fire
		}
	}
	if f.HuntID == "" && f.Sink == "" && f.Fire.IsZero() && !c.Bool("all") {
		return cli.Exit("notify retry: name --hunt, --sink or --fire, or pass --all", exitUsage)
	}
	conn, o, err := openClickHouse(c, newLogger(c))
	if err != nil {
		return err
	}
	defer conn.Close()
	host, _ := os.Hostname()
	n, err := notify.Retry(c.Context, conn, o.Database, "cli:"+host, f)
	if err != nil {
		return cli.Exit(err.Error(), exitError)
	}
	fmt.Fprintf(c.App.Writer, "re-queued %s\n", nounCount(n, "dead letter"))
	return nil
}

func printNotifyStatus(w io.Writer, rep notify.StatusReport) {
	fmt.Fprintf(w, "now %s: %d pending, %d delivered, %d dead, %d suppressed, %d muted\n", rep.Now.UTC().Format(time.RFC3339),
		rep.Counts.Pending, rep.Counts.Delivered, rep.Counts.Dead, rep.Counts.Suppressed, rep.Counts.Muted)
	if len(rep.Deliveries) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HUNT\tFIRE\tSINK\tSTATUS\tATTEMPTS\tNEXT\tERROR")
	for _, d := range rep.Deliveries {
		next := "-"
		if d.Status == notify.StatusRetry || d.Status == notify.StatusPending {
			next = d.NextAttempt.UTC().Format(time.RFC3339)
		}
		e := strings.ReplaceAll(d.LastError, "\n", " ")
		if len(e) > 80 {
			e = e[:77] + "..."
		}
		if e == "" {
			e = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.HuntID, d.Fire.UTC().Format(time.RFC3339), d.Sink, d.Status, d.Attempts, next, e)
	}
	tw.Flush()
}

// devNotify sets up notifications for `dev`: a local receiver that prints what it gets, and a
// Dispatcher with --notify-config, or else with one webhook sink ("dev") pointed at the
// receiver. It returns what the errgroup runs.
func devNotify(c *cli.Context, out io.Writer, conn driver.Conn, database, owner string, current func() *configsrc.Set,
	meter metric.Meter, log *slog.Logger) ([]func(context.Context) error, error) {
	ln, err := net.Listen("tcp", c.String("receiver-listen"))
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("notification receiver: %v", err), exitError)
	}
	recvURL := "http://" + ln.Addr().String() + "/"
	cfg, err := loadNotifyConfig(c)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if cfg == nil {
		cfg = &notify.Config{File: "(dev)", MaxFindings: notify.NotifyFindingsDefault, Horizon: notify.HorizonDefault,
			// A lookback, because dev's first fires can commit before the Dispatcher's first
			// poll has recorded the sink as enabled.
			Sinks: []notify.Sink{{Name: "dev", Type: notify.TypeWebhook, URLs: []string{recvURL}, Timeout: notify.SinkTimeoutDefault,
				Lookback: time.Hour}},
			Routes: []notify.Route{{Sinks: []string{"dev"}}}}
	}
	disp, err := newNotifyDispatcher(cfg, conn, database, owner, current, meter, log, c.Duration("tick"))
	if err != nil {
		ln.Close()
		return nil, err
	}
	fmt.Fprintf(out, "notification receiver at %s (sinks: %s)\n", recvURL, sinkNames(cfg))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		printReceived(out, r)
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: 10 * time.Second}
	serve := func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	return []func(context.Context) error{disp.Start, serve}, nil
}

func sinkNames(cfg *notify.Config) string {
	names := make([]string, len(cfg.Sinks))
	for i, s := range cfg.Sinks {
		names[i] = s.Name + " (" + s.Type + ")"
	}
	return strings.Join(names, ", ")
}

// printReceived prints one notification as the dev receiver got it.
func printReceived(out io.Writer, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	clock := time.Now().UTC().Format("15:04:05")
	var p notify.WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil || p.HuntID == "" {
		fmt.Fprintf(out, "%s ✉ notification received at %s: %d bytes\n", clock, r.URL.Path, len(body))
		return
	}
	fmt.Fprintf(out, "%s ✉ notification: %s fire %s, %d finding(s) (%d suppressed), Idempotency-Key %s\n",
		clock, p.HuntID, p.Fire, p.FindingsTotal, p.Suppressed, r.Header.Get("Idempotency-Key"))
	for i, f := range p.Findings {
		if i == 2 {
			break
		}
		line := string(f)
		if len(line) > 150 {
			line = line[:147] + "..."
		}
		fmt.Fprintf(out, "    %s\n", line)
	}
}
