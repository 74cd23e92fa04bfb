package charttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/tidwall/gjson"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The scale path, simulated second by second from the ScaledObject the chart renders:
//
//	backlog series → shim (or ClickHouse) → KEDA metrics-api reading → KEDA polling loop
//	(activation, scale to/from zero, cooldown, fallback) → HPA (AverageValue formula, 10 %
//	tolerance, min/max, stabilisation windows, rate policies) → replica series.
//
// The arithmetic follows kubernetes pkg/controller/podautoscaler (replica_calculator.go
// GetExternalPerPodMetricReplicas; horizontal.go stabilizeRecommendationWithBehaviors,
// convertDesiredReplicasWithBehaviorRate, calculateScale{Up,Down}Limit…) and KEDA v2.21
// (pkg/scaling/executor/scale_scaledobjects.go, pkg/fallback/fallback.go,
// pkg/scalers/metrics_api_scaler.go). What only a cluster can prove — pod start times, the real
// operator loop — is deploy/keda-scale-test.sh's job.

// errOutage is ClickHouse being unreachable.
var errOutage = errors.New("clickhouse unreachable")

// backlogSource is what KEDA asks each time it polls or the HPA syncs: the value the trigger
// yields, or the trigger's error.
type backlogSource interface {
	read(t int) (float64, error)
}

// series is the true due backlog in ClickHouse over time, with outage windows.
type series struct {
	phases  []phase
	outages [][2]int // [from, to) seconds
}

type phase struct {
	from    int
	backlog float64
}

func (s series) at(t int) (float64, error) {
	for _, o := range s.outages {
		if t >= o[0] && t < o[1] {
			return 0, errOutage
		}
	}
	v := 0.0
	for _, p := range s.phases {
		if t >= p.from {
			v = p.backlog
		}
	}
	return v, nil
}

// shimPath is the metrics-api trigger on hunt-runner shim. The shim's contract (issue 6; tested
// on the engine in shim/): every answer is 200 {"value": N}, N clamped to [0, clampMax]; on a
// ClickHouse failure the last good value is held, or cold_hold when there is none. KEDA then
// reads the body as metrics_api_scaler.go does: gjson at valueLocation, a string parsed as a
// Quantity, anything else an error, negative values clamped to 0.
type shimPath struct {
	truth         series
	clampMax      float64
	coldHold      float64
	valueLocation string
	last          *float64
}

func (s *shimPath) body(t int) (int, []byte) {
	v, err := s.truth.at(t)
	answer := map[string]any{}
	if err != nil {
		held := s.coldHold
		if s.last != nil {
			held = *s.last
		}
		answer["value"], answer["held"], answer["reason"] = held, true, "unreachable"
	} else {
		v = math.Min(math.Max(v, 0), s.clampMax)
		s.last = &v
		answer["value"] = v
	}
	b, _ := json.Marshal(answer)
	return 200, b
}

func (s *shimPath) read(t int) (float64, error) {
	status, body := s.body(t)
	if status != 200 {
		return 0, fmt.Errorf("api returned %d", status)
	}
	r := gjson.GetBytes(body, s.valueLocation)
	var v float64
	switch r.Type {
	case gjson.Number:
		v = r.Num
	case gjson.String:
		q, err := resource.ParseQuantity(r.String())
		if err != nil {
			return 0, err
		}
		v = q.AsApproximateFloat64()
	default:
		return 0, fmt.Errorf("valueLocation %s must point to a numeric value, got %s", s.valueLocation, r.Type)
	}
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return v, nil
}

// nativePath is KEDA's ClickHouse trigger: a failed query is a scaler error.
type nativePath struct{ truth series }

func (n nativePath) read(t int) (float64, error) { return n.truth.at(t) }

// zeroOnErrorPath is the bug the shim exists to avoid (some scalers hide errors as 0): a
// negative control, so the outage assertion is known to catch a wrong scale-in.
type zeroOnErrorPath struct{ truth series }

func (z zeroOnErrorPath) read(t int) (float64, error) {
	v, err := z.truth.at(t)
	if err != nil {
		return 0, nil
	}
	return v, nil
}

