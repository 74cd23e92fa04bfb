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

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/store"
)

// Options configure a Dispatcher. Zero values take the defaults in brackets.
type Options struct {
	Config      *Config       // required
	Database    string        // coordination database [hunt_runner]
	Owner       string        // this process in hunt_delivery.owner (required)
	Poll        time.Duration // how often committed runs are looked for [5s]
	Lease       time.Duration // claim of one (hunt, sink)'s deliveries; renewed every Lease/3 while held [1m]
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

// Dispatcher delivers committed findings; see the package comment. Poll and Start may not be
// called concurrently on one Dispatcher; any number of Dispatchers may share a database.
type Dispatcher struct {
	st      deliveries
	claims  claimer
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
	got, err := d.st.EnableSinks(ctx, names, d.o.Owner)
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
func (d *Dispatcher) owedTo(s Sink, now time.Time) (o store.Owed, ok bool) {
	en, ok := d.enabled[s.Name]
	if !ok {
		return store.Owed{}, false
	}
	o = store.Owed{Sink: s.Name, FireFrom: now.Add(-d.o.Lookback), CommittedFrom: en.Add(-s.Lookback)}
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

// Defaults for Options.
const (
	PollDefault        = 5 * time.Second
	LeaseDefault       = time.Minute
	SettleDefault      = lease.DefaultSettle
	ConcurrencyDefault = 4
	BatchDefault       = 64
	LookbackDefault    = 48 * time.Hour
	RetryBaseDefault   = 10 * time.Second
	RetryMaxDefault    = 10 * time.Minute
)

// New checks the options and returns a Dispatcher; it does not touch ClickHouse.
func New(conn driver.Conn, src Source, o Options) (*Dispatcher, error) {
	if o.Config == nil {
		return nil, errors.New("notify: Options.Config is required")
	}
	if o.Owner == "" {
		return nil, errors.New("notify: Options.Owner is required")
	}
	o.Poll = cmp.Or(max(o.Poll, 0), PollDefault)
	o.Lease = cmp.Or(max(o.Lease, 0), LeaseDefault)
	o.Settle = cmp.Or(max(o.Settle, 0), SettleDefault)
	o.Lookback = cmp.Or(max(o.Lookback, 0), LookbackDefault)
	o.RetryBase = cmp.Or(max(o.RetryBase, 0), RetryBaseDefault)
	o.RetryMax = cmp.Or(max(o.RetryMax, 0), RetryMaxDefault)
	o.Concurrency = cmp.Or(max(o.Concurrency, 0), ConcurrencyDefault)
	o.Batch = cmp.Or(max(o.Batch, 0), BatchDefault)
	o.Database = cmp.Or(o.Database, chstore.DefaultDatabase)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = newHTTPClient(nil)
	}
	// The claim protocol of the runner's fires, over the same connection: one claim per
	// (hunt, sink) under store.DeliveryKey. It checks the lease against the settle.
	st := store.New(conn, o.Database)
	coord, err := lease.New(st.Leases(), lease.Options{Owner: o.Owner, Lease: o.Lease, Settle: o.Settle, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	o.Metrics.initialise(o.Config.Sinks)
	clients := map[string]*http.Client{}
	for _, s := range o.Config.Sinks {
		if s.TLS != nil {
			clients[s.Name] = newHTTPClient(s.TLS)
		}
	}
	return &Dispatcher{st: st, claims: coord, src: src, o: o, log: o.Logger, clients: clients}, nil
}

// Start polls until ctx ends. A delivery in flight then is abandoned with its claim, and a
// peer (or the next start) sends it again, with the same key, once the claim's lease expires.
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
	// Deferred counts claimed deliveries left unsent because their (hunt, sink) claim was lost,
	// or an earlier fire of its queue was not recorded, before their turn: the next holder
	// sends them, in order.
	Deferred int
}

// outcomeLost is deliver's outcome when the attempt's result was not recorded.
const outcomeLost = "lost"

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
	case outcomeLost:
		r.Lost++
	}
}

// queue is one (hunt, sink)'s claimable deliveries of a poll, oldest fire first: claimed as
// a whole under store.DeliveryKey and sent in order.
type queue struct {
	key string
	ids []store.DeliveryID
}

// Poll runs one pass: plan new committed fires, claim the (hunt, sink) queues with something
// due, deliver the claimed queues.
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
	want := map[string][]store.Owed{}
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
	works, now, err := d.st.PendingDeliveries(ctx, want, from.Unix(), 4*d.o.Batch)
	if err != nil {
		return res, fmt.Errorf("notify: read committed runs: %w", err)
	}
	local := time.Now() // now + time.Since(local) estimates the server clock
	d.polls++
	if d.o.Metrics != nil && d.polls%6 == 1 {
		if c, err := d.st.CountDeliveries(ctx, since); err == nil {
			d.o.Metrics.setCounts(c)
		}
	}

	// Planning goes in fire order per hunt and stops at a hunt's first failure, so a fire's
	// suppression always sees the keys its earlier fires recorded.
	broken := map[string]bool{}
	byKey := map[string]*queue{}
	var queues []*queue
	n := 0
	starts := map[store.DeliveryID]int64{}
	for _, w := range works {
		if broken[w.HuntID] {
			continue
		}
		var missing []string
		for _, o := range want[w.HuntID] {
			if _, ok := w.Sinks[o.Sink]; !ok && o.Covers(w) {
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
				w.Sinks[s] = store.SinkState{Status: status}
				if status == StatusSuppressed {
					res.Suppressed++
					d.o.Metrics.outcome(s, StatusSuppressed)
				}
			}
		}
		for _, o := range want[w.HuntID] {
			if !w.Sinks[o.Sink].Claimable(now) || n >= d.o.Batch {
				continue
			}
			id := store.DeliveryID{HuntID: w.HuntID, Fire: w.Fire, Sink: o.Sink}
			k := store.DeliveryKey(w.HuntID, o.Sink)
			q := byKey[k]
			if q == nil {
				q = &queue{key: k}
				byKey[k] = q
				queues = append(queues, q)
			}
			q.ids = append(q.ids, id) // works are in fire order
			starts[id] = w.WindowStart
			n++
		}
	}
	if len(queues) == 0 {
		return res, nil
	}

	if err := d.readSnoozes(ctx); err != nil {
		return res, err
	}
	// One claim per queue, for its oldest fire; the protocol decides which queues are ours.
	fires := make([]lease.Fire, len(queues))
	for i, q := range queues {
		fires[i] = lease.Fire{HuntID: q.key, Fire: q.ids[0].Fire}
	}
	claimed, err := d.claims.Claim(ctx, fires)
	if err != nil {
		return res, fmt.Errorf("notify: claim: %w", err)
	}
	if claimed.Err != nil {
		d.log.Warn("notify: some claims failed; they are tried again next poll", "failed", len(claimed.Failed), "error", claimed.Err)
	}
	if len(claimed.Won) == 0 {
		return res, nil
	}
	// Every won claim is renewed from now until its queue is done, so a queue waiting for a
	// free sender keeps its claim.
	holds := make(map[string]*hold, len(claimed.Won))
	var ids []store.DeliveryID
	for _, l := range claimed.Won {
		holds[l.HuntID] = d.hold(ctx, l)
		ids = append(ids, byKey[l.HuntID].ids...)
	}
	defer func() {
		for _, h := range holds {
			d.release(ctx, h)
		}
	}()
	trusted := claimed.Won[0].Trusted
	for _, l := range claimed.Won {
		trusted = earliest(trusted, l.Trusted)
	}
	sctx, scancel := trustedCtx(ctx, trusted)
	started, err := d.st.StartDeliveries(sctx, claimed.Won, ids)
	scancel()
	if err != nil {
		return res, fmt.Errorf("notify: start deliveries: %w", err)
	}
	res.Claimed = len(started)
	todo := map[string][]store.Delivery{}
	for _, c := range started {
		k := store.DeliveryKey(c.HuntID, c.Sink)
		todo[k] = append(todo[k], c)
	}

	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, d.o.Concurrency)
	for k, q := range todo {
		slices.SortFunc(q, func(a, b store.Delivery) int { return cmp.Compare(a.Fire, b.Fire) })
		h := holds[k]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			defer d.release(ctx, h) // frees the (hunt, sink) for its next fires at once
			for i, c := range q {
				if _, ok := h.current(); !ok {
					mu.Lock()
					res.Deferred += len(q) - i
					mu.Unlock()
					break
				}
				o := d.deliver(ctx, h, byID[c.HuntID], c, starts[c.DeliveryID], now.Add(time.Since(local)))
				mu.Lock()
				res.add(o)
				if o == outcomeLost {
					// The claim is gone or this fire's outcome is unknown: a later fire sent now
					// could overtake it, so the rest of the queue waits for the next holder.
					res.Deferred += len(q) - i - 1
				}
				mu.Unlock()
				if o == outcomeLost {
					break
				}
			}
		}()
	}
	wg.Wait()
	return res, nil
}

