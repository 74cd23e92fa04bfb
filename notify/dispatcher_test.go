package notify

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// Two Dispatchers, a receiver that fails for a while and then recovers: every committed fire
// with findings reaches it and is recorded delivered, each (hunt, fire, sink) under one key and
// one body across all attempts of both Dispatchers, never two attempts of a key at once, and
// nothing of a run that did not commit.
func TestEveryCommittedFireDeliveredOnceKeyAcrossRetriesAndDispatchers(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	recv.fail = 7
	key := secret(t)
	cfg := webhookConfig(recv.URL, key)
	hunts := []hunt.Hunt{{ID: "brute", Severity: "high", Labels: map[string]string{"team": "secops"}}, {ID: "dns", Severity: "low"}}

	base := baseFire()
	want := map[string]bool{}
	for i := range 3 {
		for _, h := range []string{"brute", "dns"} {
			f := base.Add(time.Duration(i) * 5 * time.Minute)
			commit(t, db, h, f, fmt.Sprintf(`{"host":"h%d","hunt":%q}`, i, h), fmt.Sprintf(`{"host":"x%d"}`, i))
			want[IdempotencyKey(h, f.Unix(), "soc")] = true
		}
	}
	commit(t, db, "brute", base.Add(20*time.Minute)) // committed, no findings: nothing to send
	// An attempt that never committed, for a fire of its own and for a committed fire.
	attempt(t, db, "brute", base.Add(25*time.Minute), uuid.New(), `{"host":"never-committed"}`)
	attempt(t, db, "dns", base, uuid.New(), `{"host":"orphan-of-committed-fire"}`)

	a := newDispatcher(t, db, hunts, testOptions(db, cfg, "pod-a"))
	b := newDispatcher(t, db, hunts, testOptions(db, cfg, "pod-b"))
	stopA, stopB := run(t, a), run(t, b)
	chtest.Eventually(t, 120*time.Second, "every committed fire delivered", func() bool {
		return countStatus(deliveryRows(t, db), StatusDelivered) == len(want)
	})
	stopA()
	stopB()

	reqs := recv.requests()
	bodies := map[string]string{}
	for _, q := range reqs {
		if !want[q.Key] {
			t.Errorf("request with unexpected key %q: %s", q.Key, q.Body)
		}
		if prev, ok := bodies[q.Key]; ok && prev != string(q.Body) {
			t.Errorf("key %s sent with two bodies:\n%s\n%s", q.Key, prev, q.Body)
		}
		bodies[q.Key] = string(q.Body)
		if q.Signature != Sign(key, q.Body) {
			t.Errorf("signature %q does not match the body", q.Signature)
		}
		if strings.Contains(string(q.Body), "never-committed") || strings.Contains(string(q.Body), "orphan") {
			t.Errorf("findings of an uncommitted attempt were sent: %s", q.Body)
		}
	}
	okByKey := map[string]int{}
	for _, p := range recv.ok(t) {
		okByKey[p.IdempotencyKey]++
		if p.FindingsTotal != 2 || len(p.Findings) != 2 {
			t.Errorf("%s %s: findings_total %d, %d findings; want 2", p.HuntID, p.Fire, p.FindingsTotal, len(p.Findings))
		}
		if p.IdempotencyKey != IdempotencyKey(p.HuntID, mustTime(t, p.Fire).Unix(), "soc") {
			t.Errorf("payload key %s is not the key of %s %s", p.IdempotencyKey, p.HuntID, p.Fire)
		}
	}
	for k := range want {
		// At least once: an outcome whose write did not land (a claim lost to a starved
		// engine) is sent again, with the same key and body; never two at once (overlap).
		if okByKey[k] < 1 {
			t.Errorf("key %s delivered %d times, want at least 1", k, okByKey[k])
		} else if okByKey[k] > 1 {
			t.Logf("key %s delivered %d times (an outcome not recorded was sent again)", k, okByKey[k])
		}
	}
	if recv.overlap {
		t.Error("two attempts of one (hunt, fire, sink) were in flight at once")
	}
	if len(reqs) <= len(want) {
		t.Errorf("%d requests for %d deliveries: the receiver's failures were not retried", len(reqs), len(want))
	}
	ds := deliveryRows(t, db)
	if got := countStatus(ds, StatusDelivered); got != len(want) || len(ds) != len(want) {
		t.Errorf("delivery table: %d delivered of %d rows, want %d", got, len(ds), len(want))
	}
}

