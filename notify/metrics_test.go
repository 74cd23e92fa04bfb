package notify

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// The instruments record what the Dispatcher did: outcomes by sink, fire→delivery latency,
// and the pending and dead-letter gauges.
func TestMetricsRecordOutcomes(t *testing.T) {
	db := testDB(t)
	ok, bad := newReceiver(t), newReceiver(t)
	bad.fail, bad.failCode = 1<<30, 400
	cfg := &Config{Sinks: []Sink{{Name: "ok", Type: TypeWebhook, URLs: []string{ok.URL}, Timeout: 5 * time.Second, Lookback: testHistory},
		{Name: "bad", Type: TypeWebhook, URLs: []string{bad.URL}, Timeout: 5 * time.Second, Lookback: testHistory}},
		Routes: []Route{{Sinks: []string{"ok", "bad"}}}, MaxFindings: 20, Horizon: HorizonDefault}
	reader := sdkmetric.NewManualReader()
	m, err := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(db, cfg, "pod-a")
	o.Metrics = m
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute"}}, o)
	ctx := context.Background()
	// Before anything is sent, every outcome of every sink is there at 0: a dashboard has no
	// holes and the first dead letter is an increase Prometheus sees.
	if fresh := notificationCounts(t, reader); len(fresh) != len(cfg.Sinks)*len(outcomes) || fresh["bad/dead"] != 0 || fresh["ok/delivered"] != 0 {
		t.Errorf("a fresh dispatcher's notifications %v, want every sink/outcome at 0", fresh)
	}
	commit(t, db, "brute", baseFire(), `{"host":"a"}`)
	chtest.Eventually(t, 30*time.Second, "both deliveries final", func() bool {
		if _, err := d.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		ds := deliveryRows(t, db)
		return countStatus(ds, StatusDelivered) == 1 && countStatus(ds, StatusDead) == 1
	})
	d.polls = 0 // the gauges are refreshed on the next poll
	if _, err := d.Poll(ctx); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			got[mt.Name] = mt.Data
		}
	}
	outcomes := notificationCounts(t, reader)
	if outcomes["ok/delivered"] != 1 || outcomes["bad/dead"] != 1 {
		t.Errorf("notifications %v, want ok/delivered 1 and bad/dead 1", outcomes)
	}
	if h, ok := got["hunt_runner_notify_delivery_latency"].(metricdata.Histogram[float64]); !ok || len(h.DataPoints) != 1 || h.DataPoints[0].Count != 1 {
		t.Errorf("latency %+v", got["hunt_runner_notify_delivery_latency"])
	}
	gauge := func(name string) int64 {
		g, ok := got[name].(metricdata.Gauge[int64])
		if !ok || len(g.DataPoints) != 1 {
			t.Errorf("%s: %+v", name, got[name])
			return -1
		}
		return g.DataPoints[0].Value
	}
	if p, dl := gauge("hunt_runner_notify_pending"), gauge("hunt_runner_notify_dead"); p != 0 || dl != 1 {
		t.Errorf("pending %d, dead %d; want 0 and 1", p, dl)
	}
}

// notificationCounts collects hunt_runner_notifications by "sink/outcome".
func notificationCounts(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if sum, ok := mt.Data.(metricdata.Sum[int64]); ok && mt.Name == "hunt_runner_notifications" {
				for _, p := range sum.DataPoints {
					sink, _ := p.Attributes.Value("sink")
					o, _ := p.Attributes.Value("outcome")
					out[sink.AsString()+"/"+o.AsString()] += p.Value
				}
			}
		}
	}
	return out
}
