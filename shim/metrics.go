package shim

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hunt-runner/hunt-runner/internal/serve"
)

const scope = "github.com/hunt-runner/hunt-runner/shim"

// Metrics are the shim's instruments (OpenTelemetry, exported for Prometheus):
//
//	hunt_shim_requests_total{query,outcome}        outcome: fresh, held, bad_request, unknown_query, unauthorized
//	hunt_shim_held_total{query,reason}             answers served held, by why
//	hunt_shim_held_age_seconds{query,cold}         age of the oldest value held (cold: since holding started)
//	hunt_shim_held_stale{query}                    1 while a held value of the query is older than its max_stale
//
// No label carries a request's parameter values: they come from whoever sends requests.
//
//	hunt_shim_query_duration_seconds{query,ok}     ClickHouse round trips
//	hunt_shim_query_up{query}                      1 when the query's newest round trip succeeded, else 0
type Metrics struct {
	handler  http.Handler
	meter    metric.Meter
	requests metric.Int64Counter
	heldCtr  metric.Int64Counter
	duration metric.Float64Histogram

	mu sync.Mutex
	up map[string]bool // query → newest round trip succeeded
}

// NewMetrics creates the instruments on mp. With mp nil it builds a MeterProvider on a private
// Prometheus registry, and Handler serves that registry; otherwise Handler is nil and the
// caller exposes mp its own way.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	m := &Metrics{up: map[string]bool{}}
	if mp == nil {
		// Prometheus only: the shim's instruments are scraped next to KEDA's, never pushed.
		tel, err := serve.NewTelemetry(context.Background(), serve.TelemetryOptions{Service: "hunt-runner-shim", Scope: scope})
		if err != nil {
			return nil, fmt.Errorf("shim: %w", err)
		}
		mp, m.handler = tel.MeterProvider, tel.MetricsHandler
	}
	m.meter = mp.Meter(scope)
	var err error
	if m.requests, err = m.meter.Int64Counter("hunt_shim_requests",
		metric.WithDescription("KEDA shim requests by query and outcome")); err != nil {
		return nil, err
	}
	if m.heldCtr, err = m.meter.Int64Counter("hunt_shim_held",
		metric.WithDescription("answers served from the last good value (or cold_hold) because ClickHouse failed, by reason")); err != nil {
		return nil, err
	}
	if m.duration, err = m.meter.Float64Histogram("hunt_shim_query_duration",
		metric.WithUnit("s"), metric.WithDescription("ClickHouse round trips of the shim's queries"),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5)); err != nil {
		return nil, err
	}
	up, err := m.meter.Int64ObservableGauge("hunt_shim_query_up",
		metric.WithDescription("1 when the query's newest ClickHouse round trip succeeded, 0 while it fails (answers are then held)"))
	if err != nil {
		return nil, err
	}
	if _, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		for q, ok := range m.up {
			v := int64(0)
			if ok {
				v = 1
			}
			o.ObserveInt64(up, v, metric.WithAttributes(attribute.String("query", q)))
		}
		return nil
	}, up); err != nil {
		return nil, err
	}
	return m, nil
}

// Handler serves /metrics, or is nil when the MeterProvider came from the caller.
func (m *Metrics) Handler() http.Handler { return m.handler }

// observeHeld registers the gauges that report each value being held.
func (m *Metrics) observeHeld(c *cache, now func() time.Time) error {
	age, err := m.meter.Float64ObservableGauge("hunt_shim_held_age",
		metric.WithUnit("s"), metric.WithDescription("age of the oldest value the shim is holding for the query; for a cold hold, time since holding started"))
	if err != nil {
		return err
	}
	stale, err := m.meter.Int64ObservableGauge("hunt_shim_held_stale",
		metric.WithDescription("1 while a value held for the query is older than its max_stale"))
	if err != nil {
		return err
	}
	_, err = m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		staleBy := map[string]bool{}
		for _, h := range c.held(now()) {
			o.ObserveFloat64(age, h.age.Seconds(), metric.WithAttributes(
				attribute.String("query", h.query), attribute.Bool("cold", h.cold)))
			staleBy[h.query] = staleBy[h.query] || h.stale
		}
		for q, st := range staleBy {
			var v int64
			if st {
				v = 1
			}
			o.ObserveInt64(stale, v, metric.WithAttributes(attribute.String("query", q)))
		}
		return nil
	}, age, stale)
	return err
}

func (m *Metrics) request(ctx context.Context, query, outcome string) {
	m.requests.Add(ctx, 1, metric.WithAttributes(attribute.String("query", query), attribute.String("outcome", outcome)))
}

func (m *Metrics) held(ctx context.Context, query, reason string) {
	m.heldCtr.Add(ctx, 1, metric.WithAttributes(attribute.String("query", query), attribute.String("reason", reason)))
}

func (m *Metrics) queryDuration(ctx context.Context, query string, d time.Duration, ok bool) {
	m.duration.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("query", query), attribute.Bool("ok", ok)))
	m.mu.Lock()
	m.up[query] = ok
	m.mu.Unlock()
}
