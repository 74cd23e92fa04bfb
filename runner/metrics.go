package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// Metrics are the runner's OpenTelemetry instruments. A nil *Metrics records nothing, so tests
// and callers that do not export metrics pass nil.
//
// Exported through the Prometheus exporter as (names after unit and _total suffixing). No
// series carries hunt_id unless per-hunt series are opted into (WithPerHunt,
// metrics_perhunt.go); then the ones marked [hunt_id] also have a series per itemised hunt:
//
//	hunt_runner_runs_total{outcome,kind}              [hunt_id] succeeded|failed|lost|cancelled|unknown; scheduled|request|backfill
//	hunt_runner_run_duration_seconds{outcome,kind}    never per hunt (hunt_runs has every run's duration)
//	hunt_runner_rows_written_total                    [hunt_id] distinct findings of succeeded fires
//	hunt_runner_claims_total{outcome}                 won|lost|already_run|error
//	hunt_runner_cap_deferred_total{stage}             fires held back by --cap: plan (not claimed) | claim (won, released unrun)
//	hunt_runner_behind_seconds                        [hunt_id] the most behind planned hunt: now − its oldest owed fire
//	hunt_runner_gaps_total                            [hunt_id]
//	hunt_runner_findings_dropped_total                [hunt_id]
//	hunt_runner_findings_truncated_total              [hunt_id]
//	hunt_runner_findings_severity_fallback_total      [hunt_id] severity_from named no low|medium|high|critical
//	hunt_runner_overruns_total                        [hunt_id]
//	hunt_runner_tick_duration_seconds
//	hunt_runner_claim_insert_duration_seconds         the slowest claim insert of a tick, send → ack
//	hunt_runner_clickhouse_errors_total{stage}        snapshot|claim|renew|commit|release|heartbeat|ownership|published_hash|replica_delay
//	hunt_runner_loaded_set_info{hash}                 1 for the loaded set's hash
//	hunt_runner_published_set_mismatch                1 while the loaded hash ≠ materialise's
//	hunt_runner_replica_delay_seconds, hunt_runner_settle_seconds
//	hunt_runner_runs_in_flight, hunt_runner_runs_queued
//	hunt_runner_hunts_foreign{hunt_set}               loaded hunts not run: that other set publishes them
//	hunt_runner_hunt_foreign{hunt_id,hunt_set}        per itemised hunt only: 1 while not run for that reason
//	hunt_runner_hunts_loaded                          hunts of the loaded set
//	hunt_runner_metrics_hunts_omitted                 loaded hunts without series of their own (all by default)
//	hunt_runner_consistency_info{mode}                1 for the coordination connection's mode
//	and the ops pack's health gauges (metrics_health.go)
type Metrics struct {
	runs, rows, claimsC, gaps, overruns, chErrors, dropped, truncated, sevFallback, capDeferred metric.Int64Counter
	runDur, tickDur, claimInsert                                                                metric.Float64Histogram

	mu           sync.Mutex
	replicaDelay time.Duration
	settle       time.Duration
	consistency  string
	runners      []*Runner

	health  healthGauges // the ops pack's gauges, fed by SetHuntHealth and Reloaded
	perHunt perHunt      // which hunts have series of their own
}

