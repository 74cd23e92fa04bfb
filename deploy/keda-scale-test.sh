#!/usr/bin/env bash
# keda-scale-test.sh — prove the autoscaling path on a real cluster:
#   backlog in ClickHouse → hunt-runner shim → KEDA metrics-api trigger → HPA → runner pods.
#
# NEEDS A CLUSTER: kubectl pointed at a Kubernetes cluster with KEDA >= 2.17 installed (2.20 for
# the trigger timeout the chart renders), helm 3, and a ClickHouse server reachable from the
# cluster. Nothing here runs in CI; the offline part of this proof is the scale-path simulation
# in charts/hunt-runner/test.
#
# What it does, every wait bounded:
#   1. creates a disposable namespace and coordination database (hunt_scale_<id>), installs the
#      chart with autoscaling on (min 1, max 3, 5 due fires per pod, 10 s polling), 30 slow hunts
#      (3 s each) and one runner slot per pod, and the schema hook creating the database;
#   2. waits for the first runs to drain (backlog 0);
#   3. raises the backlog with run-now requests (`hunt-runner trigger`) for every hunt;
#   4. waits for at least 2 ready runner pods (scale-out);
#   5. waits for the backlog to drain, then for the count to return to 1 (scale-in);
#   6. cleans up (trap): the Helm release, the namespace and, when CLICKHOUSE_HTTP_URL is set,
#      the disposable database.
#
# Verdicts: exit 0 PASS; exit 1 FAIL (with the reason); exit 3 UNPROVEN — the HPA read a backlog
# above its target and still did not scale, which points at the cluster, not at hunt-runner.
#
# Environment (secrets only ever from the environment, never from arguments):
#   CLICKHOUSE_URL            required; as seen from the cluster, e.g. clickhouse://ch.db:9000
#   CLICKHOUSE_USER           default "default"; needs CREATE DATABASE (the test database is disposable)
#   CLICKHOUSE_PASSWORD       required (may be empty only if the user has no password)
#   CLICKHOUSE_HTTP_URL       optional; e.g. http://localhost:8123 — lets cleanup drop the database
#   IMAGE_REPOSITORY, IMAGE_TAG   the hunt-runner image to test (default: the chart's)
#   CHART                     default: the chart next to this script
#   SCALE_OUT_TIMEOUT         seconds, default 300;  SCALE_IN_TIMEOUT default 420;
#   DRAIN_TIMEOUT             default 600;           POLL every 5 s
#   KEEP=1                    skip cleanup (debugging)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHART=${CHART:-$here/../charts/hunt-runner}
SCALE_OUT_TIMEOUT=${SCALE_OUT_TIMEOUT:-300}
SCALE_IN_TIMEOUT=${SCALE_IN_TIMEOUT:-420}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-600}
POLL=5
HUNTS=30

id="$$-${RANDOM}"
NS="hunt-scale-test-${id}"
RELEASE="scale"
DB="hunt_scale_${id//-/_}"
RUNNER="${RELEASE}-hunt-runner"
SHIM="${RUNNER}-shim"
workdir=$(mktemp -d)

say() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }

need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 is required on PATH"
}

cleanup() {
	local rc=$?
	if [[ "${KEEP:-0}" == 1 ]]; then
		say "KEEP=1: leaving namespace ${NS} and database ${DB}"
		exit "$rc"
	fi
	say "cleaning up"
	helm uninstall "$RELEASE" --namespace "$NS" --wait --timeout 120s >/dev/null 2>&1 || true
	kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
	if [[ -n "${CLICKHOUSE_HTTP_URL:-}" ]]; then
		# The credentials go to curl on stdin (--config -), never on its command line.
		if printf 'user = "%s:%s"\n' "${CLICKHOUSE_USER:-default}" "$CLICKHOUSE_PASSWORD" |
			curl --silent --show-error --fail --max-time 30 --config - \
				--data-binary "DROP DATABASE IF EXISTS \`${DB}\`" "${CLICKHOUSE_HTTP_URL%/}/" >/dev/null; then
			say "dropped database ${DB}"
		else
			say "could not drop database ${DB}; run: DROP DATABASE IF EXISTS \`${DB}\`"
		fi
	else
		say "left database ${DB} (set CLICKHOUSE_HTTP_URL to drop it): DROP DATABASE IF EXISTS \`${DB}\`"
	fi
	rm -rf "$workdir"
	exit "$rc"
}