func mustTime(t testing.TB, s string) time.Time {
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// A Dispatcher killed mid-delivery (its context cancelled while the receiver holds the
// request) leaves its lease; a peer completes the delivery after the lease, with the same key.
func TestKilledDispatcherDeliveryCompletedByPeerAfterLease(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	recv.hold = make(chan struct{})
	recv.arrived = make(chan string, 10)
	cfg := webhookConfig(recv.URL, nil)
	hunts := []hunt.Hunt{{ID: "brute", Severity: "high"}}
	fire := baseFire()
	commit(t, db, "brute", fire, `{"host":"a"}`)

	oa := testOptions(db, cfg, "pod-a")
	oa.Lease = 2 * time.Second
	a := newDispatcher(t, db, hunts, oa)
	stopA := run(t, a)
	first := <-recv.arrived
	stopA() // the request is still held: pod-a dies mid-send

	k := dk("brute", fire.Unix(), "soc")
	if d := deliveryRows(t, db)[k]; d.Status != StatusDelivering || d.Owner != "pod-a" {
		t.Fatalf("after the kill: %+v, want delivering by pod-a with its lease left", d)
	}
	_, leaseUntil := claimOf(t, db, "brute", "soc")

	close(recv.hold)
	b := newDispatcher(t, db, hunts, testOptions(db, cfg, "pod-b"))
	stopB := run(t, b)
	chtest.Eventually(t, 30*time.Second, "the peer's delivery", func() bool { return len(recv.ok(t)) == 1 })
	stopB()
	second := recv.ok(t)[0]
	if second.IdempotencyKey != first {
		t.Errorf("peer used key %s, the killed pod %s", second.IdempotencyKey, first)
	}
	var claimed time.Time
	if err := db.Conn.QueryRow(context.Background(), "SELECT min(updated) FROM "+db.Name+".hunt_delivery WHERE owner = 'pod-b' AND status = 'delivering'").Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed.Before(leaseUntil) {
		t.Errorf("pod-b claimed at %s, before pod-a's lease ended at %s", claimed, leaseUntil)
	}
	if d := deliveryRows(t, db)[k]; d.Status != StatusDelivered || d.Owner != "pod-b" || d.Attempts != 2 {
		t.Errorf("final row %+v, want delivered by pod-b on attempt 2", d)
	}
}

// Suppression is decided from hunt_suppress, so it holds when fires are delivered by
// different Dispatchers.
func TestSuppressionAcrossDispatchers(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	cfg := webhookConfig(recv.URL, nil)
	hunts := []hunt.Hunt{{ID: "brute", Severity: "high", Suppress: &hunt.Suppress{By: []string{"host"}, For: time.Hour}}}
	a := newDispatcher(t, db, hunts, testOptions(db, cfg, "pod-a"))
	b := newDispatcher(t, db, hunts, testOptions(db, cfg, "pod-b"))
	ctx := context.Background()
	base := baseFire()

	step := func(d *Dispatcher, fire time.Time, findings ...string) {
		t.Helper()
		commit(t, db, "brute", fire, findings...)
		chtest.Eventually(t, 30*time.Second, "fire "+fire.Format(time.RFC3339)+" final", func() bool {
			if _, err := d.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			st := deliveryRows(t, db)[dk("brute", fire.Unix(), "soc")].Status
			return st == StatusDelivered || st == StatusSuppressed
		})
	}
	step(a, base, `{"host":"a","n":1}`, `{"host":"b","n":1}`)
	step(b, base.Add(5*time.Minute), `{"host":"b","n":2}`, `{"host":"c","n":2}`)
	step(a, base.Add(10*time.Minute), `{"host":"b","n":3}`) // b and c were notified within the hour
	step(b, base.Add(2*time.Hour), `{"host":"a","n":4}`)    // a's suppression ran out

	got := recv.ok(t)
	if len(got) != 3 {
		t.Fatalf("%d notifications, want 3 (the third fire is fully suppressed): %+v", len(got), got)
	}
	hosts := func(p WebhookPayload) string {
		var hs []string
		for _, f := range p.Findings {
			var v struct{ Host string }
			_ = json.Unmarshal(f, &v)
			hs = append(hs, v.Host)
		}
		return strings.Join(hs, ",")
	}
	for i, want := range []struct {
		hosts      string
		suppressed int
	}{{"a,b", 0}, {"c", 1}, {"a", 0}} {
		if h := hosts(got[i]); !sameSet(h, want.hosts) || got[i].Suppressed != want.suppressed || got[i].FindingsTotal != len(strings.Split(want.hosts, ",")) {
			t.Errorf("notification %d: hosts %s, suppressed %d, total %d; want %s, %d", i, h, got[i].Suppressed, got[i].FindingsTotal, want.hosts, want.suppressed)
		}
	}
	if st := deliveryRows(t, db)[dk("brute", base.Add(10*time.Minute).Unix(), "soc")].Status; st != StatusSuppressed {
		t.Errorf("fully suppressed fire has status %q", st)
	}
}

func sameSet(a, b string) bool {
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	m := map[string]int{}
	for _, x := range as {
		m[x]++
	}
	for _, x := range bs {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// A 4xx other than 429 is dead-lettered at once; Retry re-queues it with the same key.
func TestPermanentFailureDeadLetteredThenRequeued(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	recv.fail, recv.failCode = 1, http.StatusBadRequest
	cfg := webhookConfig(recv.URL, nil)
	hunts := []hunt.Hunt{{ID: "brute", Severity: "high"}}
	fire := baseFire()
	commit(t, db, "brute", fire, `{"host":"a"}`)
	d := newDispatcher(t, db, hunts, testOptions(db, cfg, "pod-a"))
	ctx := context.Background()
	k := dk("brute", fire.Unix(), "soc")
	chtest.Eventually(t, 30*time.Second, "dead letter", func() bool {
		_, _ = d.Poll(ctx)
		return deliveryRows(t, db)[k].Status == StatusDead
	})
	if row := deliveryRows(t, db)[k]; row.Attempts != 1 || !strings.Contains(row.LastError, "400") {
		t.Errorf("dead letter %+v: want one attempt and the 400 in last_error", row)
	}
	rep, err := Status(ctx, db.Conn, db.Name, fire.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Dead != 1 || len(rep.Deliveries) != 1 || rep.Deliveries[0].Status != StatusDead {
		t.Errorf("status: %+v", rep)
	}
	// Polling again does not resend a dead letter.
	if _, err := d.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(recv.requests()); n != 1 {
		t.Fatalf("%d requests before the re-queue, want 1", n)
	}
	n, err := Retry(ctx, db.Conn, db.Name, "operator", RetryFilter{HuntID: "brute", Since: fire.Add(-time.Hour)})
	if err != nil || n != 1 {
		t.Fatalf("Retry = %d, %v; want 1", n, err)
	}
	chtest.Eventually(t, 30*time.Second, "re-queued delivery", func() bool {
		_, _ = d.Poll(ctx)
		return deliveryRows(t, db)[k].Status == StatusDelivered
	})
	reqs := recv.requests()
	if len(reqs) != 2 || reqs[0].Key != reqs[1].Key || string(reqs[0].Body) != string(reqs[1].Body) {
		t.Errorf("requests %+v: want the same key and body twice", reqs)
	}
}

// Past the retry horizon a retryable failure is dead-lettered instead of retried.
func TestRetryHorizonDeadLetters(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	recv.fail = 1000
	cfg := webhookConfig(recv.URL, nil)
	cfg.Horizon = time.Nanosecond
	fire := baseFire()
	commit(t, db, "brute", fire, `{"host":"a"}`)
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute"}}, testOptions(db, cfg, "pod-a"))
	k := dk("brute", fire.Unix(), "soc")
	chtest.Eventually(t, 30*time.Second, "dead letter", func() bool {
		_, _ = d.Poll(context.Background())
		return deliveryRows(t, db)[k].Status == StatusDead
	})
	if row := deliveryRows(t, db)[k]; !strings.Contains(row.LastError, "retry horizon") || row.Attempts != 1 {
		t.Errorf("row %+v", row)
	}
}

// A sink URL read from a file (a Slack webhook is a credential) never reaches last_error.
func TestSinkURLNeverInLastError(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	token := string(secret(t))
	url := recv.URL + "/services/" + token
	recv.Close() // connection refused from now on
	cfg := &Config{Sinks: []Sink{{Name: "chat", Type: TypeSlack, URLs: []string{url}, Timeout: time.Second, Lookback: testHistory}},
		Routes: []Route{{Sinks: []string{"chat"}}}, MaxFindings: 20, Horizon: time.Hour}
	fire := baseFire()
	commit(t, db, "brute", fire, `{"host":"a"}`)
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute"}}, testOptions(db, cfg, "pod-a"))
	k := dk("brute", fire.Unix(), "chat")
	chtest.Eventually(t, 30*time.Second, "a failed attempt", func() bool {
		_, _ = d.Poll(context.Background())
		return deliveryRows(t, db)[k].Status == StatusRetry
	})
	if le := deliveryRows(t, db)[k].LastError; strings.Contains(le, token) || !strings.Contains(le, "chat") {
		t.Errorf("last_error %q: must name the sink and never carry its URL", le)
	}
}

// A hunt routed nowhere (notify: [] or no matching route) writes no delivery rows.
func TestUnroutedHuntsWriteNothing(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	cfg := webhookConfig(recv.URL, nil)
	cfg.Routes = []Route{{Match: map[string]string{"severity": "critical"}, Sinks: []string{"soc"}}}
	fire := baseFire()
	commit(t, db, "quiet", fire, `{"host":"a"}`)
	commit(t, db, "optout", fire, `{"host":"a"}`)
	commit(t, db, "crit", fire, `{"host":"a"}`)
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "quiet", Severity: "low"}, {ID: "optout", Severity: "critical", Notify: []string{}},
		{ID: "crit", Severity: "critical"}}, testOptions(db, cfg, "pod-a"))
	chtest.Eventually(t, 30*time.Second, "crit delivered", func() bool {
		_, _ = d.Poll(context.Background())
		return len(recv.ok(t)) == 1
	})
	ds := deliveryRows(t, db)
	if len(ds) != 1 || ds[dk("crit", fire.Unix(), "soc")].Status != StatusDelivered {
		t.Errorf("delivery rows %+v, want only crit's", ds)
	}
}

// A sink slower than the lease: the sender renews its lease while it waits, so a second
// Dispatcher does not claim the delivery while the slow request is out.
func TestSlowSinkLeaseRenewedNoSecondSender(t *testing.T) {
	db := testDB(t)
	recv := newReceiver(t)
	recv.hold = make(chan struct{})
	recv.arrived = make(chan string, 10)
	cfg := webhookConfig(recv.URL, nil)
	cfg.Sinks[0].Timeout = time.Minute
	hunts := []hunt.Hunt{{ID: "brute"}}
	fire := baseFire()
	commit(t, db, "brute", fire, `{"host":"a"}`)
	o := testOptions(db, cfg, "pod-a")
	o.Lease = 4 * time.Second // renewed every 1.3s: a renewal on a loaded engine can take a second
	a := newDispatcher(t, db, hunts, o)
	o.Owner = "pod-b"
	b := newDispatcher(t, db, hunts, o)
	run(t, a)
	<-recv.arrived
	run(t, b)
	// Wait until the lease has been renewed well past its first length, then let the sink answer.
	_, first := claimOf(t, db, "brute", "soc")
	chtest.Eventually(t, 30*time.Second, "renewals past two leases", func() bool {
		_, until := claimOf(t, db, "brute", "soc")
		return until.After(first.Add(2 * o.Lease))
	})
	close(recv.hold)
	chtest.Eventually(t, 30*time.Second, "delivered", func() bool {
		return deliveryRows(t, db)[dk("brute", fire.Unix(), "soc")].Status == StatusDelivered
	})
	// A renewal slower than the whole lease (a starved engine) legitimately loses the claim and
	// cancels the request; what must never happen is a second request while one is out.
	if recv.overlap || len(recv.ok(t)) != 1 {
		t.Errorf("overlap %v, %d answered requests; want one sender at a time and one delivery", recv.overlap, len(recv.ok(t)))
	}
}

// Redirects are not followed: a 3xx is a permanent failure, and the signed body goes nowhere else.
func TestRedirectIsPermanent(t *testing.T) {
	other := newReceiver(t)
	redirect := httptest.NewServer(http.RedirectHandler(other.URL, http.StatusTemporaryRedirect))
	defer redirect.Close()
	s := Sink{Name: "soc", Type: TypeWebhook, URLs: []string{redirect.URL}, Secret: secret(t), Timeout: 5 * time.Second}
	r := post(context.Background(), newHTTPClient(nil), s, "k", []byte(`{}`))
	if r.outcome != permanent || len(other.requests()) != 0 {
		t.Errorf("outcome %v (%v), %d requests followed the redirect", r.outcome, r.err, len(other.requests()))
	}
}

// Deliveries waiting out a long backoff on a broken sink do not crowd newer fires out of a
// poll: every fire still reaches the healthy sink.
func TestBackoffDoesNotStarveNewerFires(t *testing.T) {
	db := testDB(t)
	up, down := newReceiver(t), newReceiver(t)
	down.fail = 1 << 30
	cfg := &Config{Sinks: []Sink{{Name: "up", Type: TypeWebhook, URLs: []string{up.URL}, Timeout: 5 * time.Second, Lookback: testHistory},
		{Name: "down", Type: TypeWebhook, URLs: []string{down.URL}, Timeout: 5 * time.Second, Lookback: testHistory}},
		Routes: []Route{{Sinks: []string{"up", "down"}}}, MaxFindings: 20, Horizon: HorizonDefault}
	o := testOptions(db, cfg, "pod-a")
	o.Batch, o.RetryBase, o.RetryMax = 2, time.Hour, time.Hour // a poll reads at most 8 fires
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute"}}, o)
	base := baseFire()
	for i := range 12 {
		commit(t, db, "brute", base.Add(time.Duration(i)*time.Minute), `{"host":"a"}`)
	}
	chtest.Eventually(t, 60*time.Second, "all 12 fires at the healthy sink", func() bool {
		if _, err := d.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		return len(up.ok(t)) == 12
	})
}

// A sink that echoes the request (its Authorization header) in an error answer does not get
// its bearer token or basic password into hunt_delivery.last_error or the Dispatcher's log.
func TestEchoingSinkSecretsNotStoredOrLogged(t *testing.T) {
	db := testDB(t)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "upstream said no to Authorization: %s", r.Header.Get("Authorization"))
	}))
	defer echo.Close()
	token, pass := string(secret(t)), string(secret(t))
	cfg := &Config{Sinks: []Sink{
		{Name: "bearer", Type: TypeAlertmanager, URLs: []string{echo.URL}, Bearer: token, Timeout: 5 * time.Second, Lookback: testHistory},
		{Name: "basic", Type: TypeWebhook, URLs: []string{echo.URL}, User: "hunt", Pass: pass, Timeout: 5 * time.Second, Lookback: testHistory}},
		Routes: []Route{{Sinks: []string{"bearer", "basic"}}}, MaxFindings: 20, Horizon: time.Hour}
	fire := baseFire()
	commit(t, db, "brute", fire, `{"host":"a"}`)
	var logs syncBuffer
	o := testOptions(db, cfg, "pod-a")
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	d := newDispatcher(t, db, []hunt.Hunt{{ID: "brute"}}, o)
	chtest.Eventually(t, 30*time.Second, "a failed attempt of each sink", func() bool {
		_, _ = d.Poll(context.Background())
		ds := deliveryRows(t, db)
		return ds[dk("brute", fire.Unix(), "bearer")].Status == StatusRetry && ds[dk("brute", fire.Unix(), "basic")].Status == StatusRetry
	})
	basic := base64.StdEncoding.EncodeToString([]byte("hunt:" + pass))
	for k, dl := range deliveryRows(t, db) {
		if !strings.Contains(dl.LastError, "upstream said no") || !strings.Contains(dl.LastError, "[redacted]") {
			t.Errorf("%s: last_error %q, want the answer with the credential redacted", k.Sink, dl.LastError)
		}
		for _, sec := range []string{token, pass, basic} {
			if strings.Contains(dl.LastError, sec) {
				t.Errorf("%s: last_error carries a credential: %q", k.Sink, dl.LastError)
			}
		}
	}
	for _, sec := range []string{token, pass, basic} {
		if strings.Contains(logs.String(), sec) {
			t.Errorf("the log carries a credential:\n%s", logs.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
