package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// testDB is a fresh database with the coordination tables (hunt_watermark keeps one row per
// committed fire, as the runner commits it).
func testDB(t testing.TB) *chtest.DB {
	t.Helper()
	return chtest.NewWithSchema(t)
}

// commit writes a committed run of (hunt, fire) with the given findings, as the runner does:
// findings rows under run_id, then the watermark row carrying the run.
func commit(t testing.TB, db *chtest.DB, hunt string, fire time.Time, findings ...string) uuid.UUID {
	t.Helper()
	return commitAt(t, db, hunt, fire, time.Time{}, findings...)
}

// commitAt is commit with the commit's time (hunt_watermark.updated) given; zero is now on
// the server clock.
func commitAt(t testing.TB, db *chtest.DB, hunt string, fire, committed time.Time, findings ...string) uuid.UUID {
	t.Helper()
	run := uuid.New()
	attempt(t, db, hunt, fire, run, findings...)
	err := db.Conn.Exec(context.Background(), "INSERT INTO "+schema.QuoteIdent(db.Name)+"."+schema.TableWatermark+
		" (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started)"+
		" SELECT {h:String}, toDateTime({f:Int64}, 'UTC'), generateUUIDv4(),"+
		" if({c:Int64} = 0, now64(6), fromUnixTimestamp64Micro({c:Int64}, 'UTC')), toUUID({r:String}), 'test',"+
		" toDateTime({f:Int64} - 300, 'UTC'), {n:UInt64}, now64(6)",
		clickhouse.Named("h", hunt), clickhouse.Named("f", fire.Unix()), clickhouse.Named("r", run.String()),
		clickhouse.Named("n", uint64(len(findings))), clickhouse.Named("c", unixMicro(committed)))
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// attempt writes findings rows of a run without committing it.
func attempt(t testing.TB, db *chtest.DB, hunt string, fire time.Time, run uuid.UUID, findings ...string) {
	t.Helper()
	if len(findings) == 0 {
		return
	}
	err := db.Conn.Exec(context.Background(), "INSERT INTO "+schema.QuoteIdent(db.Name)+"."+schema.TableFindings+
		" (hunt_id, fire, finding_id, finding, severity, labels, run_id, found)"+
		" SELECT {h:String}, toDateTime({f:Int64}, 'UTC'), cityHash64(x), x, 'high', map('team', 'secops'), toUUID({r:String}), now64(6)"+
		" FROM (SELECT arrayJoin({fs:Array(String)}) AS x)",
		clickhouse.Named("h", hunt), clickhouse.Named("f", fire.Unix()), clickhouse.Named("r", run.String()),
		clickhouse.Named("fs", findings))
	if err != nil {
		t.Fatal(err)
	}
}

// received is one request a test receiver got.
type received struct {
	Key, Signature, Path string
	Body                 []byte
	Code                 int
}

// receiver is a real HTTP server on loopback. It answers failCode to the first fail requests,
// can hold requests until released, and records whether two requests with the same
// idempotency key were ever in flight at once.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	reqs     []received
	fail     int
	failCode int
	hold     chan struct{} // non-nil: requests wait for it to close (or the client to give up)
	arrived  chan string   // a key per request, if non-nil (buffered)
	inflight map[string]int
	overlap  bool
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{failCode: http.StatusServiceUnavailable, inflight: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	key := req.Header.Get("Idempotency-Key")
	r.mu.Lock()
	r.inflight[key]++
	if r.inflight[key] > 1 {
		r.overlap = true
	}
	hold, arrived := r.hold, r.arrived
	code := http.StatusOK
	if r.fail > 0 {
		r.fail--
		code = r.failCode
	}
	r.mu.Unlock()
	if arrived != nil {
		arrived <- key
	}
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			code = 0
		}
	}
	r.mu.Lock()
	r.inflight[key]--
	r.reqs = append(r.reqs, received{Key: key, Signature: req.Header.Get(SignatureHeader), Path: req.URL.Path, Body: body, Code: code})
	r.mu.Unlock()
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "0")
	}
	if code != 0 {
		w.WriteHeader(code)
	}
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.reqs...)
}

// ok returns the webhook payloads answered 2xx.
func (r *receiver) ok(t testing.TB) []WebhookPayload {
	var out []WebhookPayload
	for _, q := range r.requests() {
		if q.Code/100 == 2 {
			var p WebhookPayload
			if err := json.Unmarshal(q.Body, &p); err != nil {
				t.Fatalf("payload %s: %v", q.Body, err)
			}
			out = append(out, p)
		}
	}
	return out
}

