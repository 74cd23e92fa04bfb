#!/usr/bin/env bash
# make test-cluster: the engine tests on a real replicated ClickHouse. Brings up deploy/compose's
# Keeper, two replicas and the lb load balancer (haproxy, round robin per TCP connection, as a
# Kubernetes Service would), applies the replicated DDL on both replicas, checks that
# --consistency resolves to quorum through lb and that an impossible configuration is refused,
# then runs the engine tests with HUNT_RUNNER_TEST_CLICKHOUSE pointing at lb. Tears it all down
# afterwards. Without a Docker engine (or compose) it says so and exits 0.
#
#   TEST_PACKAGES   packages to test (default below)
#   KEEP=1          leave the cluster running (docker compose -p hunt-runner-test ... down -v)
set -euo pipefail
cd "$(dirname "$0")/../.."

skip() { echo "test-cluster: SKIPPED: $*"; exit 0; }
command -v docker >/dev/null 2>&1 || skip "no docker client on PATH"
docker info >/dev/null 2>&1 || skip "no Docker engine (docker info failed); run it where Docker runs"
if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
	compose=(docker-compose)
else
	skip "no docker compose plugin"
fi
compose+=(-p hunt-runner-test -f deploy/compose/compose.yaml)

# Fresh secrets for this run only; they live in the environment, never on a command line.
gen() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
HUNT_ADMIN_PASSWORD=$(gen) HUNT_RUNNER_PASSWORD=$(gen) HUNT_SCALER_PASSWORD=$(gen)
export HUNT_ADMIN_PASSWORD HUNT_RUNNER_PASSWORD HUNT_SCALER_PASSWORD

cleanup() {
	if [ "${KEEP:-}" = 1 ]; then
		echo "test-cluster: left running (KEEP=1); stop with: ${compose[*]} down -v"
	else
		"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT

echo "== starting keeper, ch1, ch2 and lb"
"${compose[@]}" up -d --wait keeper ch1 ch2 lb

hr() { go run ./cmd/hunt-runner "$@"; }
export HUNT_RUNNER_CLICKHOUSE_PASSWORD=$HUNT_ADMIN_PASSWORD HUNT_RUNNER_CLICKHOUSE_USER=default
export HUNT_RUNNER_DATABASE=hunt_runner

echo "== replicated DDL on both replicas"
HUNT_RUNNER_CLICKHOUSE_URL=clickhouse://localhost:19000 hr schema --topology replicated
HUNT_RUNNER_CLICKHOUSE_URL=clickhouse://localhost:19001 hr schema --topology replicated

echo "== --consistency auto through lb resolves to quorum"
out=$(HUNT_RUNNER_CLICKHOUSE_URL=clickhouse://localhost:19100 HUNT_RUNNER_LOG_FORMAT=json \
	hr --log-level debug status 2>&1) || { echo "$out"; exit 1; }
grep -q '"consistency":"quorum"' <<<"$out" || { echo "$out"; echo "test-cluster: auto did not pick quorum"; exit 1; }

echo "== replicated tables, two hosts, no quorum: refused"
if out=$(HUNT_RUNNER_CLICKHOUSE_URL=clickhouse://localhost:19000,localhost:19001 \
	hr status --consistency sequential 2>&1); then
	echo "$out"; echo "test-cluster: sequential with two hosts on replicated tables was accepted"; exit 1
fi
grep -q -- '--consistency quorum' <<<"$out" || { echo "$out"; exit 1; }

echo "== engine tests through lb"
export HUNT_RUNNER_TEST_CLICKHOUSE="clickhouse://default:${HUNT_ADMIN_PASSWORD}@localhost:19100/?insert_quorum=auto&insert_quorum_parallel=0&select_sequential_consistency=1"
export HUNT_RUNNER_TEST_CLUSTER=hunt
unset HUNT_RUNNER_CLICKHOUSE_PASSWORD HUNT_RUNNER_CLICKHOUSE_USER HUNT_RUNNER_DATABASE
# shellcheck disable=SC2086
go test -count=1 -timeout 30m ${TEST_PACKAGES:-./chstore/... ./lease/... ./store/... ./schedule/... ./runner/... ./cmd/hunt-runner/... ./e2e/...}