// NewMetrics creates the instruments on meter. settle is exported as a gauge next to the
// observed replica delay so an alert can compare them. The meter's provider must allow
// MetricsSeriesLimit series per instrument for the options given.
func NewMetrics(meter metric.Meter, settle time.Duration, opts ...MetricsOption) (*Metrics, error) {
	m := &Metrics{settle: settle}
	for _, o := range opts {
		o(m)
	}
	if m.perHunt.max < 0 || m.perHunt.max > MetricsPerHuntMax {
		return nil, fmt.Errorf("per-hunt metrics for %d hunts: must be 0 to %d", m.perHunt.max, MetricsPerHuntMax)
	}
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = meter.Int64Counter(name, metric.WithDescription(desc))
		return c
	}
	m.runs = counter("hunt_runner_runs", "Finished hunt run attempts by outcome.")
	m.rows = counter("hunt_runner_rows_written", "Findings of succeeded runs (distinct rows of the fire).")
	m.claimsC = counter("hunt_runner_claims", "Claim attempts by outcome.")
	m.capDeferred = counter("hunt_runner_cap_deferred", "Due fires held back by the cap on runs in flight across the hunt set (--cap): "+
		"stage plan, not claimed; stage claim, won over the cap and released without running. They stay due.")
	m.gaps = counter("hunt_runner_gaps", "Ranges skipped because an outage exceeded max_catchup.")
	m.dropped = counter("hunt_runner_findings_dropped", "Result rows past a hunt's max_findings or its run's byte cap, counted but not stored.")
	m.truncated = counter("hunt_runner_findings_truncated", "Findings over the per-finding byte cap, stored as truncation records.")
	m.sevFallback = counter("hunt_runner_findings_severity_fallback", "Findings whose severity_from column held no low|medium|high|critical value, stored with the hunt's severity.")
	m.overruns = counter("hunt_runner_overruns", "Fires owed while the previous fire still held the lease.")
	m.chErrors = counter("hunt_runner_clickhouse_errors", "ClickHouse errors by stage.")
	if err != nil {
		return nil, err
	}
	if err := m.registerHealth(meter); err != nil {
		return nil, err
	}
	m.initialise()
	buckets := metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
	if m.runDur, err = meter.Float64Histogram("hunt_runner_run_duration", metric.WithUnit("s"),
		metric.WithDescription("Hunt run duration, failures included."), buckets); err != nil {
		return nil, err
	}
	if m.tickDur, err = meter.Float64Histogram("hunt_runner_tick_duration", metric.WithUnit("s"),
		metric.WithDescription("Tick duration: snapshot, plan and claim."), buckets); err != nil {
		return nil, err
	}
	if m.claimInsert, err = meter.Float64Histogram("hunt_runner_claim_insert_duration", metric.WithUnit("s"),
		metric.WithDescription("Send to acknowledgement of a tick's claim insert; a claim acknowledged a settle or more after it was sent is lost."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5)); err != nil {
		return nil, err
	}
	behind, err := meter.Int64ObservableGauge("hunt_runner_behind", metric.WithUnit("s"),
		metric.WithDescription("Seconds since the oldest owed fire of the most behind hunt this pod plans became due (0 when caught up); with hunt_id, of that hunt."))
	if err != nil {
		return nil, err
	}
	setInfo, err := meter.Int64ObservableGauge("hunt_runner_loaded_set_info",
		metric.WithDescription("1, labelled with the content hash of the loaded hunt set."))
	if err != nil {
		return nil, err
	}
	mismatch, err := meter.Int64ObservableGauge("hunt_runner_published_set_mismatch",
		metric.WithDescription("1 while the loaded set's hash differs from the one materialise published."))
	if err != nil {
		return nil, err
	}
	delay, err := meter.Float64ObservableGauge("hunt_runner_replica_delay", metric.WithUnit("s"),
		metric.WithDescription("Observed replication delay of the coordination tables (0 when not replicated)."))
	if err != nil {
		return nil, err
	}
	settleG, err := meter.Float64ObservableGauge("hunt_runner_settle", metric.WithUnit("s"),
		metric.WithDescription("The claim settle; the one-winner guarantee holds while replica delay < settle/2."))
	if err != nil {
		return nil, err
	}
	inFlight, err := meter.Int64ObservableGauge("hunt_runner_runs_in_flight", metric.WithDescription("Runs executing now."))
	if err != nil {
		return nil, err
	}
	queued, err := meter.Int64ObservableGauge("hunt_runner_runs_queued", metric.WithDescription("Won fires waiting for a run slot."))
	if err != nil {
		return nil, err
	}
	foreign, err := meter.Int64ObservableGauge("hunt_runner_hunt_foreign",
		metric.WithDescription("1 for each itemised hunt not run because another hunt set publishes it (hunt_set: that set)."))
	if err != nil {
		return nil, err
	}
	foreignN, err := meter.Int64ObservableGauge("hunt_runner_hunts_foreign",
		metric.WithDescription("Loaded hunts not run because another hunt set publishes them (hunt_set: that set)."))
	if err != nil {
		return nil, err
	}
	loaded, err := meter.Int64ObservableGauge("hunt_runner_hunts_loaded", metric.WithDescription("Hunts of the loaded set."))
	if err != nil {
		return nil, err
	}
	omitted, err := meter.Int64ObservableGauge("hunt_runner_metrics_hunts_omitted",
		metric.WithDescription("Loaded hunts without series of their own (--metrics-per-hunt): their runs count only in the totals."))
	if err != nil {
		return nil, err
	}
	consistency, err := meter.Int64ObservableGauge("hunt_runner_consistency_info",
		metric.WithDescription("1, labelled with the consistency mode of the coordination connection (auto resolved)."))
	if err != nil {
		return nil, err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.mu.Lock()
		runners := m.runners
		o.ObserveFloat64(delay, m.replicaDelay.Seconds())
		o.ObserveFloat64(settleG, m.settle.Seconds())
		if m.consistency != "" {
			o.ObserveInt64(consistency, 1, metric.WithAttributes(attribute.String("mode", m.consistency)))
		}
		m.mu.Unlock()
		n, left := m.perHunt.counts()
		o.ObserveInt64(loaded, int64(n))
		o.ObserveInt64(omitted, int64(left))
		for _, r := range runners {
			b, setHash := r.planner.last()
			pubHash := r.pub.published()
			running, q := r.exec.counts()
			most := int64(0)
			for _, s := range b {
				most = max(most, s)
			}
			// The plan holds only the hunts it planned; an itemised hunt it left out is caught up.
			for _, id := range m.perHunt.itemisedIDs() {
				if s, ok := r.planner.behindOf(id); ok {
					o.ObserveInt64(behind, s, metric.WithAttributes(attribute.String("hunt_id", id)))
				}
			}
			o.ObserveInt64(behind, most)
			if setHash != "" {
				o.ObserveInt64(setInfo, 1, metric.WithAttributes(attribute.String("hash", setHash)))
			}
			mm := int64(0)
			if pubHash != "" && setHash != "" && pubHash != setHash {
				mm = 1
			}
			o.ObserveInt64(mismatch, mm)
			o.ObserveInt64(inFlight, int64(running))
			o.ObserveInt64(queued, int64(q))
			bySet := map[string]int64{}
			for id, set := range r.owners.foreignHunts() {
				bySet[set]++
				if m.perHunt.itemised(id) {
					o.ObserveInt64(foreign, 1, metric.WithAttributes(attribute.String("hunt_id", id), attribute.String("hunt_set", set)))
				}
			}
			for set, k := range bySet {
				o.ObserveInt64(foreignN, k, metric.WithAttributes(attribute.String("hunt_set", set)))
			}
		}
		return nil
	}, behind, setInfo, mismatch, delay, settleG, inFlight, queued, consistency, foreign, foreignN, loaded, omitted)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// The label values the totals are initialised with, besides runOutcomes and runKinds
