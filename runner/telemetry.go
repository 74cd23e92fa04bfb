package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Telemetry is the process's OpenTelemetry setup: metrics always go to a Prometheus registry
// served by MetricsHandler; when OTEL_EXPORTER_OTLP_ENDPOINT (or the metrics/traces specific
// variant) is set, metrics are also pushed and traces exported over OTLP/HTTP, configured by
// the standard OTEL_* environment variables.
type Telemetry struct {
	Meter          metric.Meter
	Tracer         trace.Tracer
	MetricsHandler http.Handler
	OTLP           bool
	shutdown       []func(context.Context) error
}

// NewTelemetry sets up metrics and traces for service.
func NewTelemetry(ctx context.Context, service string) (*Telemetry, error) {
	reg := promclient.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prom, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(service))
	readers := []sdkmetric.Option{sdkmetric.WithReader(prom), sdkmetric.WithResource(res)}
	t := &Telemetry{MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}

	otlpMetrics := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
	otlpTraces := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if otlpMetrics {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp metrics exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
		t.OTLP = true
	}
	mp := sdkmetric.NewMeterProvider(readers...)
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.Meter = mp.Meter("github.com/hunt-runner/hunt-runner/runner")

	if otlpTraces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.shutdown = append(t.shutdown, tp.Shutdown)
		t.Tracer = tp.Tracer("github.com/hunt-runner/hunt-runner/runner")
		t.OTLP = true
	} else {
		t.Tracer = noop.NewTracerProvider().Tracer("github.com/hunt-runner/hunt-runner/runner")
	}
	return t, nil
}

// Shutdown flushes and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
