# hunt-runner — `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   ?= bin/hunt-runner
CHDB_VERSION ?= 26.5.3
CHDB_DIR     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/chdb/$(CHDB_VERSION)
export CHDB_LIB_PATH ?= $(CHDB_DIR)/libchdb.so
# Nested modules with heavy dependencies (Helm, Kubernetes, KEDA) kept out of the main go.mod.
NESTED := $(wildcard charts/hunt-runner/test/go.mod)

.PHONY: help build test test-race test-short test-cluster lint dev bench clean chdb image

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/hunt-runner as released: static, no cgo, no embedded engine (`dev` needs `make dev`)
	CGO_ENABLED=0 $(GO) build -tags nochdb -trimpath -o $(BIN) ./cmd/hunt-runner

chdb: $(CHDB_LIB_PATH) ## fetch the chDB library used by tests and `make dev` (cached)
$(CHDB_LIB_PATH):
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

dev: chdb ## run everything on the embedded engine: schema, sample data, runner, shim
	$(GO) run ./cmd/hunt-runner dev

bench: chdb ## run the benchmarks (figures are ratios measured side by side)
	$(GO) test -run '^$$' -bench . -benchtime 3x ./...

image: ## build the container image with docker or buildah
	@if command -v docker >/dev/null; then docker build -t hunt-runner:dev .; else buildah bud -t hunt-runner:dev .; fi

clean: ## remove build output
	rm -rf bin
