// Package serve is the process plumbing the runner and the KEDA shim share: one OpenTelemetry
// set-up (Prometheus registry always, OTLP when the standard OTEL_* variables ask for it) and
// one HTTP server with the probe routes (/healthz, /readyz, /metrics) and graceful shutdown.
// Each binary mounts its own routes on top; nothing here knows about hunts.
package serve
