package serve

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

// TelemetryOptions choose what a process exports. The zero value (apart from Service) is a
// plain Prometheus registry with nothing else: what the shim's tests and embedders get.
type TelemetryOptions struct {
	Service string // service.name of the resource
	Scope   string // instrumentation scope of Meter and Tracer
	// Runtime adds the Go runtime and process collectors to the registry.
	Runtime bool
	// TargetInfo keeps the exporter's target_info series (the resource as a metric).
	TargetInfo bool
	// SeriesLimit is the most series one instrument may have before the SDK folds the rest
	// into its otel_metric_overflow series (see runner.MetricsSeriesLimit); 0 keeps the
	// SDK's default (2,000, or OTEL_GO_X_CARDINALITY_LIMIT).
	SeriesLimit int
	// OTLP pushes metrics and exports traces over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT
	// (or the metrics/traces specific variant) is set, configured by the standard OTEL_*
	// variables. Without it the environment is ignored.
	OTLP bool
}

// Telemetry is a process's OpenTelemetry set-up: metrics always go to a Prometheus registry
// served by MetricsHandler, and to OTLP as TelemetryOptions.OTLP and the environment say.
type Telemetry struct {
	MeterProvider  metric.MeterProvider
	Meter          metric.Meter // MeterProvider's meter for the options' Scope
	Tracer         trace.Tracer // a no-op tracer unless traces are exported
	MetricsHandler http.Handler
	OTLP           bool // something is exported over OTLP
	shutdown       []func(context.Context) error
}

// NewTelemetry sets up metrics and traces as o asks.
func NewTelemetry(ctx context.Context, o TelemetryOptions) (*Telemetry, error) {
	reg := promclient.NewRegistry()
	if o.Runtime {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	popts := []otelprom.Option{otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo()}
	if !o.TargetInfo {
		popts = append(popts, otelprom.WithoutTargetInfo())
	}
	prom, err := otelprom.New(popts...)
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(o.Service))
	readers := []sdkmetric.Option{sdkmetric.WithReader(prom), sdkmetric.WithResource(res)}
	if o.SeriesLimit > 0 {
		readers = append(readers, sdkmetric.WithCardinalityLimit(o.SeriesLimit))
	}
	t := &Telemetry{MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}

	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	otlpMetrics := o.OTLP && (endpoint || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "")
	otlpTraces := o.OTLP && (endpoint || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")
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
	t.MeterProvider = mp
	t.Meter = mp.Meter(o.Scope)

	if otlpTraces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.shutdown = append(t.shutdown, tp.Shutdown)
		t.Tracer = tp.Tracer(o.Scope)
		t.OTLP = true
	} else {
		t.Tracer = noop.NewTracerProvider().Tracer(o.Scope)
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
