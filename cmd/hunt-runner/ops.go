package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/internal/serve"
	"github.com/hunt-runner/hunt-runner/runner"
	"github.com/hunt-runner/hunt-runner/status"
	"github.com/hunt-runner/hunt-runner/watermark"
)

// The hunt-health gauges are read from ClickHouse when /metrics is scraped, at most once every
// healthTicks ticks and never more often than minHealthInterval: four queries, whatever the
// number of hunts, and none at all where nothing scrapes (dev, tests, a cluster without
// Prometheus). A scrape serves the values of the previous read.
const (
	healthTicks       = 6
	minHealthInterval = 10 * time.Second
)

// ops is what `run` and `dev` serve on --listen besides the loop: the probes, /metrics, the
// read-only status API and page, and the hunt-health gauges behind the alerts.
type ops struct {
	conn     driver.Conn
	database string
	loader   *configsrc.Loader
	metrics  *runner.Metrics
	tick     time.Duration // the runner's --tick
	log      *slog.Logger

	scraped chan struct{} // a /metrics scrape asks for fresh hunt health
}

// entries are the loaded hunts: the API and page show what this runner runs.
func (o *ops) entries() []status.Entry {
	if set := o.loader.Current(); set != nil {
		return entriesFromSet(set)
	}
	return nil
}

// server is the --listen server.
func (o *ops) server(addr string, tel *serve.Telemetry, ready func() error) *serve.Server {
	web := &status.Web{Conn: o.conn, Store: watermark.New(o.conn, o.database), Database: o.database,
		Entries: o.entries, Logger: o.log}
	o.scraped = make(chan struct{}, 1)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case o.scraped <- struct{}{}:
		default:
		}
		tel.MetricsHandler.ServeHTTP(w, r)
	})
	return &serve.Server{Addr: addr, Metrics: metrics, Ready: ready, Handler: web.Handler(), Logger: o.log}
}

// watchHealth feeds the hunt-health gauges, on scrapes, until ctx ends. A failed read keeps
// the previous values: the loop's own ClickHouse alerts report the outage. Call server first.
func (o *ops) watchHealth(ctx context.Context) error {
	store := watermark.New(o.conn, o.database)
	every := max(healthTicks*o.tick, minHealthInterval)
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.scraped:
		}
		if !last.IsZero() && time.Since(last) < every {
			continue
		}
		last = time.Now()
		if rep, err := status.Read(ctx, o.conn, store, o.database, o.entries()); err == nil {
			o.metrics.SetHuntHealth(healthOf(rep))
		} else if ctx.Err() == nil {
			o.log.Debug("hunt health not read", "error", err)
		}
	}
}

func healthOf(rep status.Report) map[string]runner.HuntHealth {
	out := make(map[string]runner.HuntHealth, len(rep.Hunts))
	for _, h := range rep.Hunts {
		if !h.Enabled {
			continue
		}
		hh := runner.HuntHealth{Interval: h.IntervalSeconds, Lag: h.BehindSeconds, ConsecutiveFailures: h.ConsecutiveFailures}
		if t, err := time.Parse(time.RFC3339, h.LastSuccess); err == nil {
			hh.LastSuccess = t
		}
		out[h.HuntID] = hh
	}
	return out
}

// countingSource counts the loader's reads of the hunt source and the problems each found.
type countingSource struct {
	configsrc.Source
	metrics *runner.Metrics
}

func (s countingSource) Load(ctx context.Context) (*configsrc.Set, error) {
	set, err := s.Source.Load(ctx)
	if err != nil || set == nil {
		s.metrics.Reloaded(ctx, runner.ReloadError, 0)
		return set, err
	}
	s.metrics.Reloaded(ctx, runner.ReloadOK, len(set.Problems))
	return set, nil
}

// runnerTelemetry is the telemetry of `run` and `dev`: Prometheus with the runtime
// collectors, and OTLP when the environment asks for it.
func runnerTelemetry(ctx context.Context, service string) (*serve.Telemetry, error) {
	return serve.NewTelemetry(ctx, serve.TelemetryOptions{Service: service, Scope: "github.com/hunt-runner/hunt-runner/runner",
		Runtime: true, TargetInfo: true, OTLP: true})
}
