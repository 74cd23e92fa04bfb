package notify

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metrics are the Dispatcher's instruments; a nil *Metrics records nothing. Exported through
// the Prometheus exporter as:
//
//	hunt_runner_notifications_total{sink,outcome}     delivered|retry|dead|suppressed|muted|lost
//	hunt_runner_notify_delivery_latency_seconds{sink} fire → delivered
//	hunt_runner_notify_pending                        deliveries not yet final (newest rows, lookback)
//	hunt_runner_notify_dead                           dead letters (newest rows, lookback)
//	hunt_runner_notify_clickhouse_errors_total
type Metrics struct {
	notifications, chErrors metric.Int64Counter
	latencyH                metric.Float64Histogram

	mu   sync.Mutex
	last Counts
}

// NewMetrics creates the instruments on meter.
func NewMetrics(meter metric.Meter) (*Metrics, error) {
	m := &Metrics{}
	var err error
	if m.notifications, err = meter.Int64Counter("hunt_runner_notifications",
		metric.WithDescription("Notification attempts by sink and outcome.")); err != nil {
		return nil, err
	}
	if m.chErrors, err = meter.Int64Counter("hunt_runner_notify_clickhouse_errors",
		metric.WithDescription("ClickHouse errors of the notify Dispatcher.")); err != nil {
		return nil, err
	}
	if m.latencyH, err = meter.Float64Histogram("hunt_runner_notify_delivery_latency", metric.WithUnit("s"),
		metric.WithDescription("Time from a fire to its delivery."),
		metric.WithExplicitBucketBoundaries(1, 5, 15, 30, 60, 120, 300, 900, 3600, 4*3600, 24*3600)); err != nil {
		return nil, err
	}
	pending, err := meter.Int64ObservableGauge("hunt_runner_notify_pending",
		metric.WithDescription("Deliveries not yet delivered, dead or suppressed."))
	if err != nil {
		return nil, err
	}
	dead, err := meter.Int64ObservableGauge("hunt_runner_notify_dead",
		metric.WithDescription("Dead-lettered deliveries (re-queue with `hunt-runner notify retry`)."))
	if err != nil {
		return nil, err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.mu.Lock()
		c := m.last
		m.mu.Unlock()
		o.ObserveInt64(pending, int64(c.Pending))
		o.ObserveInt64(dead, int64(c.Dead))
		return nil
	}, pending, dead)
	return m, err
}

// outcomes are the values of hunt_runner_notifications_total's outcome label.
var outcomes = []string{StatusDelivered, StatusRetry, StatusDead, StatusSuppressed, StatusMuted, outcomeLost}

// initialise records 0 for every outcome of every sink and for the error counter, so that a
// fresh dashboard has no holes and increase() sees a sink's first dead letter (a series that
// appears at 1 has no increase to Prometheus).
func (m *Metrics) initialise(sinks []Sink) {
	if m == nil {
		return
	}
	for _, s := range sinks {
		for _, o := range outcomes {
			m.notifications.Add(context.Background(), 0, metric.WithAttributes(attribute.String("sink", s.Name), attribute.String("outcome", o)))
		}
	}
	m.chErrors.Add(context.Background(), 0)
}

func (m *Metrics) outcome(sink, outcome string) {
	if m == nil {
		return
	}
	m.notifications.Add(context.Background(), 1, metric.WithAttributes(attribute.String("sink", sink), attribute.String("outcome", outcome)))
}

func (m *Metrics) latency(sink string, d time.Duration) {
	if m == nil {
		return
	}
	m.latencyH.Record(context.Background(), d.Seconds(), metric.WithAttributes(attribute.String("sink", sink)))
}

func (m *Metrics) storeError() {
	if m == nil {
		return
	}
	m.chErrors.Add(context.Background(), 1)
}

func (m *Metrics) setCounts(c Counts) {
	m.mu.Lock()
	m.last = c
	m.mu.Unlock()
}
