package main

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/serve"
	"github.com/hunt-runner/hunt-runner/runner"
	"github.com/hunt-runner/hunt-runner/status"
	"github.com/hunt-runner/hunt-runner/store"
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
	token    string        // the status page's and API's bearer token
	links    statusLinks
	log      *slog.Logger

	scraped chan struct{} // a /metrics scrape asks for fresh hunt health
}

// entries are the loaded hunts: the API and page show what this runner runs.
func (o *ops) entries() []hunt.Hunt {
	if set := o.loader.Current(); set != nil {
		return set.Hunts
	}
	return nil
}

// server is the --listen server.
func (o *ops) server(addr string, tel *serve.Telemetry, ready func() error) *serve.Server {
	web := &status.Web{Store: store.New(o.conn, o.database), Database: o.database,
		Entries: o.entries, Files: o.huntFiles, Token: o.token, Logger: o.log,
		ClickHouseWebURL: o.links.clickhouseWeb, CommitURL: o.links.commit}
	o.metrics.ObserveHuntFiles(func() (runner.HuntFiles, bool) {
		f, ok := o.huntFiles()
		return runner.HuntFiles{Invalid: f.Invalid, Stale: len(f.Stale)}, ok
	})
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
	wm := store.New(o.conn, o.database)
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
		if rep, err := status.Read(ctx, wm, o.entries()); err == nil {
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
		hh := runner.HuntHealth{Interval: h.IntervalSeconds, Lag: h.BehindSeconds, ConsecutiveFailures: h.ConsecutiveFailures,
			NoData: h.State == status.StateNoData, OverBudget: h.State == status.StateOverBudget}
		if t, err := time.Parse(time.RFC3339, h.LastSuccess); err == nil {
			hh.LastSuccess = t
		}
		out[h.HuntID] = hh
	}
	return out
}

// huntFiles is the loaded set's file health: every problem (the server check's too) and the
// hunts kept at their last good definition. ok is false before the first load.
func (o *ops) huntFiles() (status.HuntFiles, bool) {
	set := o.loader.Current()
	if set == nil {
		return status.HuntFiles{}, false
	}
	return huntFilesOf(set), true
}

func huntFilesOf(set *configsrc.Set) status.HuntFiles {
	f := status.HuntFiles{Invalid: len(set.Problems), Problems: []status.FileProblem{}, Stale: []status.StaleHunt{}}
	for _, p := range set.Problems {
		f.Problems = append(f.Problems, status.FileProblem{File: p.File, Line: p.Line, Column: p.Column,
			Message: status.CleanError(p.Message), HuntID: p.HuntID})
	}
	for id, p := range set.Stale {
		p.Message = status.CleanError(p.Message)
		f.Stale = append(f.Stale, status.StaleHunt{HuntID: id, Problem: p.Error()})
	}
	sort.Slice(f.Stale, func(i, j int) bool { return f.Stale[i].HuntID < f.Stale[j].HuntID })
	return f
}

// countingSource counts the loader's reads of the hunt source.
type countingSource struct {
	configsrc.Source
	metrics *runner.Metrics
}

func (s countingSource) Load(ctx context.Context) (*configsrc.Set, error) {
	set, err := s.Source.Load(ctx)
	if err != nil || set == nil {
		s.metrics.Reloaded(ctx, runner.ReloadError)
		return set, err
	}
	s.metrics.Reloaded(ctx, runner.ReloadOK)
	return set, nil
}

// runnerTelemetry is the telemetry of `run` and `dev`: Prometheus with the runtime
// collectors, and OTLP when the environment asks for it; the SDK's series limit is set above
// what perHunt itemised hunts can produce, so no series is folded away.
func runnerTelemetry(ctx context.Context, service string, perHunt int) (*serve.Telemetry, error) {
	return serve.NewTelemetry(ctx, serve.TelemetryOptions{Service: service, Scope: "github.com/hunt-runner/hunt-runner/runner",
		Runtime: true, TargetInfo: true, OTLP: true, SeriesLimit: runner.MetricsSeriesLimit(perHunt)})
}
