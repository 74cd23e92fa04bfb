package notify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

// Options configure a Dispatcher. Zero values take the defaults in brackets.
type Options struct {
	Config      *Config       // required
	Database    string        // coordination database [hunt_runner]
	Owner       string        // this process in hunt_delivery.owner (required)
	Poll        time.Duration // how often committed runs are looked for [5s]
	Lease       time.Duration // claim of one delivery; renewed every Lease/3 while sending [1m]
	Settle      time.Duration // wait between claim and verify; must exceed the replica lag [750ms]
	Concurrency int           // deliveries in flight [4]
	Batch       int           // deliveries claimed per poll [64]
	// Lookback is the window of fires a poll reads: older fires are never planned, and a
	// delivery still unfinished this long after its fire is left as it is [48h]. It must
	// exceed the retry horizon. Which fires a sink gets at all is its enablement
	// (Sink.Lookback), not this.
	Lookback   time.Duration
	RetryBase  time.Duration // first backoff, doubled per attempt [10s]
	RetryMax   time.Duration // longest backoff [10m]
	Logger     *slog.Logger
	Metrics    *Metrics     // nil records nothing
	HTTPClient *http.Client // sinks without tls_config; default: no redirects followed
	// Clock is the time mute time intervals and snoozes are judged at [the server clock].
	Clock func() time.Time
}

// Dispatcher delivers committed findings; see the package comment.
type Dispatcher struct {
	st      deliveryStore
	src     Source
	o       Options
	log     *slog.Logger
	polls   int
	clients map[string]*http.Client // per sink with tls_config

	enabled   map[string]time.Time // when each sink was first enabled (server clock)
	enabledAt time.Time            // when enabled was last read back

	snoozes map[string]store.Snooze // per hunt, read by each poll that claims (notify/mute.go)
}

// enableEvery is how often the enablement rows are read back (and refreshed when due).
const enableEvery = time.Hour

// ensureEnabled records and reads back when each configured sink was first enabled: at the
// first poll, hourly after, and at every poll while a sink's enablement is not known.
func (d *Dispatcher) ensureEnabled(ctx context.Context) error {
	names := make([]string, len(d.o.Config.Sinks))
	for i, s := range d.o.Config.Sinks {
		names[i] = s.Name
	}
	if len(d.enabled) == len(names) && time.Since(d.enabledAt) < enableEvery {
		return nil
	}
	got, err := d.st.enable(ctx, names, d.o.Owner)
	if err != nil {
		return fmt.Errorf("notify: record sink enablement: %w", err)
	}
	d.enabled, d.enabledAt = got, time.Now()
	return nil
}

// owedTo is what sink s is owed of any hunt routed to it, now: fires committed after the sink
// was first enabled, less its lookback (so enabling notifications does not page for history);
// of those, fires within the Dispatcher's Lookback, except during the sink's first Lookback
// after enabling, when its whole history is read, with a Lookback of margin since a fire can
// commit well after its instant. ok is false while the enablement is not known.
func (d *Dispatcher) owedTo(s Sink, now time.Time) (o owed, ok bool) {
	en, ok := d.enabled[s.Name]
	if !ok {
		return owed{}, false
	}
	o = owed{Sink: s.Name, FireFrom: now.Add(-d.o.Lookback), CommittedFrom: en.Add(-s.Lookback)}
	if now.Sub(en) < d.o.Lookback {
		o.FireFrom = earliest(o.FireFrom, o.CommittedFrom.Add(-d.o.Lookback))
	}
	return o, true
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// New checks the options and returns a Dispatcher; it does not touch ClickHouse.
func New(conn driver.Conn, src Source, o Options) (*Dispatcher, error) {
	if o.Config == nil {
		return nil, errors.New("notify: Options.Config is required")
	}
	if o.Owner == "" {
		return nil, errors.New("notify: Options.Owner is required")
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Poll, 5*time.Second)
	def(&o.Lease, time.Minute)
	def(&o.Settle, 750*time.Millisecond)
	def(&o.Lookback, 48*time.Hour)
	def(&o.RetryBase, 10*time.Second)
	def(&o.RetryMax, 10*time.Minute)
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Batch <= 0 {
		o.Batch = 64
	}
	if o.Database == "" {
		o.Database = chstore.DefaultDatabase
	}
	if o.Lease < 4*o.Settle {
		return nil, fmt.Errorf("notify: lease %s must be at least 4× the settle %s", o.Lease, o.Settle)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = newHTTPClient(nil)
	}
	clients := map[string]*http.Client{}
	for _, s := range o.Config.Sinks {
		if s.TLS != nil {
			clients[s.Name] = newHTTPClient(s.TLS)
		}
	}
	return &Dispatcher{st: deliveryStore{conn: conn, db: o.Database}, src: src, o: o, log: o.Logger, clients: clients}, nil
}

// Start polls until ctx ends. A delivery in flight then is abandoned with its lease, and a
// peer (or the next start) sends it again, with the same key, once the lease expires.
func (d *Dispatcher) Start(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := d.Poll(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("notify poll failed; retrying", "error", err)
			d.o.Metrics.storeError()
		}
		t.Reset(d.o.Poll)
	}
}