// hold keeps a won claim alive while its queue waits and is sent: it is renewed every lease/3,
// and lost when a renewal says so or its trust deadline passes unrenewed, which cancels ctx
// (the request in flight).
type hold struct {
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu   sync.Mutex
	l    lease.Lease
	lost bool
}

func (d *Dispatcher) hold(ctx context.Context, l lease.Lease) *hold {
	hctx, cancel := context.WithCancel(ctx)
	h := &hold{ctx: hctx, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{}), l: l}
	go d.renew(ctx, h)
	return h
}

// current returns the claim's lease and whether it may still be written under: not lost and
// within its trust deadline.
func (h *hold) current() (lease.Lease, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l, !h.lost && time.Now().Before(h.l.Trusted)
}

func (h *hold) lose() {
	h.mu.Lock()
	h.lost = true
	h.mu.Unlock()
	h.cancel()
}

// renew renews h until it is released, lost, or ctx ends. A renewal is not under h.ctx: it is
// never cut off mid-statement by the attempt's end.
func (d *Dispatcher) renew(ctx context.Context, h *hold) {
	defer close(h.done)
	for {
		l, _ := h.current()
		t := time.NewTimer(max(min(d.o.Lease/3, time.Until(l.Trusted)), 0))
		select {
		case <-h.stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !time.Now().Before(l.Trusted) {
			d.log.Warn("notify: claim not renewed within its trust deadline; stopping its deliveries", "key", l.HuntID)
			h.lose()
			return
		}
		next, err := d.claims.Renew(ctx, l)
		switch {
		case errors.Is(err, lease.ErrLost):
			d.log.Warn("notify: claim lost; stopping its deliveries", "key", l.HuntID, "error", err)
			h.lose()
			return
		case err != nil:
			d.log.Warn("notify: claim renewal failed; retrying", "key", l.HuntID, "error", err)
		default:
			d.log.Debug("notify: claim renewed", "key", l.HuntID, "until", next.Until, "trusted_for", time.Until(next.Trusted))
			h.mu.Lock()
			h.l = next
			h.mu.Unlock()
		}
	}
}

// release stops h's renewals and ends its lease (fenced: nothing is written unless the claim
// is still the newest and live), once. At shutdown (ctx done) the lease is kept: a request
// abandoned mid-flight may still be read by its sink, and a peer sends it again only once the
// lease has expired.
func (d *Dispatcher) release(ctx context.Context, h *hold) {
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		h.cancel()
		if ctx.Err() != nil {
			return
		}
		l, _ := h.current()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(d.o.Lease/4, time.Second))
		defer cancel()
		if err := d.claims.Release(rctx, l); err != nil {
			d.log.Debug("notify: release failed; the claim expires with its lease", "key", l.HuntID, "error", err)
		}
	})
}

