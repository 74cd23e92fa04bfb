package chstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func TestOpenOnEngine(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	conn, err := chstore.Open(ctx, chstore.Options{URL: db.URL, Database: db.Name, ConnectTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var one uint8
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %v %d", err, one)
	}
}

func TestOpenUnknownDatabase(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	missing := db.Name + "_missing"
	cases := map[string]chstore.Options{
		// The server refuses the connection's default database (code 81).
		"URL path": {URL: strings.TrimSuffix(db.URL, "/") + "/" + missing},
		// The server is fine but the coordination database was never created.
		"coordination database": {URL: db.URL, Database: missing},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			o.ConnectTimeout = 10 * time.Second
			start := time.Now()
			_, err := chstore.Open(ctx, o, nil)
			if !errors.Is(err, chstore.ErrUnknownDatabase) {
				t.Fatalf("got %v, want ErrUnknownDatabase", err)
			}
			if !strings.Contains(err.Error(), "hunt-runner schema") {
				t.Errorf("no hint in %v", err)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("an unknown database was retried")
			}
			t.Logf("error: %v", err)
		})
	}
	// schema connects before the database exists.
	conn, err := chstore.Open(ctx, chstore.Options{URL: db.URL, Database: missing, AllowMissingDatabase: true}, nil)
	if err != nil {
		t.Fatalf("AllowMissingDatabase: %v", err)
	}
	conn.Close()
}

// On the success path too, a password given in any form never reaches the log. (chlocal ignores
// credentials, so every form connects.)
func TestOpenOnEngineNeverLogsPassword(t *testing.T) {
	db := chtest.New(t)
	inFile, inOptions := "file-"+rand.Text(), "env-"+rand.Text()
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(inFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		secret string
		opts   chstore.Options
	}{
		"file":    {inFile, chstore.Options{URL: db.URL, PasswordFile: pwFile}},
		"Options": {inOptions, chstore.Options{URL: db.URL, Password: inOptions}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			tc.opts.Database = db.Name
			conn, err := chstore.Open(context.Background(), tc.opts, log)
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
			log.Info("opened", "options", tc.opts)
			if !strings.Contains(buf.String(), "connected to ClickHouse") {
				t.Errorf("no connection log line:\n%s", buf.String())
			}
			if strings.Contains(buf.String(), tc.secret) {
				t.Errorf("password in the log:\n%s", buf.String())
			}
		})
	}
}
