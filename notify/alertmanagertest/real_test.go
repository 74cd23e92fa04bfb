package alertmanagertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/notify"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// built is the Alertmanager binary, built once per test binary from the module go.mod pins.
var built struct {
	once sync.Once
	dir  string // removed when the test binary ends: about 60 MB of source and binary
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// alertmanagerBinary builds cmd/alertmanager from Alertmanager's own module (the version this
// module requires). The module as published lacks the web UI's compiled assets, which its
// main package embeds, so the module is copied and two placeholder pages are added; nothing
// else is changed.
func alertmanagerBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/prometheus/alertmanager").Output()
		if err != nil {
			built.err = fmt.Errorf("locate the alertmanager module: %w", err)
			return
		}
		src := strings.TrimSpace(string(out))
		dir, err := os.MkdirTemp("", "hunt-runner-alertmanager-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		mod := filepath.Join(dir, "src")
		if err := os.CopyFS(mod, os.DirFS(src)); err != nil {
			built.err = err
			return
		}
		for _, ui := range []string{"elm", "mantine"} {
			p := filepath.Join(mod, "ui", "app", "dist", ui)
			if err := os.MkdirAll(p, 0o755); err == nil {
				err = os.WriteFile(filepath.Join(p, "index.html"), []byte("<!doctype html><title>alertmanager</title>"), 0o644)
			}
			if err != nil {
				built.err = err
				return
			}
		}
		bin := filepath.Join(dir, "alertmanager")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/alertmanager")
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build alertmanager: %w\n%s", err, out)
			return
		}
		built.path = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// amNotification is what Alertmanager's webhook receiver posts.
type amNotification struct {
	Status string `json:"status"`
	Alerts []struct {
		Status       string            `json:"status"`
		Labels       map[string]string `json:"labels"`
		Annotations  map[string]string `json:"annotations"`
		GeneratorURL string            `json:"generatorURL"`
		Fingerprint  string            `json:"fingerprint"`
	} `json:"alerts"`
}

// inbox records Alertmanager's webhook notifications.
type inbox struct {
	mu   sync.Mutex
	got  []amNotification
	seen []time.Time
}

func (b *inbox) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var n amNotification
	if err := json.Unmarshal(body, &n); err == nil {
		b.mu.Lock()
		b.got = append(b.got, n)
		b.seen = append(b.seen, time.Now())
		b.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

func (b *inbox) all() []amNotification {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]amNotification(nil), b.got...)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startAlertmanager runs a real Alertmanager whose only receiver is a webhook to hook, grouped
// by alertname, with the given group_interval and a repeat_interval of an hour: within a test,
// a notification after the first of a group comes only from a change of its alerts.
func startAlertmanager(t *testing.T, hook string, groupInterval time.Duration) string {
	return startAlertmanagerWeb(t, hook, groupInterval, "", nil)
}

// startAlertmanagerWeb is startAlertmanager with a --web.config.file (TLS, basic auth) and
// the client that passes it, for the readiness check.
func startAlertmanagerWeb(t *testing.T, hook string, groupInterval time.Duration, webConfig string, client *http.Client) string {
	t.Helper()
	bin := alertmanagerBinary(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: %s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: %s
        send_resolved: false
`, groupInterval, hook)
	if err := os.WriteFile(filepath.Join(dir, "am.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	args := []string{"--config.file=" + filepath.Join(dir, "am.yml"), "--storage.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--cluster.listen-address="}
	base := "http://" + addr
	if webConfig != "" {
		if err := os.WriteFile(filepath.Join(dir, "web.yml"), []byte(webConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--web.config.file="+filepath.Join(dir, "web.yml"))
		base = "https://" + addr
	}
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	logf, err := os.Create(filepath.Join(dir, "am.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "am.log"))
			t.Logf("alertmanager log:\n%s", b)
		}
	})
	chtest.Eventually(t, 60*time.Second, "alertmanager ready", func() bool {
		resp, err := client.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

// commit writes a committed run of (hunt, fire) with findings, as the runner does, committed
// now.
func commit(t *testing.T, db *chtest.DB, hunt string, fire time.Time, findings ...string) {
	t.Helper()
	commitAt(t, db, hunt, fire, time.Time{}, findings...)
}

// commitAt is commit at a given commit time (hunt_watermark.updated); zero is now.
func commitAt(t *testing.T, db *chtest.DB, hunt string, fire, committed time.Time, findings ...string) {
	t.Helper()
	var c int64
	if !committed.IsZero() {
		c = committed.UnixMicro()
	}
	run := uuid.New()
	ctx := context.Background()
	q := "INSERT INTO " + schema.QuoteIdent(db.Name) + "." + schema.TableFindings +
		" (hunt_id, fire, finding_id, finding, severity, labels, run_id, found)" +
		" SELECT {h:String}, toDateTime({f:Int64}, 'UTC'), cityHash64(x), x, 'high', map('team', 'secops'), toUUID({r:String}), now64(6)" +
		" FROM (SELECT arrayJoin({fs:Array(String)}) AS x)"
	if err := db.Conn.Exec(ctx, q, clickhouse.Named("h", hunt), clickhouse.Named("f", fire.Unix()),
		clickhouse.Named("r", run.String()), clickhouse.Named("fs", findings)); err != nil {
		t.Fatal(err)
	}
	q = "INSERT INTO " + schema.QuoteIdent(db.Name) + "." + schema.TableWatermark +
		" (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started)" +
		" SELECT {h:String}, toDateTime({f:Int64}, 'UTC'), generateUUIDv4()," +
		" if({c:Int64} = 0, now64(6), fromUnixTimestamp64Micro({c:Int64}, 'UTC')), toUUID({r:String}), 'test'," +
		" toDateTime({f:Int64} - 60, 'UTC'), {n:UInt64}, now64(6)"
	if err := db.Conn.Exec(ctx, q, clickhouse.Named("h", hunt), clickhouse.Named("f", fire.Unix()),
		clickhouse.Named("r", run.String()), clickhouse.Named("n", uint64(len(findings))), clickhouse.Named("c", c)); err != nil {
		t.Fatal(err)
	}
}

// Against a real Alertmanager (grouped by alertname, repeat_interval 1h): a hunt whose every
// fire finds something new produces a new notification for each fire within group_interval,
// because each fire is its own alert; every alert carries the generatorURL of the hunt's
// status page, the hunt's description and the label common to all hunt-runner alerts.
func TestRealAlertmanagerNotifiesEveryFire(t *testing.T) {
	var box inbox
	hook := httptest.NewServer(http.HandlerFunc(box.serve))
	defer hook.Close()
	const groupInterval = 2 * time.Second
	am := startAlertmanager(t, hook.URL, groupInterval)

	db := chtest.NewWithSchema(t)
	cfg := &notify.Config{
		Sinks: []notify.Sink{{Name: "am", Type: notify.TypeAlertmanager, URLs: []string{am}, Timeout: 5 * time.Second,
			ResolveAfter: notify.ResolveAfterDefault, Lookback: time.Hour}},
		Routes:      []notify.Route{{Sinks: []string{"am"}}},
		MaxFindings: notify.NotifyFindingsDefault, Horizon: notify.HorizonDefault, ExternalURL: "https://hunts.example.com/",
	}
	hunts := hunt.NewSet([]hunt.Hunt{{Enabled: true, ID: "new-admin", Description: "A new admin account appeared.", Severity: "high",
		Labels: map[string]string{"team": "secops"}}}, "test", "")
	d, err := notify.New(db.Conn, func() *hunt.Set { return hunts }, notify.Options{Config: cfg, Database: db.Name,
		Owner: "t", Poll: 50 * time.Millisecond, Settle: 400 * time.Millisecond, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Start(ctx) }()
	defer func() { cancel(); <-done }()

	base := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	const fires = 3
	for i := range fires {
		commit(t, db, "new-admin", base.Add(time.Duration(i)*time.Minute), fmt.Sprintf(`{"user":"admin%d"}`, i))
		// Each fire is a new notification listing one alert more. The bound is far below
		// repeat_interval (1h), the only other way a notification could come; on an idle
		// machine it arrives within group_interval of the delivery.
		chtest.Eventually(t, 30*time.Second+groupInterval, fmt.Sprintf("a notification with %d firing alerts", i+1), func() bool {
			all := box.all()
			return len(all) > 0 && len(all[len(all)-1].Alerts) == i+1
		})
	}
	all := box.all()
	if len(all) != fires {
		t.Errorf("%d notifications for %d fires, want one each", len(all), fires)
	}
	last := all[len(all)-1]
	fingerprints := map[string]bool{}
	for _, a := range last.Alerts {
		fingerprints[a.Fingerprint] = true
		if a.Status != "firing" {
			t.Errorf("alert %v is %s, want firing", a.Labels, a.Status)
		}
		if a.GeneratorURL != "https://hunts.example.com/hunts/new-admin" {
			t.Errorf("generatorURL %q", a.GeneratorURL)
		}
		if a.Annotations["description"] != "A new admin account appeared." || a.Annotations["summary"] == "" {
			t.Errorf("annotations %v", a.Annotations)
		}
		if a.Labels[notify.CommonLabel] != notify.CommonLabelValue || a.Labels["alertname"] != "new-admin" || a.Labels[notify.FireLabel] == "" {
			t.Errorf("labels %v", a.Labels)
		}
	}
	if len(fingerprints) != fires {
		t.Errorf("%d distinct fingerprints for %d fires", len(fingerprints), fires)
	}
}

// Against a real Alertmanager: a sink enabled after an hour of history (60 committed fires
// with findings) receives none of it by default; the first notification lists only the fire
// committed after the sink was enabled, and Alertmanager holds that one alert.
func TestRealAlertmanagerSinkEnabledAfterHistoryGetsNone(t *testing.T) {
	var box inbox
	hook := httptest.NewServer(http.HandlerFunc(box.serve))
	defer hook.Close()
	am := startAlertmanager(t, hook.URL, 2*time.Second)
	db := chtest.NewWithSchema(t)
	now := time.Now().UTC().Truncate(time.Minute)
	for i := range 60 {
		fire := now.Add(time.Duration(i-60) * time.Minute)
		commitAt(t, db, "noisy", fire, fire.Add(2*time.Second), fmt.Sprintf(`{"n":%d}`, i))
	}
	cfg := &notify.Config{
		Sinks:       []notify.Sink{{Name: "am", Type: notify.TypeAlertmanager, URLs: []string{am}, Timeout: 5 * time.Second, ResolveAfter: notify.ResolveAfterDefault}},
		Routes:      []notify.Route{{Sinks: []string{"am"}}},
		MaxFindings: notify.NotifyFindingsDefault, Horizon: notify.HorizonDefault,
	}
	hunts := hunt.NewSet([]hunt.Hunt{{Enabled: true, ID: "noisy", Severity: "high"}}, "test", "")
	d, err := notify.New(db.Conn, func() *hunt.Set { return hunts }, notify.Options{Config: cfg, Database: db.Name,
		Owner: "t", Poll: 50 * time.Millisecond, Settle: 400 * time.Millisecond, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The first poll records the sink as enabled; the fire committed after it is owed.
	if _, err := d.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	commit(t, db, "noisy", now, `{"n":"new"}`)
	chtest.Eventually(t, 60*time.Second, "the new fire notified", func() bool {
		_, _ = d.Poll(context.Background())
		return len(box.all()) > 0
	})
	first := box.all()[0]
	if len(first.Alerts) != 1 || first.Alerts[0].Labels[notify.FireLabel] != now.Format(time.RFC3339) {
		t.Fatalf("first notification has %d alerts (want only the new fire's)", len(first.Alerts))
	}
	resp, err := http.Get(am + "/api/v2/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var held []json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&held); err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 {
		t.Errorf("alertmanager holds %d alerts, want the new fire's only", len(held))
	}
}