// planFire records the fire's suppression keys (when the hunt suppresses) and writes the first
// row of each missing sink: pending, or suppressed when every finding was notified before.
func (d *Dispatcher) planFire(ctx context.Context, h *hunt.Hunt, w store.CommittedFire, missing []string) (string, error) {
	status := StatusPending
	if h.Suppress != nil && len(h.Suppress.By) > 0 {
		fs, err := d.st.FireFindings(ctx, w.HuntID, w.Fire, w.RunID)
		if err != nil {
			return "", err
		}
		send, _, err := d.unsuppressed(ctx, h, w.Fire, fs)
		if err != nil {
			return "", err
		}
		var keys []string
		for _, f := range send {
			if k := findingKey(f, h.Suppress.By); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		if err := d.st.RecordSuppress(ctx, w.HuntID, w.Fire, keys); err != nil {
			return "", err
		}
		if len(send) == 0 {
			status = StatusSuppressed
		}
	}
	keys := make([]string, len(missing))
	for i, sk := range missing {
		keys[i] = IdempotencyKey(w.HuntID, w.Fire, sk)
	}
	return status, d.st.PlanDeliveries(ctx, store.DeliveryPlan{HuntID: w.HuntID, Fire: w.Fire, RunID: w.RunID,
		Sinks: missing, Keys: keys, Status: status, Owner: d.o.Owner})
}

// unsuppressed filters a fire's findings down to those not notified by an earlier fire within
// the hunt's suppress.for; it returns them and how many were held back.
func (d *Dispatcher) unsuppressed(ctx context.Context, h *hunt.Hunt, fire int64, fs []store.FireFinding) ([]store.FireFinding, int, error) {
	if h.Suppress == nil || len(h.Suppress.By) == 0 {
		return fs, 0, nil
	}
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = findingKey(f, h.Suppress.By)
	}
	sup, err := d.st.SuppressedKeys(ctx, h.ID, fire, h.Suppress.For, slices.Compact(slices.Sorted(slices.Values(keys))))
	if err != nil {
		return nil, 0, err
	}
	out := make([]store.FireFinding, 0, len(fs))
	for i, f := range fs {
		if !sup[keys[i]] {
			out = append(out, f)
		}
	}
	return out, len(fs) - len(out), nil
}