func secret(t testing.TB) []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte(hex.EncodeToString(b))
}

func webhookConfig(url string, key []byte) *Config {
	return &Config{
		Sinks:       []Sink{{Name: "soc", Type: TypeWebhook, URLs: []string{url}, Secret: key, Timeout: 5 * time.Second, Lookback: testHistory}},
		Routes:      []Route{{Sinks: []string{"soc"}}},
		MaxFindings: NotifyFindingsDefault, Horizon: HorizonDefault,
	}
}

// testOptions are fast: short poll and backoff. The settle is long enough that a claim insert
// on a starved engine is still acknowledged within it (a later one is lost, and waits out the
// provisional lease). The lease is long enough that a
// renewal on a starved engine does not lose it (a lost lease means a legitimate resend, which
// the exactly-one-delivery assertions would misread); tests of expiry shorten it.
func testOptions(db *chtest.DB, cfg *Config, owner string) Options {
	var log *slog.Logger
	if os.Getenv("NOTIFY_TEST_LOG") != "" { // the Dispatchers' logs, to see why a test waits
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("owner", owner)
	}
	return Options{Logger: log, Config: cfg, Database: db.Name, Owner: owner, Poll: 20 * time.Millisecond,
		Settle: 400 * time.Millisecond, Lease: 6 * time.Second, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond}
}

func newDispatcher(t testing.TB, db *chtest.DB, hunts []hunt.Hunt, o Options) *Dispatcher {
	t.Helper()
	for i := range hunts {
		hunts[i].Enabled = true
	}
	set := hunt.NewSet(hunts, "test", "")
	d, err := New(db.Conn, func() *hunt.Set { return set }, o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// run starts d until the returned stop is called (and waits for it to return).
func run(t testing.TB, d *Dispatcher) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// key names a delivery in the tests.
type key = store.DeliveryID

// deliveryRows reads the newest delivery rows (the enablement markers left out).
func deliveryRows(t testing.TB, db *chtest.DB) map[key]Delivery {
	t.Helper()
	rows, err := db.Conn.Query(context.Background(), `SELECT hunt_id, toInt64(fire), sink, t.1, t.2, t.3, t.4, t.5
FROM (SELECT hunt_id, fire, sink, argMax((toString(status), attempts, last_error, owner, idempotency_key), (updated, claim_id)) AS t
      FROM `+schema.QuoteIdent(db.Name)+`.`+schema.TableDelivery+` WHERE hunt_id != '' GROUP BY hunt_id, fire, sink)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[key]Delivery{}
	for rows.Next() {
		var k key
		var d Delivery
		if err := rows.Scan(&k.HuntID, &k.Fire, &k.Sink, &d.Status, &d.Attempts, &d.LastError, &d.Owner, &d.IdempotencyKey); err != nil {
			t.Fatal(err)
		}
		d.HuntID, d.Sink, d.Fire = k.HuntID, k.Sink, time.Unix(k.Fire, 0)
		out[k] = d
	}
	return out
}

// claimOf reads the newest hunt_lease row of (hunt, sink)'s delivery key: its owner and
// lease_until (zero: none).
func claimOf(t testing.TB, db *chtest.DB, hunt, sink string) (owner string, until time.Time) {
	t.Helper()
	err := db.Conn.QueryRow(context.Background(), "SELECT argMax(owner, (claimed, claim_id)), argMax(lease_until, (claimed, claim_id)) FROM "+
		schema.QuoteIdent(db.Name)+"."+schema.TableLease+" WHERE hunt_id = {k:String}",
		clickhouse.Named("k", store.DeliveryKey(hunt, sink))).Scan(&owner, &until)
	if err != nil {
		t.Fatal(err)
	}
	return owner, until
}

func countStatus(ds map[key]Delivery, status string) int {
	n := 0
	for _, d := range ds {
		if d.Status == status {
			n++
		}
	}
	return n
}

// baseFire is a recent whole minute, inside the Dispatcher's lookback.
func baseFire() time.Time { return time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Hour) }

// testHistory is the lookback of the tests' sinks: their fires are committed just before the
// Dispatcher starts, that is before it first enables the sink, and are owed all the same.
const testHistory = time.Hour

func unixMicro(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func dk(hunt string, fire int64, sink string) key { return key{HuntID: hunt, Fire: fire, Sink: sink} }