# wait_for DESCRIPTION TIMEOUT COMMAND...: runs COMMAND every $POLL s until it succeeds or the
# timeout passes (returns 1).
wait_for() {
	local what=$1 timeout=$2
	shift 2
	local deadline=$((SECONDS + timeout))
	while ((SECONDS < deadline)); do
		if "$@"; then
			say "ok: ${what}"
			return 0
		fi
		sleep "$POLL"
	done
	say "timed out after ${timeout}s: ${what}"
	return 1
}

backlog() {
	kubectl get --raw "/api/v1/namespaces/${NS}/services/http:${SHIM}:8081/proxy/keda/hunt-backlog" 2>/dev/null |
		sed -n 's/.*"value":[[:space:]]*\([0-9.]*\).*/\1/p'
}

ready_runners() {
	local n
	n=$(kubectl -n "$NS" get deployment "$RUNNER" -o jsonpath='{.status.readyReplicas}' 2>/dev/null || true)
	printf '%s\n' "${n:-0}"
}

backlog_is_zero() { [[ "$(backlog)" == 0 ]]; }
backlog_at_least() { local b; b=$(backlog); [[ -n "$b" ]] && (($(printf '%.0f' "$b") >= $1)); }
runners_at_least() { (($(ready_runners) >= $1)); }
runners_at_most() { (($(ready_runners) <= $1)); }

# verdict explains a scale-out timeout from the HPA KEDA created: FAIL or UNPROVEN.
verdict() {
	local hpa="keda-hpa-${RUNNER}" current target desired
	current=$(kubectl -n "$NS" get hpa "$hpa" -o jsonpath='{.status.currentMetrics[0].external.current.averageValue}' 2>/dev/null || true)
	target=$(kubectl -n "$NS" get hpa "$hpa" -o jsonpath='{.spec.metrics[0].external.target.averageValue}' 2>/dev/null || true)
	desired=$(kubectl -n "$NS" get hpa "$hpa" -o jsonpath='{.status.desiredReplicas}' 2>/dev/null || true)
	say "HPA ${hpa}: metric ${current:-<none>} (target ${target:-<none>}), desiredReplicas ${desired:-<none>}, ready runners $(ready_runners)"
	kubectl -n "$NS" get scaledobject "$RUNNER" -o wide >&2 || true
	if [[ -z "$current" ]]; then
		die "the HPA never received the backlog metric (check the KEDA operator and metrics server, and the shim Service)"
	fi
	if [[ -n "$desired" ]] && ((desired >= 2)); then
		die "the HPA asked for ${desired} runners but fewer than 2 became Ready (image pull, resources, scheduling?)"
	fi
	local cur_milli tgt_milli
	cur_milli=$(to_milli "$current")
	tgt_milli=$(to_milli "$target")
	if ((cur_milli > tgt_milli * 11 / 10)); then
		say "UNPROVEN: the HPA read ${current} above its target ${target} and did not scale out"
		exit 3
	fi
	die "the HPA read ${current}, not above the target ${target}: the backlog did not reach KEDA"
}

# to_milli turns a Kubernetes quantity ("12", "1500m") into milli-units.
to_milli() {
	local q=${1:-0}
	if [[ "$q" == *m ]]; then
		printf '%d\n' "${q%m}"
	else
		printf '%d\n' "$((${q%%.*} * 1000))"
	fi
}

