package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
)

// withApp runs action inside a minimal app carrying the shared ClickHouse flags, as a real
// subcommand would see them.
func withApp(t *testing.T, args []string, action func(*cli.Context) error) error {
	t.Helper()
	app := &cli.App{
		Name:  "hunt-runner",
		Flags: []cli.Flag{logLevelFlag},
		Commands: []*cli.Command{{
			Name: "probe", Flags: clickhouseFlags(), Action: action,
		}},
		Writer: &bytes.Buffer{}, ErrWriter: &bytes.Buffer{},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	return app.RunContext(context.Background(), append([]string{"hunt-runner", "probe"}, args...))
}

// authEchoServer answers every request as ClickHouse answers a wrong password (HTTP 403,
// exception code 516), and echoes the password it received so the test proves it is scrubbed.
// chlocal ignores credentials, so it cannot produce this response.
func authEchoServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pw, _ := r.BasicAuth()
		if k := r.Header.Get("X-ClickHouse-Key"); k != "" {
			pw = k
		}
		w.Header().Set("X-ClickHouse-Exception-Code", "516")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "Code: 516. DB::Exception: Authentication failed for password %s. (AUTHENTICATION_FAILED)\n", pw)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestOpenClickHouseNeverLeaksEnvPassword(t *testing.T) {
	const secret = "Env-S3cret-4711"
	t.Setenv(passwordEnv, secret)
	servers := map[string]struct {
		url  string
		kind error
	}{
		"auth failure":                     {authEchoServer(t), chstore.ErrAuth},
		"refused":                          {"http://" + closedPort(t), chstore.ErrRefused},
		"refused native with URL password": {"clickhouse://bob:" + secret + "@" + closedPort(t), chstore.ErrRefused},
	}
	for name, srv := range servers {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			err := withApp(t, []string{"--clickhouse-url", srv.url, "--clickhouse-connect-timeout", "600ms"}, func(c *cli.Context) error {
				log := buildLogger(&logs, "debug", "json")
				conn, o, err := openClickHouse(c, log)
				if conn != nil {
					conn.Close()
				}
				if o.Password != secret {
					t.Errorf("the password did not come from %s", passwordEnv)
				}
				log.Info("options", "opts", o)
				return err
			})
			if !errors.Is(err, srv.kind) {
				t.Fatalf("got %v, want %v", err, srv.kind)
			}
			for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), logs.String()} {
				if strings.Contains(text, secret) {
					t.Errorf("secret leaked: %s", text)
				}
			}
			if !strings.Contains(logs.String(), "clickhouse_url") && srv.kind == chstore.ErrRefused {
				t.Errorf("retries were not logged:\n%s", logs.String())
			}
		})
	}
}

func TestClickHouseOptionsFromFlags(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("file-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(passwordEnv, "")
	tests := []struct {
		args       []string
		db, user   string
		wantPWFile bool
	}{
		{nil, "hunt_runner", "default", false},
		{[]string{"--clickhouse-url", "clickhouse://alice@ch/sec"}, "sec", "alice", false},
		{[]string{"--clickhouse-url", "clickhouse://alice@ch/sec", "--database", "d", "--clickhouse-user", "u"}, "d", "u", false},
		{[]string{"--clickhouse-password-file", pwFile}, "hunt_runner", "default", true},
	}
	for _, tt := range tests {
		err := withApp(t, tt.args, func(c *cli.Context) error {
			o, err := clickhouseOptions(c).WithDefaults()
			if err != nil {
				return err
			}
			if o.Database != tt.db || o.User != tt.user {
				t.Errorf("%v: database %q user %q, want %q %q", tt.args, o.Database, o.User, tt.db, tt.user)
			}
			if tt.wantPWFile && o.Password != "file-pw" {
				t.Errorf("%v: password file not read", tt.args)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildLogger(t *testing.T) {
	var buf bytes.Buffer
	log := buildLogger(&buf, "warn", "json")
	log.Info("hidden")
	log.Warn("shown", "hunt_id", "h1")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), `"hunt_id":"h1"`) {
		t.Errorf("json logger at warn:\n%s", buf.String())
	}
	buf.Reset()
	buildLogger(&buf, "loud", "text").Info("x")
	if !strings.Contains(buf.String(), "unknown --log-level") || !strings.Contains(buf.String(), "msg=x") {
		t.Errorf("text logger with a bad level:\n%s", buf.String())
	}
}

func TestLogLevelIsReadFromTheGlobalFlagOrEnv(t *testing.T) {
	run := func(args ...string) string {
		var got string
		app := &cli.App{
			Name: "hunt-runner", Flags: []cli.Flag{logLevelFlag},
			Commands: []*cli.Command{{Name: "probe", Action: func(c *cli.Context) error {
				got = lookupString(c, "log-level")
				return nil
			}}},
		}
		if err := app.Run(append([]string{"hunt-runner"}, args...)); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := run("--log-level", "debug", "probe"); got != "debug" {
		t.Errorf("global flag: got %q", got)
	}
	t.Setenv("HUNT_RUNNER_LOG_LEVEL", "warn")
	if got := run("probe"); got != "warn" {
		t.Errorf("env: got %q", got)
	}
}
