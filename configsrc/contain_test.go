package configsrc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// testSecret is a fresh random token, so no secret lives in a fixture.
func testSecret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "s3cr3t" + hex.EncodeToString(b)
}

// TestSymlinkedSecretNeverEchoed: a hunt file that is a symlink to a secret outside the hunts
// directory is reported without being read, and the secret appears in no problem and no log
// line. Files inside the root that hold the secret in every field also never echo it.
func TestSymlinkedSecretNeverEchoed(t *testing.T) {
	secret := testSecret(t)
	base := t.TempDir()
	root := filepath.Join(base, "hunts")
	writeFile(t, filepath.Join(base, "secret"), secret+"\n")
	writeFile(t, filepath.Join(base, "secret.yaml"), "password: "+secret+"\n")
	writeFile(t, filepath.Join(root, "good.yaml"), huntYAML("5m", "1"))
	if err := os.Symlink(filepath.Join(base, "secret"), filepath.Join(root, "leak.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret.yaml", filepath.Join(root, "leak2.yaml")); err != nil {
		t.Fatal(err)
	}
	// Inside the root: the secret in each kind of field a message could quote.
	for i, body := range []string{
		secret + "\n",
		"id: " + secret + "!\ninterval: 5m\n",
		"severity: " + secret + "\n",
		secret + ": 1\n",
		"interval: " + secret + "\n",
		"interval: 5" + secret + "\n",
		"cron: \"" + secret + " * * * *\"\n",
		"enabled: " + secret + "\n",
		"timestamp_field: " + secret + "-x\n",
		"labels: {" + secret + "-: x}\n",
		"schedule: {mode: " + secret + "}\n",
		"max_findings: " + secret + "\n",
		"query: " + secret + "\n",
		"query: SELECT 1 FROM t SETTINGS " + secret + " = 1\n",
		"query: \"SELECT {" + secret + ":String}\"\n",
		"query: SELECT * FROM `" + secret + "`(1)\n",
		"x: &a " + secret + "\ny: *" + secret + "x\n",
		"- " + secret + "\n",
		"interval: 5m\nnotify: [\"" + secret + " x\"]\n",
		"interval: 5m\nsuppress: {by: [" + secret + ", " + secret + "], for: 1h}\n",
		"{" + secret + "\n",
	} {
		writeFile(t, filepath.Join(root, fmt.Sprintf("inside-%02d.yaml", i)), body)
	}

	var logs bytes.Buffer
	src, err := NewDir(root, Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(src, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)))
	set, _, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, p := range set.Problems {
		fmt.Fprintln(&out, p.Error())
	}
	for _, f := range []string{"leak.yaml", "leak2.yaml"} {
		if !strings.Contains(out.String(), f+":1:1: symlink resolves outside the hunts directory") {
			t.Errorf("%s not reported as outside the root:\n%s", f, out.String())
		}
	}
	if _, ok := set.Get("good"); !ok {
		t.Errorf("good hunt not loaded: %s", out.String())
	}
	for name, text := range map[string]string{"problems": out.String(), "log": logs.String()} {
		if strings.Contains(text, secret) || strings.Contains(text, secret[6:]) {
			t.Errorf("the secret appears in the %s:\n%s", name, text)
		}
	}
}

// TestLoaderServerCheck: with the server check on, a hunt the server refuses is reported at its
// query in the file and keeps its last good definition; a new hunt the server refuses never
// loads. The lexer cannot see these errors; only the server can.
func TestLoaderServerCheck(t *testing.T) {
	db := chtest.New(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), huntYAML("5m", "1"))
	src, err := NewDir(dir, Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(src, time.Hour, nil, WithServerCheck(db.Conn, Policy{CoordinationDatabase: "hunt_runner"}))
	first, _, err := l.Load(context.Background())
	if err != nil || ids(first) != "a" || len(first.Problems) != 0 {
		t.Fatalf("first load: %v %s %v", err, ids(first), first.Problems)
	}
	good, _ := first.Get("a")

	serverOnly := "interval: 5m\nquery: |\n  SELECT count() + FROM sample.auth_events\n  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"
	writeFile(t, filepath.Join(dir, "a.yaml"), serverOnly)
	writeFile(t, filepath.Join(dir, "b.yaml"), serverOnly)
	set, changed, err := l.Load(context.Background())
	if err != nil || !changed {
		t.Fatalf("second load: %v changed=%v", err, changed)
	}
	if h, ok := set.Get("a"); !ok || h.Hash != good.Hash {
		t.Errorf("a did not keep its last good definition: %+v", h)
	}
	if _, ok := set.Get("b"); ok {
		t.Error("b, refused by the server, was loaded")
	}
	if p, ok := set.Stale["a"]; !ok || p.File != "a.yaml" || p.Line < 3 || !strings.Contains(p.Message, "Syntax error") {
		t.Errorf("a's stale problem = %+v", p)
	}
	for _, p := range set.Problems {
		if p.File == "b.yaml" && (p.Line != 3 || p.Column != 31) {
			// "+ FROM" makes FROM a column and sample its alias: the server fails at the '.',
			// line 1, column 29 of the query, which is file line 3, column 31 (the block's indent).
			t.Errorf("b's problem is not placed in the file: %v", p)
		}
	}
}

// TestServerUnreachableIsNotARefusal: a server that cannot be reached gives no verdict. The hunt
// is held back for now, reported, and checked again on the next reload, not refused for good.
func TestServerUnreachableIsNotARefusal(t *testing.T) {
	srv := chtest.Start(t)
	conn, err := chstore.Open(context.Background(), chstore.Options{URL: srv.URL, Database: "default", ConnectTimeout: 5 * time.Second},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), huntYAML("5m", "1"))
	src, err := NewDir(dir, Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(src, time.Hour, nil, WithServerCheck(conn, Policy{}))
	srv.Stop()
	set, _, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Hunts) != 0 || len(set.Problems) != 1 || !strings.Contains(set.Problems[0].Message, "could not check") {
		t.Fatalf("with the server down: hunts %s, problems %v", ids(set), set.Problems)
	}
	srv.Start()
	set, _, err = l.Load(context.Background())
	if err != nil || ids(set) != "a" || len(set.Problems) != 0 {
		t.Fatalf("with the server back: %v, hunts %s, problems %v", err, ids(set), set.Problems)
	}
}