write_values() {
	local f=$workdir/values.yaml i
	{
		cat <<EOF
clickhouse:
  url: "${CLICKHOUSE_URL}"
  database: "${DB}"
  user: "${CLICKHOUSE_USER:-default}"
  existingSecret: clickhouse
schema:
  enabled: true
  topology: auto
shim:
  clickhouse:
    user: "${CLICKHOUSE_USER:-default}"
    existingSecret: clickhouse
  # The test identity reads the coordination tables directly; production uses the
  # hunt_backlog_v1 view and the scaler identity (hunt-runner provision --role scaler).
  queries: |
    queries:
      hunt-backlog: {builtin: due_count}
huntRunner:
  concurrency: 1
  autoscaling:
    enabled: true
    minReplicaCount: 1
    maxReplicaCount: 3
    targetBacklog: 5
    pollingInterval: 10
    cooldownPeriod: 30
    behavior:
      scaleDown:
        stabilizationWindowSeconds: 30
        policies: [{type: Pods, value: 1, periodSeconds: 15}]
hunts:
  configMap:
    files:
EOF
		for ((i = 1; i <= HUNTS; i++)); do
			cat <<EOF
      scale-${i}.yaml: |
        id: scale-test-${i}
        interval: 1d
        query: |
          SELECT number AS n, sleepEachRow(1) AS slept FROM numbers(3)
          WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}
EOF
		done
		if [[ -n "${IMAGE_REPOSITORY:-}" ]]; then
			printf 'image:\n  repository: "%s"\n  tag: "%s"\n' "$IMAGE_REPOSITORY" "${IMAGE_TAG:-}"
		fi
	} >"$f"
	printf '%s\n' "$f"
}

main() {
	need kubectl
	need helm
	[[ -n "${CLICKHOUSE_URL:-}" ]] || die "set CLICKHOUSE_URL (as reached from inside the cluster)"
	[[ -v CLICKHOUSE_PASSWORD ]] || die "set CLICKHOUSE_PASSWORD (empty if the user has none)"
	[[ -d "$CHART" ]] || die "no chart at $CHART"
	kubectl get crd scaledobjects.keda.sh >/dev/null 2>&1 || die "KEDA is not installed (no scaledobjects.keda.sh CRD)"

	trap cleanup EXIT
	say "namespace ${NS}, database ${DB}"
	kubectl create namespace "$NS" >/dev/null
	# The Secret is built on stdin: the password never appears in a process argument list.
	{
		printf 'apiVersion: v1\nkind: Secret\nmetadata: {name: clickhouse, namespace: "%s"}\ntype: Opaque\ndata:\n  password: ' "$NS"
		printf '%s' "$CLICKHOUSE_PASSWORD" | base64 | tr -d '\n'
		printf '\n'
	} | kubectl apply -f - >/dev/null

	local values
	values=$(write_values)
	say "installing the chart (schema hook, materialise hook, runner, shim, ScaledObject)"
	helm install "$RELEASE" "$CHART" --namespace "$NS" --values "$values" --wait --timeout 300s >/dev/null ||
		die "helm install failed (kubectl -n ${NS} get pods,jobs; kubectl -n ${NS} logs job/${RUNNER}-materialise)"

	wait_for "the shim answers" 120 backlog_at_least 0 || die "the shim never answered /keda/hunt-backlog"
	wait_for "first runs drained (backlog 0)" "$DRAIN_TIMEOUT" backlog_is_zero ||
		die "the backlog never drained after install: are the runners running hunts? (kubectl -n ${NS} logs deploy/${RUNNER})"
	wait_for "back to 1 runner before the test" "$SCALE_IN_TIMEOUT" runners_at_most 1 ||
		die "the runner count did not settle at 1 before the test"

	say "raising the backlog: a run-now request for each of ${HUNTS} hunts"
	local i
	for ((i = 1; i <= HUNTS; i++)); do
		kubectl -n "$NS" exec "deploy/${RUNNER}" -- hunt-runner trigger "scale-test-${i}" >/dev/null ||
			die "hunt-runner trigger scale-test-${i} failed"
	done
	wait_for "the shim reports the raised backlog" 60 backlog_at_least 10 ||
		die "the run-now requests did not show in /keda/hunt-backlog"

	if ! wait_for "scale-out to >= 2 ready runners" "$SCALE_OUT_TIMEOUT" runners_at_least 2; then
		verdict
	fi
	wait_for "backlog drained" "$DRAIN_TIMEOUT" backlog_is_zero || die "the raised backlog never drained"
	wait_for "scale-in to 1 runner" "$SCALE_IN_TIMEOUT" runners_at_most 1 ||
		die "still $(ready_runners) runners ${SCALE_IN_TIMEOUT}s after the backlog drained"
	say "PASS: woke to the backlog, scaled out, drained and scaled back in"
}

main "$@"