// (metrics_perhunt.go): the claim outcomes and the stages of ClickHouse errors.
var (
	claimOutcomes = []string{claimWon, claimLost, claimAlreadyRun, claimError}
	errorStages   = []string{stageSnapshot, stageClaim, stageRenew, stageCommit, stageRelease, stageHeartbeat, stageOwnership, stagePublishedHash, stageReplicaDelay}
)

const (
	claimWon, claimLost, claimAlreadyRun, claimError = "won", "lost", "already_run", "error"

	stageSnapshot, stageClaim, stageRenew, stageCommit, stageRelease = "snapshot", "claim", "renew", "commit", "release"
	stageHeartbeat, stageOwnership                                   = "heartbeat", "ownership"
	stagePublishedHash, stageReplicaDelay                            = "published_hash", "replica_delay"

	// The stages at which the cap holds fires back (hunt_runner_cap_deferred_total).
	capStagePlan, capStageClaim = "plan", "claim"
)

// initialise records 0 on every total with every label value it can take (per-hunt series
// excepted: they appear with their hunt's first run), so that a fresh dashboard has no holes
// and rate() and increase() see the first failure, gap or error: a series that appears at 1
// has no increase to Prometheus.
func (m *Metrics) initialise() {
	ctx := context.Background()
	for _, k := range runKinds {
		for _, o := range runOutcomes {
			m.runs.Add(ctx, 0, metric.WithAttributes(attribute.String("outcome", o.String()), attribute.String("kind", k.String())))
		}
	}
	for _, o := range claimOutcomes {
		m.claimsC.Add(ctx, 0, metric.WithAttributes(attribute.String("outcome", o)))
	}
	for _, s := range errorStages {
		m.chErrors.Add(ctx, 0, metric.WithAttributes(attribute.String("stage", s)))
	}
	for _, s := range []string{capStagePlan, capStageClaim} {
		m.capDeferred.Add(ctx, 0, metric.WithAttributes(attribute.String("stage", s)))
	}
	for _, c := range []metric.Int64Counter{m.rows, m.gaps, m.dropped, m.truncated, m.sevFallback, m.overruns} {
		c.Add(ctx, 0)
	}
}

