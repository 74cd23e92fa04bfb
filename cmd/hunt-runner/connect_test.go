package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
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
		Flags: []cli.Flag{logLevelFlag()},
		Commands: []*cli.Command{{
			Name: "probe", Flags: clickhouseFlags(), Action: action,
		}},
		Writer: &bytes.Buffer{}, ErrWriter: &bytes.Buffer{},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	return app.RunContext(context.Background(), append([]string{"hunt-runner", "probe"}, args...))
}

// echoEndpoint is not ClickHouse and does not imitate it: an HTTP endpoint (a misbehaving proxy)
// that answers every request with an error page echoing the password it received, to prove that
// our own scrubbing keeps it out of errors and logs. How ClickHouse refuses a password is tested
// on a real server in chstore (TestOpenAuthFailureOnEngine).
func echoEndpoint(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pw, _ := r.BasicAuth()
		if k := r.Header.Get("X-ClickHouse-Key"); k != "" {
			pw = k
		}
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "proxy: upstream refused password %s\n", pw)
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
	secret := "env-" + rand.Text()
	t.Setenv(passwordEnv, secret)
	servers := map[string]struct {
		url  string
		kind error // nil: any error
	}{
		"echoing endpoint":             {echoEndpoint(t), nil},
		"refused":                      {"http://" + closedPort(t), chstore.ErrRefused},
		"refused native with URL user": {"clickhouse://bob@" + closedPort(t), chstore.ErrRefused},
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
			if err == nil || (srv.kind != nil && !errors.Is(err, srv.kind)) {
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
			if srv.kind == nil && !strings.Contains(err.Error(), "refused password xxxxx") {
				t.Errorf("the echo should reach the error with the password masked: %v", err)
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
			Name: "hunt-runner", Flags: []cli.Flag{logLevelFlag()},
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

// TestURLPasswordRefused: a password in --clickhouse-url is refused before any connection, the
// message says where the password goes instead, and the password is echoed nowhere.
func TestURLPasswordRefused(t *testing.T) {
	secret := "url-" + rand.Text()
	for _, u := range []string{"clickhouse://bob:" + secret + "@" + closedPort(t), "http://" + closedPort(t) + "/?Password=" + secret,
		"clickhouse://alice:2024/" + secret + "@" + closedPort(t)} {
		var logs bytes.Buffer
		err := withApp(t, []string{"--clickhouse-url", u}, func(c *cli.Context) error {
			conn, _, err := openClickHouse(c, buildLogger(&logs, "debug", "json"))
			if conn != nil {
				conn.Close()
			}
			return err
		})
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), passwordEnv) || !strings.Contains(err.Error(), "--clickhouse-password-file") {
			t.Errorf("got %v, want a usage error naming %s", err, passwordEnv)
		}
		for _, text := range []string{fmt.Sprint(err), logs.String()} {
			if strings.Contains(text, secret) {
				t.Errorf("secret leaked: %s", text)
			}
		}
	}
}

// TestHuntsIdentity: --hunts-user switches the user of an otherwise identical connection, with
// its own password from HUNT_RUNNER_HUNTS_PASSWORD or --hunts-password-file; unset, there is none.
func TestHuntsIdentity(t *testing.T) {
	pw := "hunts-" + rand.Text()
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(passwordEnv, "main-"+rand.Text())
	run := func(args []string, f func(c *cli.Context) error) error {
		app := &cli.App{Name: "x", Commands: []*cli.Command{{Name: "c", Flags: concat(clickhouseFlags(), huntsFlags()), Action: f}}}
		app.ExitErrHandler = func(*cli.Context, error) {}
		return app.Run(append([]string{"x", "c"}, args...))
	}
	err := run([]string{"--clickhouse-url", "http://ch:8123/hunt_runner", "--clickhouse-user", "runner"}, func(c *cli.Context) error {
		if conn, err := openHuntsClickHouse(c, buildLogger(io.Discard, "info", "json")); conn != nil || err != nil {
			t.Errorf("without --hunts-user: %v %v, want nil, nil", conn, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = run([]string{"--clickhouse-url", "http://ch:8123/hunt_runner", "--clickhouse-user", "runner", "--hunts-user", "hunts",
		"--hunts-password-file", pwFile}, func(c *cli.Context) error {
		o, ok := huntsOptions(c)
		if !ok {
			t.Fatal("--hunts-user ignored")
		}
		o, err := o.WithDefaults()
		if err != nil {
			return err
		}
		main, _ := clickhouseOptions(c).WithDefaults()
		if o.User != "hunts" || o.Password != pw || o.URL != main.URL || !o.AllowMissingDatabase {
			t.Errorf("hunts options = %v (password from file: %v)", o, o.Password == pw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(huntsPasswordEnv, pw)
	err = run([]string{"--hunts-user", "hunts"}, func(c *cli.Context) error {
		o, _ := huntsOptions(c)
		if o.Password != pw {
			t.Errorf("the hunts password did not come from %s", huntsPasswordEnv)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