// scaleEvent is a replica change the HPA made, for its rate policies.
type scaleEvent struct{ t, change int }

type recommendation struct{ t, replicas int }

// scaleSim is one ScaledObject with its HPA.
type scaleSim struct {
	min, max, poll, cooldown int
	target, activation       float64
	fallback                 *kedav1alpha1.Fallback
	up, down                 autoscalingv2.HPAScalingRules
	tolerance                float64
	hpaSync                  int
	src                      backlogSource

	replicas     int
	lastActive   int
	failures     int
	recs         []recommendation
	upEvents     []scaleEvent
	downEvents   []scaleEvent
	fallbackSeen bool
}

func ptr[T any](v T) *T { return &v }

// newScaleSim reads every knob from the rendered ScaledObject and fills HPA defaults the way the
// API server does (autoscaling/v2 SetDefaults_HorizontalPodAutoscalerBehavior).
func newScaleSim(t *testing.T, so *kedav1alpha1.ScaledObject, src backlogSource, initial int) *scaleSim {
	t.Helper()
	tr := so.Spec.Triggers[0]
	key := map[string]string{"metrics-api": "targetValue", "clickhouse": "targetQueryValue"}[tr.Type]
	target, err := strconv.ParseFloat(tr.Metadata[key], 64)
	if err != nil || target <= 0 {
		t.Fatalf("trigger target %q: %v", tr.Metadata[key], err)
	}
	actKey := map[string]string{"metrics-api": "activationTargetValue", "clickhouse": "activationTargetQueryValue"}[tr.Type]
	activation, _ := strconv.ParseFloat(tr.Metadata[actKey], 64)
	s := &scaleSim{
		min: int(*so.Spec.MinReplicaCount), max: int(*so.Spec.MaxReplicaCount),
		poll: int(*so.Spec.PollingInterval), cooldown: int(*so.Spec.CooldownPeriod),
		target: target, activation: activation, fallback: so.Spec.Fallback,
		tolerance: 0.1, hpaSync: 15, src: src, replicas: initial, lastActive: math.MinInt32,
		up: autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: ptr(int32(0)), SelectPolicy: ptr(autoscalingv2.MaxChangePolicySelect),
			Policies: []autoscalingv2.HPAScalingPolicy{
				{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
				{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			},
		},
		down: autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: ptr(int32(300)), SelectPolicy: ptr(autoscalingv2.MaxChangePolicySelect),
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}},
		},
	}
	if a := so.Spec.Advanced; a != nil && a.HorizontalPodAutoscalerConfig != nil && a.HorizontalPodAutoscalerConfig.Behavior != nil {
		b := a.HorizontalPodAutoscalerConfig.Behavior
		mergeRules(&s.up, b.ScaleUp)
		mergeRules(&s.down, b.ScaleDown)
	}
	return s
}

func mergeRules(dst *autoscalingv2.HPAScalingRules, src *autoscalingv2.HPAScalingRules) {
	if src == nil {
		return
	}
	if src.StabilizationWindowSeconds != nil {
		dst.StabilizationWindowSeconds = src.StabilizationWindowSeconds
	}
	if src.SelectPolicy != nil {
		dst.SelectPolicy = src.SelectPolicy
	}
	if len(src.Policies) > 0 {
		dst.Policies = src.Policies
	}
}

// metric is one scaler read through KEDA's fallback: after more than failureThreshold
// consecutive failures KEDA answers target × replicas (the current count for currentReplicas).
func (s *scaleSim) metric(t int) (float64, bool, error) {
	v, err := s.src.read(t)
	if err == nil {
		s.failures = 0
		return v, false, nil
	}
	s.failures++
	if s.fallback != nil && s.failures > int(s.fallback.FailureThreshold) {
		s.fallbackSeen = true
		n := int(s.fallback.Replicas)
		switch s.fallback.Behavior {
		case kedav1alpha1.FallbackBehaviorCurrentReplicas:
			n = s.replicas
		case kedav1alpha1.FallbackBehaviorCurrentReplicasIfHigher:
			n = max(s.replicas, n)
		case kedav1alpha1.FallbackBehaviorCurrentReplicasIfLower:
			n = min(s.replicas, n)
		}
		return s.target * float64(n), true, nil
	}
	return 0, false, err
}

