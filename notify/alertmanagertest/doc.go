// Package alertmanagertest checks notify against Alertmanager itself: the payload against
// Alertmanager's own api/v2 models, and the behaviour against a real Alertmanager built from
// its Go module (the version go.mod requires) and run as a process: one notification per fire
// within group_interval, generatorURL, description and the common label on every alert, and
// delivery through TLS client certificates, basic auth and a fan-out list with a replica down.
// The notify config's time_intervals are checked against Alertmanager's config loader (the
// same intervals, muting at the same moments, refusing the same malformed ranges).
// It is a module of its own so that Alertmanager's dependencies stay out of hunt-runner's
// go.mod (like charts/hunt-runner/test); `make test` runs it. The first run downloads
// Alertmanager's dependencies through the Go module proxy and builds it (about two minutes);
// later runs reuse Go's build cache.
package alertmanagertest
