package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func TestProvisionPrintsReviewableSQLWithoutConnecting(t *testing.T) {
	dead := "http://" + closedPort(t)
	out, err := runApp(t, "provision", "--role", "scaler", "--clickhouse-url", dead)
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join("..", "..", "provision", "testdata", "scaler.golden.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if out != string(golden) {
		t.Fatalf("printed SQL differs from provision/testdata/scaler.golden.sql:\n%s", out)
	}
	// The last line is the SHA-256 of everything above it.
	body, last, _ := strings.Cut(strings.TrimSuffix(out, "\n"), "\n-- sha256: ")
	sum := sha256.Sum256([]byte(body + "\n"))
	if hex.EncodeToString(sum[:]) != last {
		t.Fatalf("hash line %s is not the SHA-256 of the text above it", last)
	}
	if _, err := runApp(t, "provision", "--role", "scaler", "--expect-sha256", last); err != nil {
		t.Errorf("--expect-sha256 with the right hash: %v", err)
	}
	if _, err := runApp(t, "provision", "--role", "scaler", "--expect-sha256", strings.Repeat("0", 64)); err == nil {
		t.Error("--expect-sha256 with another hash succeeded")
	}
	t.Setenv(provisionPasswordEnv, "")
	if _, err := runApp(t, "provision", "--role", "scaler", "--apply", "--clickhouse-url", dead); err == nil ||
		!strings.Contains(err.Error(), provisionPasswordEnv) {
		t.Errorf("--apply without a password: %v", err)
	}
	if _, err := runApp(t, "provision", "--role", "auditor"); err == nil {
		t.Error("unknown role accepted")
	}
}

// TestProvisionHuntsNamesItsSources: the hunts role reads only the databases the operator
// names; it needs at least one, and hunt files are no longer an input to provision at all.
func TestProvisionHuntsNamesItsSources(t *testing.T) {
	out, err := runApp(t, "provision", "--role", "hunts", "--source-database", "edr", "--source-database", "logs")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SELECT ON `edr`.*", "SELECT ON `logs`.*", "-- source databases hunts may read: edr, logs", "readonly = 2 CONST"} {
		if !strings.Contains(out, want) {
			t.Errorf("hunts SQL lacks %q:\n%s", want, out)
		}
	}
	if _, err := runApp(t, "provision", "--role", "hunts"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--source-database") {
		t.Errorf("hunts without a source database: %v", err)
	}
	if _, err := runApp(t, "provision", "--role", "runner", "--hunts-dir", t.TempDir()); err == nil {
		t.Error("provision still reads hunt files")
	}
	plain, err := runApp(t, "provision", "--role", "runner")
	if err != nil {
		t.Fatal(err)
	}
	rotate, err := runApp(t, "provision", "--role", "runner", "--rotate-password")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, "IDENTIFIED WITH sha256_password BY '<password: HUNT_RUNNER_PROVISION_PASSWORD or --password-file>';\n-- sha256") ||
		!strings.Contains(rotate, "ALTER USER `hunt_runner` IDENTIFIED WITH sha256_password BY") {
		t.Errorf("--rotate-password does not add the rotation:\n%s", rotate)
	}
}

func TestProvisionApplyOnEngine(t *testing.T) {
	db := chtest.New(t)
	secret := "p'" + rand.Text() // a quote, to prove the SQL escapes it
	t.Setenv(provisionPasswordEnv, secret)
	if _, err := runApp(t, "schema", "--clickhouse-url", db.URL, "--database", db.Name, "--topology", "single"); err != nil {
		t.Fatal(err)
	}
	out, err := runApp(t, "provision", "--role", "scaler", "--apply", "--clickhouse-url", db.URL, "--database", db.Name)
	if strings.Contains(out, secret) || (err != nil && strings.Contains(err.Error(), secret)) {
		t.Fatal("the password was printed")
	}
	if os.Getenv(chtest.EnvURL) == "" {
		// chDB has no access storage: the first statement, the profile, is refused.
		if err == nil || !strings.Contains(err.Error(), "statement 1 (profile)") {
			t.Fatalf("apply on chDB: %v", err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	var v uint64
	if err := db.Conn.QueryRow(t.Context(), "SELECT value FROM "+db.Name+".hunt_backlog_v1").Scan(&v); err != nil {
		t.Fatalf("schema did not create the view: %v", err)
	}
}

func TestShimCommandServesColdHoldWithClickHouseDown(t *testing.T) {
	dead := "http://" + closedPort(t)
	listen := closedPort(t)
	token := filepath.Join(t.TempDir(), "token")
	tok := rand.Text()
	if err := os.WriteFile(token, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(ctx, "shim", "--clickhouse-url", dead, "--listen", listen, "--token-file", token, "--timeout", "500ms")
		done <- err
	}()
	var resp *http.Response
	var err error
	if !chtest.Poll(10*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+listen+"/keda/hunt-backlog", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err = http.DefaultClient.Do(req)
		return err == nil
	}) {
		t.Fatalf("shim never listened: %v", err)
	}
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 200 || body["value"] != float64(0) || body["cold"] != true {
		t.Errorf("shim with ClickHouse down = %d %v, want 200 cold 0", resp.StatusCode, body)
	}
	stop() // as SIGINT would
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shim exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shim did not stop on SIGINT")
	}
}

func TestShimCommandRefusesBadCatalogue(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(bad, []byte("queries:\n  pressure:\n    clamp_min: 5\n    clamp_max: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := runApp(t, "shim", "--queries", bad, "--listen", closedPort(t))
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "clamp_min") {
		t.Fatalf("bad catalogue: %v", err)
	}
	out, err := runApp(t, "shim", "--print-queries")
	if err != nil || !strings.Contains(out, "hunt-backlog:") {
		t.Fatalf("--print-queries: %v\n%s", err, out)
	}
}