// writeTimeout bounds a delivery write and its read-back.
const writeTimeout = 30 * time.Second

// trustedCtx is the context of a write under a claim trusted until trusted: the store lets
// the statement run on the server for half of its deadline (store.CommitBound), that is until
// trusted at most, and fences it on the lease outliving that, so whatever it writes lands
// while the claim is still this pod's; the other half is the read-back's.
func trustedCtx(ctx context.Context, trusted time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(writeTimeout, 2*time.Until(trusted)))
}

// deliver sends one started delivery under h and writes its outcome; now estimates the server
// clock. It returns the outcome recorded, or outcomeLost when none was.
func (d *Dispatcher) deliver(ctx context.Context, h *hold, hu *hunt.Hunt, c store.Delivery, windowStart int64, now time.Time) string {
	log := d.log.With("hunt_id", c.HuntID, "fire", time.Unix(c.Fire, 0).UTC().Format(time.RFC3339), "sink", c.Sink,
		"attempt", c.Attempts, "idempotency_key", c.IdempotencyKey)
	status, lastErr, backoff := d.attempt(h.ctx, hu, c, windowStart, now)
	l, ok := h.current()
	// An answer the sink gave is recorded even while shutting down (fenced, so only while the
	// claim holds); an attempt cut short by the shutdown or a lost claim is left to the lease.
	if status == StatusRetry && (ctx.Err() != nil || !ok) {
		log.Info("notify: delivery abandoned with its claim; it is sent again after the lease", "lost", !ok)
		d.o.Metrics.outcome(c.Sink, outcomeLost)
		return outcomeLost
	}
	if !ok {
		// Past the trust deadline this pod may no longer hold the claim: the next holder
		// sends the delivery again, with the same key.
		log.Warn("notify: claim lost before the outcome was written; the delivery will be sent again", "outcome", status)
		d.o.Metrics.outcome(c.Sink, outcomeLost)
		return outcomeLost
	}
	wctx, wcancel := trustedCtx(context.WithoutCancel(ctx), l.Trusted)
	defer wcancel()
	if err := d.st.FinishDelivery(wctx, l, c, store.DeliveryOutcome{Status: status, LastError: lastErr, Backoff: backoff}); err != nil {
		if errors.Is(err, store.ErrFenced) {
			log.Warn("notify: claim lost before the outcome landed; the delivery will be sent again", "outcome", status)
		} else {
			log.Warn("notify: could not record the outcome; the delivery will be sent again", "outcome", status, "error", err)
			d.o.Metrics.storeError()
		}
		d.o.Metrics.outcome(c.Sink, outcomeLost)
		return outcomeLost
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
func (d *Dispatcher) attempt(ctx context.Context, h *hunt.Hunt, c store.Delivery, windowStart int64, now time.Time) (status, lastErr string, backoff time.Duration) {
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
		return StatusRetry, err.Error(), d.backoff(c.Attempts)
	}
	fs, err := d.st.FireFindings(ctx, c.HuntID, c.Fire, c.RunID)
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
		FindingsTotal: len(send), Suppressed: suppressed, IdempotencyKey: c.IdempotencyKey,
		Runbook: h.Runbook, Mitre: h.Mitre, Revision: h.Revision()}
	if sink.Type == TypeAlertmanager {
		// From the attempt, not the fire: an alert delivered late (after retries) must still
		// arrive firing, or Alertmanager would record it resolved and notify nobody.
		n.EndsAt = now.Add(sink.ResolveAfter)
	}
	for _, f := range send[:min(len(send), d.o.Config.MaxFindings)] {
		n.Findings = append(n.Findings, json.RawMessage(f.JSON))
		n.Details = append(n.Details, FindingDetail{Title: f.Title, Severity: cmp.Or(f.Severity, h.Severity), DedupKey: f.DedupKey})
	}
	body, err := n.Body(sink.Type)
	if err != nil {
		return StatusDead, err.Error(), 0
	}
	client := d.o.HTTPClient
	if cl, ok := d.clients[sink.Name]; ok {
		client = cl
	}
	r := post(ctx, client, sink, c.IdempotencyKey, body)
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