// kedaPoll is KEDA's own loop: 0 ↔ 1 and the scale to zero after cooldown.
func (s *scaleSim) kedaPoll(t int) {
	v, fallback, err := s.metric(t)
	active := err == nil && (v > s.activation || fallback)
	switch {
	case active:
		s.lastActive = t
		if s.replicas == 0 {
			s.replicas = max(s.min, 1)
		}
	case err != nil:
		// Every trigger failed and no fallback applies: KEDA leaves the count alone.
	case s.replicas > 0 && s.min == 0 && t-s.lastActive >= s.cooldown:
		s.replicas = 0
		s.recs, s.upEvents, s.downEvents = nil, nil, nil
	case s.replicas < s.min:
		s.replicas = s.min
	}
}

// hpaSync is one HPA reconcile for a single external AverageValue metric.
func (s *scaleSim) hpaSyncAt(t int) {
	if s.replicas == 0 {
		return // the HPA is disabled at 0; KEDA owns 0 ↔ 1
	}
	hpaMin := max(s.min, 1)
	v, _, err := s.metric(t)
	if err != nil {
		return // FailedGetExternalMetric: with one metric the HPA changes nothing
	}
	// GetExternalPerPodMetricReplicas (values in milli-units, as KEDA publishes them).
	usage, targetPerPod := math.Round(v*1000), math.Round(s.target*1000)
	desired := s.replicas
	if ratio := usage / (targetPerPod * float64(s.replicas)); math.Abs(1-ratio) > s.tolerance {
		desired = int(math.Ceil(usage / targetPerPod))
	}
	next := s.normalize(t, desired, hpaMin)
	if next > s.replicas {
		s.upEvents = append(s.upEvents, scaleEvent{t, next - s.replicas})
	} else if next < s.replicas {
		s.downEvents = append(s.downEvents, scaleEvent{t, s.replicas - next})
	}
	s.replicas = next
}

func (s *scaleSim) normalize(t, desired, hpaMin int) int {
	// Stabilisation: the lowest recommendation of the up window, the highest of the down window.
	upRec, downRec := desired, desired
	for _, r := range s.recs {
		if r.t > t-int(*s.up.StabilizationWindowSeconds) {
			upRec = min(upRec, r.replicas)
		}
		if r.t > t-int(*s.down.StabilizationWindowSeconds) {
			downRec = max(downRec, r.replicas)
		}
	}
	s.recs = append(s.recs, recommendation{t, desired})
	rec := s.replicas
	rec = max(rec, upRec)
	rec = min(rec, downRec)
	// Rate policies, then min/max.
	switch {
	case rec > s.replicas:
		limit := scaleLimit(s.replicas, s.upEvents, nil, s.up, t, true)
		limit = max(limit, s.replicas)
		return min(rec, min(limit, s.max))
	case rec < s.replicas:
		limit := scaleLimit(s.replicas, s.upEvents, s.downEvents, s.down, t, false)
		limit = min(limit, s.replicas)
		return max(rec, max(limit, hpaMin))
	}
	return min(max(rec, hpaMin), s.max)
}

func changedIn(events []scaleEvent, period, t int) int {
	n := 0
	for _, e := range events {
		if e.t > t-period {
			n += e.change
		}
	}
	return n
}

