# hunt-runner — `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   ?= bin/hunt-runner
CHDB_VERSION ?= 26.5.3
CHDB_DIR     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/chdb/$(CHDB_VERSION)
export CHDB_LIB_PATH ?= $(CHDB_DIR)/libchdb.so
# Stamped into the binary (hunt-runner --version, run's start-up log); empty falls back to the
# module build info.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION)
# Nested modules with heavy dependencies (Helm, Kubernetes, KEDA, Alertmanager) kept out of the main go.mod.
NESTED := $(wildcard charts/hunt-runner/test/go.mod notify/alertmanagertest/go.mod)

.PHONY: help build test test-race test-short test-cluster lint dev bench clean chdb image

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/hunt-runner as released: static, no cgo, no embedded engine (`dev` needs `make dev`)
	CGO_ENABLED=0 $(GO) build -tags nochdb -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/hunt-runner

chdb: $(CHDB_LIB_PATH) ## fetch the chDB library used by tests and `make dev` (cached)
$(CHDB_LIB_PATH):
	@echo "fetching the chDB library $(CHDB_VERSION) (an npm package of about 150 MB, once) into $(CHDB_DIR)…"
	@mkdir -p $(CHDB_DIR)
	cd $(CHDB_DIR) && npm pack --silent "@chdb/lib-linux-x64-gnu@$(CHDB_VERSION)" >/dev/null && \
	  tar -xzf "chdb-lib-linux-x64-gnu-$(CHDB_VERSION).tgz" --strip-components=1 package/libchdb.so && \
	  rm -f ./*.tgz

test: chdb ## run every test on the embedded ClickHouse engine, with the race detector
	$(GO) test -race -timeout 25m ./...
	@for m in $(NESTED); do d=$$(dirname $$m); echo "== $$d"; (cd $$d && $(GO) test -timeout 15m ./...) || exit 1; done

test-race: test ## alias of test (which already runs with -race)

test-short: chdb ## fast tests without the race detector
	$(GO) test -short ./...

test-cluster: ## engine tests on Keeper + 2 replicas behind a load balancer (deploy/compose; Docker, skips without it)
	@deploy/compose/test-cluster.sh

lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l . | grep -v '^charts/hunt-runner/test/' || true); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

DEV_BIN ?= bin/hunt-runner-dev

dev: chdb ## run everything on the embedded engine: schema, sample data, runner, shim
	@echo "building $(DEV_BIN) with the embedded engine: the first build compiles every dependency and takes a few minutes, later ones seconds…"
	@set -o pipefail; $(GO) build -v -ldflags "$(LDFLAGS)" -o $(DEV_BIN) ./cmd/hunt-runner 2>&1 | \
	  awk '/^[A-Za-z0-9_.\/~-]+$$/ { n++; printf "\r  %d packages compiled", n; fflush(); next } { print } END { if (n) print "" }'
	@echo "starting $(DEV_BIN) dev (Ctrl-C stops it)…"
	@$(DEV_BIN) dev

bench: chdb ## run the benchmarks (figures are ratios measured side by side)
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

image: ## build the container image with docker or buildah
	@if command -v docker >/dev/null; then docker build --build-arg VERSION=$(VERSION) -t hunt-runner:dev .; \
	  else buildah bud --build-arg VERSION=$(VERSION) -t hunt-runner:dev .; fi

clean: ## remove build output
	rm -rf bin
