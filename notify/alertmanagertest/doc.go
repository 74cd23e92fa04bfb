// Package alertmanagertest checks notify's Alertmanager payload against Alertmanager's own
// api/v2 models. It is a module of its own so that Alertmanager's dependencies stay out of
// hunt-runner's go.mod (like charts/hunt-runner/test); `make test` runs it.
package alertmanagertest