func scaleLimit(current int, ups, downs []scaleEvent, rules autoscalingv2.HPAScalingRules, t int, up bool) int {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	minChange := *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect
	result := math.MinInt32
	pick := func(a, b int) int { return max(a, b) }
	if up == minChange { // up+Min or down+Max pick the lowest proposal
		result, pick = math.MaxInt32, func(a, b int) int { return min(a, b) }
	}
	for _, p := range rules.Policies {
		period := int(p.PeriodSeconds)
		var proposed int
		if up {
			start := current - changedIn(ups, period, t)
			if p.Type == autoscalingv2.PodsScalingPolicy {
				proposed = start + int(p.Value)
			} else {
				proposed = int(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
			}
		} else {
			start := current - changedIn(ups, period, t) + changedIn(downs, period, t)
			if p.Type == autoscalingv2.PodsScalingPolicy {
				proposed = start - int(p.Value)
			} else {
				proposed = int(float64(start) * (1 - float64(p.Value)/100))
			}
		}
		result = pick(result, proposed)
	}
	return result
}

// run returns the replica count at every second of [0, until).
func (s *scaleSim) run(until int) []int {
	out := make([]int, until)
	for t := range until {
		if t%s.poll == 0 {
			s.kedaPoll(t)
		}
		if t%s.hpaSync == 0 {
			s.hpaSyncAt(t)
		}
		out[t] = s.replicas
	}
	return out
}

// The story: idle at zero, a trickle wakes one runner, a burst scales out (then a rise inside
// the tolerance changes nothing), ClickHouse goes away for 15 minutes, comes back with a small
// backlog (gentle scale-in), then the backlog drains and the runner returns to zero.
const (
	tWake     = 120
	tBurst    = 600
	tTolerate = 900
	tOutage   = 1500
	tRecover  = 2400
	tDrain    = 3600
	tEnd      = 4800
)

func story() series {
	return series{
		phases: []phase{
			{0, 0}, {tWake, 3}, {tBurst, 38}, {tTolerate, 42},
			{tOutage, 0}, // what ClickHouse would say, if it could be asked
			{tRecover, 12}, {tDrain, 0},
		},
		outages: [][2]int{{tOutage, tRecover}},
	}
}

func renderedScaledObject(t *testing.T, source string) *kedav1alpha1.ScaledObject {
	t.Helper()
	values := base + "---\nhuntRunner: {autoscaling: {enabled: true, minReplicaCount: 0}}\n"
	if source == "clickhouse" {
		values += "---\nhuntRunner: {autoscaling: {source: clickhouse, clickhouse: {host: ch, existingSecret: s}}}\n"
	}
	r := mustRender(t, values)
	return one[kedav1alpha1.ScaledObject](t, r, runnerName)
}

func TestScalePathSimulation(t *testing.T) {
	for _, source := range []string{"shim", "clickhouse"} {
		t.Run(source, func(t *testing.T) {
			so := renderedScaledObject(t, source)
			var src backlogSource = nativePath{story()}
			if source == "shim" {
				src = &shimPath{truth: story(), clampMax: 100000, valueLocation: so.Spec.Triggers[0].Metadata["valueLocation"]}
			}
			sim := newScaleSim(t, so, src, 0)
			got := sim.run(tEnd)
			poll := sim.poll

			// Idle at zero.
			assertConst(t, got, 0, tWake, 0, "idle before any backlog")
			// Wake from zero within one polling interval of the first due fire.
			if at := firstAt(got, tWake, func(n int) bool { return n >= 1 }); at < 0 || at > tWake+poll {
				t.Errorf("wake from zero at %d, want by %d", at, tWake+poll)
			}
			assertConst(t, got, tWake+poll, tBurst, 1, "a backlog of 3 needs one runner")
			// Scale-out: ceil(38/10) = 4 within one HPA sync.
			if at := firstAt(got, tBurst, func(n int) bool { return n == 4 }); at < 0 || at > tBurst+sim.hpaSync {
				t.Errorf("scale-out to 4 at %d, want by %d (series around: %v)", at, tBurst+sim.hpaSync, got[tBurst:tBurst+20])
			}
			// 42 from 4 pods is a ratio of 1.05, inside the 10 % tolerance: no fifth pod.
			assertConst(t, got, tBurst+sim.hpaSync, tOutage, 4, "within tolerance")
			// Outage: the count is frozen (the shim holds 42; the native trigger errors, then
			// KEDA's fallback holds the current count).
			assertConst(t, got, tOutage, tRecover, 4, "ClickHouse outage")
			if source == "clickhouse" && !sim.fallbackSeen {
				t.Error("the native trigger's outage should have gone through KEDA's fallback")
			}
			// Scale-in after recovery: not before the 300 s stabilisation window, one pod per
			// 60 s, down to ceil(12/10) = 2 and no lower.
			window := int(*sim.down.StabilizationWindowSeconds)
			if at := firstAt(got, tRecover, func(n int) bool { return n < 4 }); at < tRecover+window-sim.hpaSync {
				t.Errorf("scale-in at %d, before the stabilisation window ends (%d)", at, tRecover+window)
			}
			if at := firstAt(got, tRecover, func(n int) bool { return n == 2 }); at < 0 || at > tRecover+window+60+2*sim.hpaSync {
				t.Errorf("scale-in to 2 at %d, want by %d", at, tRecover+window+60+2*sim.hpaSync)
			}
			assertRate(t, got, tRecover, tDrain, 1, 60)
			assertMin(t, got, tRecover, tDrain, 2)
			// Drained: back to zero once cooldownPeriod has passed since the last active poll.
			if at := firstAt(got, tDrain, func(n int) bool { return n == 0 }); at < tDrain+sim.cooldown-poll || at > tDrain+sim.cooldown+poll {
				t.Errorf("scale to zero at %d, want within a poll of %d", at, tDrain+sim.cooldown)
			}
			assertConst(t, got, tDrain+sim.cooldown+poll, tEnd, 0, "drained")
			assertBounds(t, got, sim.min, sim.max)
		})
	}
}

// A trigger that reads an outage as 0 scales the runners in during the outage; the frozen-count
// assertion above would catch it.
func TestScalePathSimulationCatchesZeroOnError(t *testing.T) {
	so := renderedScaledObject(t, "shim")
	sim := newScaleSim(t, so, zeroOnErrorPath{story()}, 0)
	got := sim.run(tEnd)
	if at := firstAt(got, tOutage, func(n int) bool { return n < 4 }); at < 0 || at >= tRecover {
		t.Fatalf("a zero-on-error trigger should scale in during the outage; it did not (first change %d)", at)
	}
}

// Without a materialised schedule the backlog is 0 forever: the runner never wakes. This is why
// the chart refuses autoscaling with materialise off.
func TestScalePathNeverWakesOnAnEmptySchedule(t *testing.T) {
	so := renderedScaledObject(t, "shim")
	sim := newScaleSim(t, so, &shimPath{truth: series{}, clampMax: 100000, valueLocation: "value"}, 0)
	assertConst(t, sim.run(tEnd), 0, tEnd, 0, "empty schedule")
}

func firstAt(s []int, from int, ok func(int) bool) int {
	for t := from; t < len(s); t++ {
		if ok(s[t]) {
			return t
		}
	}
	return -1
}

func assertConst(t *testing.T, s []int, from, to, want int, what string) {
	t.Helper()
	for i := from; i < to; i++ {
		if s[i] != want {
			t.Errorf("%s: %d replicas at t=%d, want %d through [%d, %d)", what, s[i], i, want, from, to)
			return
		}
	}
}

func assertMin(t *testing.T, s []int, from, to, floor int) {
	t.Helper()
	for i := from; i < to; i++ {
		if s[i] < floor {
			t.Errorf("%d replicas at t=%d, below %d", s[i], i, floor)
			return
		}
	}
}

func assertBounds(t *testing.T, s []int, lo, hi int) {
	t.Helper()
	for i, n := range s {
		if n < lo || n > hi {
			t.Errorf("%d replicas at t=%d outside [%d, %d]", n, i, lo, hi)
			return
		}
	}
}

// assertRate: at most `pods` removed in any `period`-second window.
func assertRate(t *testing.T, s []int, from, to, pods, period int) {
	t.Helper()
	for i := from; i+period < to; i++ {
		if s[i]-s[i+period-1] > pods {
			t.Errorf("scale-in of %d pods within %d s at t=%d (policy allows %d)", s[i]-s[i+period-1], period, i, pods)
			return
		}
	}
}