// PollResult counts what one Poll did.
type PollResult struct {
	Planned, Claimed, Delivered, Retried, Dead, Suppressed, Muted, Lost int
	Deferred                                                            int // claims left to their lease unsent (their queue ran too long)
}

func (r *PollResult) add(o string) {
	switch o {
	case StatusDelivered:
		r.Delivered++
	case StatusRetry:
		r.Retried++
	case StatusDead:
		r.Dead++
	case StatusMuted:
		r.Muted++
	case "lost":
		r.Lost++
	}
}

// Poll runs one pass: plan new committed fires, claim what is due, deliver the claims.
func (d *Dispatcher) Poll(ctx context.Context) (PollResult, error) {
	var res PollResult
	set := d.src()
	if set == nil {
		return res, nil
	}
	hunts := set.Enabled()
	if err := d.ensureEnabled(ctx); err != nil {
		return res, err
	}
	byID := make(map[string]*hunt.Hunt, len(hunts))
	want := map[string][]owed{}
	start := time.Now()
	from := start.Add(-d.o.Lookback)
	for _, h := range hunts {
		byID[h.ID] = h
		for _, name := range d.o.Config.SinksFor(h) {
			sink, _ := d.o.Config.Sink(name)
			if o, ok := d.owedTo(sink, start); ok {
				want[h.ID] = append(want[h.ID], o)
				from = earliest(from, o.FireFrom)
			}
		}
	}
	if len(want) == 0 {
		return res, nil
	}
	since := start.Add(-d.o.Lookback).Unix()
	works, now, err := d.st.pending(ctx, want, from.Unix(), 4*d.o.Batch)
	if err != nil {
		return res, fmt.Errorf("notify: read committed runs: %w", err)
	}
	d.polls++
	if d.o.Metrics != nil && d.polls%6 == 1 {
		if c, err := counts(ctx, d.st, since); err == nil {
			d.o.Metrics.setCounts(c)
		}
	}

	// Planning goes in fire order per hunt and stops at a hunt's first failure, so a fire's
	// suppression always sees the keys its earlier fires recorded.
	broken := map[string]bool{}
	var cands []key
	starts := map[[2]any]int64{}
	for _, w := range works {
		starts[[2]any{w.HuntID, w.Fire}] = w.WindowStart
		if broken[w.HuntID] {
			continue
		}
		var missing []string
		for _, o := range want[w.HuntID] {
			if _, ok := w.Sinks[o.Sink]; !ok && o.covers(w) {
				missing = append(missing, o.Sink)
			}
		}
		if len(missing) > 0 {
			status, err := d.planFire(ctx, byID[w.HuntID], w, missing)
			if err != nil {
				broken[w.HuntID] = true
				d.log.Warn("notify: planning failed", "hunt_id", w.HuntID, "fire", w.Fire, "error", err)
				continue
			}
			res.Planned += len(missing)
			for _, s := range missing {
				w.Sinks[s] = sinkState{Status: status}
				if status == StatusSuppressed {
					res.Suppressed++
					d.o.Metrics.outcome(s, StatusSuppressed)
				}
			}
		}
		for _, o := range want[w.HuntID] {
			s := o.Sink
			st := w.Sinks[s]
			claimable := (st.Status == StatusDelivering || ((st.Status == StatusPending || st.Status == StatusRetry) && !st.NextAttempt.After(now))) &&
				!st.Lease.After(now)
			if claimable && len(cands) < d.o.Batch {
				cands = append(cands, key{w.HuntID, w.Fire, s})
			}
		}
	}
	if len(cands) == 0 {
		return res, nil
	}

	if err := d.readSnoozes(ctx); err != nil {
		return res, err
	}
	claimID := uuid.New()
	if err := d.st.claim(ctx, cands, claimID, d.o.Owner, d.o.Lease); err != nil {
		return res, fmt.Errorf("notify: claim: %w", err)
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(d.o.Settle):
	}
	won, serverNow, err := d.st.held(ctx, cands, claimID)
	if err != nil {
		return res, fmt.Errorf("notify: verify claim: %w", err)
	}
	res.Claimed = len(won)
	local := time.Now()

	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, d.o.Concurrency)
	for _, q := range inFireOrder(won) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for i, h := range q {
				now := serverNow.Add(time.Since(local))
				// A claim waits in its queue unrenewed: one with less than half its lease left
				// would lapse before its first renewal, so it and the rest of the queue are left
				// to their leases, to be claimed again in order, rather than sent twice.
				if h.Until.Sub(now) < d.o.Lease/2 {
					mu.Lock()
					res.Deferred += len(q) - i
					mu.Unlock()
					break
				}
				o := d.deliver(ctx, byID[h.HuntID], h, starts[[2]any{h.HuntID, h.Fire}], now)
				mu.Lock()
				res.add(o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res, nil
}

// inFireOrder queues claimed deliveries per (hunt, sink), oldest fire first: one queue is sent
// in order, so a receiver reading a hunt's notifications never sees an older window arrive as
// the latest; queues run side by side.
func inFireOrder(won []held) [][]held {
	idx := map[[2]string]int{}
	var qs [][]held
	for _, h := range won {
		k := [2]string{h.HuntID, h.Sink}
		i, ok := idx[k]
		if !ok {
			i = len(qs)
			idx[k] = i
			qs = append(qs, nil)
		}
		qs[i] = append(qs[i], h)
	}
	for _, q := range qs {
		slices.SortFunc(q, func(a, b held) int { return cmp.Compare(a.Fire, b.Fire) })
	}
	return qs
}

// planFire records the fire's suppression keys (when the hunt suppresses) and writes the first
// row of each missing sink: pending, or suppressed when every finding was notified before.
func (d *Dispatcher) planFire(ctx context.Context, h *hunt.Hunt, w work, missing []string) (string, error) {
	status := StatusPending
	if h.Suppress != nil && len(h.Suppress.By) > 0 {
		fs, err := d.st.findings(ctx, w.HuntID, w.Fire, w.RunID)
		if err != nil {
			return "", err
		}
		send, _, err := d.unsuppressed(ctx, h, w.Fire, fs)
		if err != nil {
			return "", err
		}
		var keys []string
		for _, f := range send {
			if k := suppressKey(f.JSON, h.Suppress.By); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		if err := d.st.recordSuppress(ctx, w.HuntID, w.Fire, keys); err != nil {
			return "", err
		}
		if len(send) == 0 {
			status = StatusSuppressed
		}
	}
	return status, d.st.plan(ctx, w, missing, status, d.o.Owner)
}

// unsuppressed filters a fire's findings down to those not notified by an earlier fire within
// the hunt's suppress.for; it returns them and how many were held back.
func (d *Dispatcher) unsuppressed(ctx context.Context, h *hunt.Hunt, fire int64, fs []finding) ([]finding, int, error) {
	if h.Suppress == nil || len(h.Suppress.By) == 0 {
		return fs, 0, nil
	}
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = suppressKey(f.JSON, h.Suppress.By)
	}
	sup, err := d.st.suppressedKeys(ctx, h.ID, fire, h.Suppress.For, slices.Compact(slices.Sorted(slices.Values(keys))))
	if err != nil {
		return nil, 0, err
	}
	out := make([]finding, 0, len(fs))
	for i, f := range fs {
		if !sup[keys[i]] {
			out = append(out, f)
		}
	}
	return out, len(fs) - len(out), nil
}

// deliver sends one claimed delivery and writes its outcome; now estimates the server clock.
func (d *Dispatcher) deliver(ctx context.Context, h *hunt.Hunt, c held, windowStart int64, now time.Time) string {
	log := d.log.With("hunt_id", c.HuntID, "fire", time.Unix(c.Fire, 0).UTC().Format(time.RFC3339), "sink", c.Sink,
		"attempt", c.Attempt, "idempotency_key", c.Key)
	sendCtx, cancelSend := context.WithCancel(ctx)
	defer cancelSend()
	stop := make(chan struct{})
	var lost bool
	var renewWG sync.WaitGroup
	renewWG.Add(1)
	go func() {
		defer renewWG.Done()
		t := time.NewTicker(d.o.Lease / 3)
		defer t.Stop()
		cur := c
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Not under sendCtx: a renewal is never cut off mid-statement by the attempt's end
			// (the server would still run an INSERT whose client went away).
			next, ok, err := d.st.renew(ctx, cur, d.o.Lease)
			switch {
			case err != nil:
				log.Warn("notify: lease renewal failed; retrying", "error", err)
			case !ok:
				lost = true
				cancelSend()
				return
			default:
				cur = next
			}
		}
	}()
	status, lastErr, backoff := d.attempt(sendCtx, h, c, windowStart, now)
	// The renewer must be finished before the outcome is written: a renewal still running on
	// the server could land above the outcome and put the delivery back in flight.
	close(stop)
	renewWG.Wait()
	// An answer the sink gave is recorded even while shutting down (fenced, so only while the
	// claim holds); an attempt cut short by the shutdown or a lost lease is left to the lease.
	if status == StatusRetry && (ctx.Err() != nil || lost) {
		log.Info("notify: delivery abandoned with its lease; it is sent again after the lease", "lost", lost)
		d.o.Metrics.outcome(c.Sink, "lost")
		return "lost"
	}
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer wcancel()
	if err := d.st.finish(wctx, c, status, lastErr, backoff); err != nil {
		log.Warn("notify: could not record the outcome; the delivery will be sent again", "outcome", status, "error", err)
		d.o.Metrics.storeError()
		return "lost"
	}
	d.o.Metrics.outcome(c.Sink, status)
	switch status {
	case StatusDelivered:
		d.o.Metrics.latency(c.Sink, time.Since(time.Unix(c.Fire, 0)))
		log.Info("notify: delivered")
	case StatusRetry:
		log.Warn("notify: delivery failed; will retry", "error", lastErr, "backoff", backoff.String())
	case StatusDead:
		log.Error("notify: delivery dead-lettered", "error", lastErr)
	case StatusMuted:
		log.Info("notify: delivery muted; it will not be sent", "why", lastErr)
	}
	return status
}