func (m *Metrics) observe(r *Runner) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runners = append(m.runners, r)
}

// runDone counts one finished run of kind (hunt.KindScheduled, …) by its outcome.
func (m *Metrics) runDone(ctx context.Context, huntID string, kind hunt.Kind, outcome hunt.RunStatus, d time.Duration, rows uint64) {
	if m == nil {
		return
	}
	kv := []attribute.KeyValue{attribute.String("outcome", outcome.String()), attribute.String("kind", kind.String())}
	m.runs.Add(ctx, 1, m.perHunt.attrs(huntID, kv...))
	m.runDur.Record(ctx, d.Seconds(), metric.WithAttributes(kv...))
	if outcome == hunt.RunSucceeded {
		m.rows.Add(ctx, int64(rows), m.perHunt.attrs(huntID))
	}
}

func (m *Metrics) claims(ctx context.Context, outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.claimsC.Add(ctx, int64(n), metric.WithAttributes(attribute.String("outcome", outcome)))
}

// capDeferredFires counts n fires held back by the cap at stage (plan or claim).
func (m *Metrics) capDeferredFires(ctx context.Context, stage string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.capDeferred.Add(context.WithoutCancel(ctx), int64(n), metric.WithAttributes(attribute.String("stage", stage)))
}

func (m *Metrics) findingsTruncated(ctx context.Context, huntID string, n uint64) {
	if m == nil || n == 0 {
		return
	}
	m.truncated.Add(ctx, int64(n), m.perHunt.attrs(huntID))
}

func (m *Metrics) severityFallback(ctx context.Context, huntID string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.sevFallback.Add(ctx, int64(n), m.perHunt.attrs(huntID))
}

func (m *Metrics) findingsDropped(ctx context.Context, huntID string, n uint64) {
	if m == nil {
		return
	}
	m.dropped.Add(ctx, int64(n), m.perHunt.attrs(huntID))
}

func (m *Metrics) gap(ctx context.Context, huntID string) {
	if m == nil {
		return
	}
	m.gaps.Add(ctx, 1, m.perHunt.attrs(huntID))
}

func (m *Metrics) overrun(ctx context.Context, huntID string) {
	if m == nil {
		return
	}
	m.overruns.Add(ctx, 1, m.perHunt.attrs(huntID))
}

func (m *Metrics) clickhouseError(ctx context.Context, stage string) {
	if m == nil {
		return
	}
	m.chErrors.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("stage", stage)))
}

func (m *Metrics) claimInserted(ctx context.Context, d time.Duration) {
	if m == nil || d <= 0 {
		return
	}
	m.claimInsert.Record(context.WithoutCancel(ctx), d.Seconds())
}

func (m *Metrics) tickDone(ctx context.Context, d time.Duration) {
	if m == nil {
		return
	}
	m.tickDur.Record(context.WithoutCancel(ctx), d.Seconds())
}

func (m *Metrics) setReplicaDelay(d time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.replicaDelay = d
	m.mu.Unlock()
}

// SetConsistency records the coordination connection's consistency mode for
// hunt_runner_consistency_info, so an alert can tell a replicated deployment running without
// quorum.
func (m *Metrics) SetConsistency(mode string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.consistency = mode
	m.mu.Unlock()
}