// attempt builds the notification and posts it once; it returns the status to record.
func (d *Dispatcher) attempt(ctx context.Context, h *hunt.Hunt, c held, windowStart int64, now time.Time) (status, lastErr string, backoff time.Duration) {
	sink, ok := d.o.Config.Sink(c.Sink)
	if !ok {
		return StatusDead, "sink " + c.Sink + " is no longer in the notify config", 0
	}
	if why, muted := d.muted(h, c, now); muted {
		return StatusMuted, why, 0
	}
	fail := func(err error) (string, string, time.Duration) {
		if !now.Before(c.Created.Add(d.o.Config.Horizon)) {
			return StatusDead, fmt.Sprintf("gave up after the %s retry horizon: %v", d.o.Config.Horizon, err), 0
		}
		return StatusRetry, err.Error(), d.backoff(c.Attempt)
	}
	fs, err := d.st.findings(ctx, c.HuntID, c.Fire, c.RunID)
	if err != nil {
		return fail(fmt.Errorf("read findings: %w", err))
	}
	send, suppressed, err := d.unsuppressed(ctx, h, c.Fire, fs)
	if err != nil {
		return fail(fmt.Errorf("read suppression: %w", err))
	}
	if len(send) == 0 {
		return StatusSuppressed, "", 0
	}
	n := Notification{HuntID: c.HuntID, Description: h.Description, Fire: time.Unix(c.Fire, 0), WindowStart: time.Unix(windowStart, 0),
		Severity: h.Severity, Labels: h.Labels, HuntURL: HuntURL(d.o.Config.ExternalURL, c.HuntID),
		FindingsTotal: len(send), Suppressed: suppressed, IdempotencyKey: c.Key}
	if sink.Type == TypeAlertmanager {
		// From the attempt, not the fire: an alert delivered late (after retries) must still
		// arrive firing, or Alertmanager would record it resolved and notify nobody.
		n.EndsAt = now.Add(sink.ResolveAfter)
	}
	for _, f := range send[:min(len(send), d.o.Config.MaxFindings)] {
		n.Findings = append(n.Findings, json.RawMessage(f.JSON))
	}
	body, err := n.Body(sink.Type)
	if err != nil {
		return StatusDead, err.Error(), 0
	}
	client := d.o.HTTPClient
	if cl, ok := d.clients[sink.Name]; ok {
		client = cl
	}
	r := post(ctx, client, sink, c.Key, body)
	switch r.outcome {
	case sent:
		return StatusDelivered, "", 0
	case permanent:
		return StatusDead, r.err.Error(), 0
	}
	st, e, b := fail(r.err)
	if r.retryAfter > b {
		b = min(r.retryAfter, time.Hour)
	}
	return st, e, b
}

// backoff is RetryBase doubled per attempt, capped at RetryMax, with ±20% jitter so that many
// deliveries failing together do not retry in step.
func (d *Dispatcher) backoff(attempt uint32) time.Duration {
	b := d.o.RetryBase
	for i := uint32(1); i < attempt && b < d.o.RetryMax; i++ {
		b *= 2
	}
	b = min(b, d.o.RetryMax)
	return time.Duration(float64(b) * (0.8 + 0.4*rand.Float64()))
}
