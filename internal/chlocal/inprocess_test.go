package chlocal

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func TestStartWithoutLibrary(t *testing.T) {
	_, err := Start(context.Background(), Options{})
	if !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), "CHDB_LIB_PATH is not set") {
		t.Fatalf("Start with no library: %v, want ErrNoLibrary naming CHDB_LIB_PATH", err)
	}
	missing := filepath.Join(t.TempDir(), "libchdb.so")
	_, err = Start(context.Background(), Options{LibPath: missing})
	if !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Start with a missing library: %v, want ErrNoLibrary naming %s", err, missing)
	}
}

// TestInProcess runs the engine inside the test binary (as `hunt-runner
// dev` does) and checks the HTTP details clickhouse-go does not expose.
func TestInProcess(t *testing.T) {
	lib := chtest.LibPath(t)
	s, err := Start(context.Background(), Options{LibPath: lib, RewriteReplicated: true})
	if err != nil {
		t.Fatal(err)
	}
	dataDir := s.opts.DataPath
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("temporary data dir %s still exists after Close (%v)", dataDir, err)
		}
	})

	t.Run("one engine per process", func(t *testing.T) {
		if _, err := Start(context.Background(), Options{LibPath: lib}); !errors.Is(err, ErrAlreadyStarted) {
			t.Fatalf("second Start: %v, want ErrAlreadyStarted", err)
		}
	})

	t.Run("Go signal handlers survive", func(t *testing.T) {
		// chDB installs crash handlers on connect; a nil dereference must
		// still become a Go panic.
		recovered := func() (r any) {
			defer func() { r = recover() }()
			var p *int
			return *p
		}()
		if recovered == nil {
			t.Fatal("nil dereference did not panic")
		}
	})

	post := func(t *testing.T, params url.Values, body string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(s.URL()+"/?"+params.Encode(), "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	t.Run("empty results have Content-Length 0", func(t *testing.T) {
		for _, q := range []string{
			"CREATE TABLE IF NOT EXISTS default.e (a UInt8) ENGINE = Memory",
			"SELECT a FROM default.e",
		} {
			resp, body := post(t, url.Values{"default_format": {"Native"}, "client_protocol_version": {"54460"}}, q)
			if resp.StatusCode != 200 || resp.ContentLength != 0 || body != "" {
				t.Fatalf("%s: %d, Content-Length %d, body %q", q, resp.StatusCode, resp.ContentLength, body)
			}
		}
	})

	t.Run("exception header and body", func(t *testing.T) {
		resp, body := post(t, nil, "SELECT * FROM default.no_such_table")
		if resp.StatusCode != 404 || resp.Header.Get("X-ClickHouse-Exception-Code") != "60" {
			t.Fatalf("status %d, code header %q", resp.StatusCode, resp.Header.Get("X-ClickHouse-Exception-Code"))
		}
		re := regexp.MustCompile(`^Code: 60\. DB::Exception: .+ \(UNKNOWN_TABLE\) \(version 26\.[0-9.]+\)\n$`)
		if !re.MatchString(body) {
			t.Fatalf("body %q does not look like clickhouse-server's", body)
		}
	})

	t.Run("ping and stats", func(t *testing.T) {
		resp, err := http.Get(s.URL() + "/ping")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "Ok.\n" {
			t.Fatalf("/ping = %q", b)
		}
		before := s.Queries()
		post(t, nil, "SELECT 1")
		post(t, nil, "SELECT 2")
		resp, err = http.Get(s.URL() + "/chlocal/stats")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Queries  int64 `json:"queries"`
			RSSBytes int64 `json:"rss_bytes"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Queries != before+2 || st.RSSBytes <= 0 {
			t.Fatalf("stats = %+v, want queries %d and a positive RSS", st, before+2)
		}
	})

	t.Run("USE does not leak into other requests", func(t *testing.T) {
		opts, err := clickhouse.ParseDSN(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		conn, err := clickhouse.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx := context.Background()
		if err := conn.Exec(ctx, "USE system"); err != nil {
			t.Fatal(err)
		}
		var db string
		if err := conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&db); err != nil {
			t.Fatal(err)
		}
		if db != "default" {
			t.Fatalf("currentDatabase() = %q after another request's USE, want default", db)
		}
	})

	t.Run("large text insert body", func(t *testing.T) {
		post(t, nil, "CREATE TABLE default.csv (a UInt32, s String) ENGINE = MergeTree ORDER BY a")
		var b strings.Builder
		const rows = 50_000
		for i := range rows {
			b.WriteString(strings.Repeat("x", i%7))
			b.WriteString("\n")
		}
		// One column as TSV: 50k lines, well past chDB's inline limit.
		resp, body := post(t, url.Values{"query": {"INSERT INTO default.csv (s) FORMAT TabSeparated"}}, b.String())
		if resp.StatusCode != 200 {
			t.Fatalf("insert: %d %s", resp.StatusCode, body)
		}
		_, body = post(t, nil, "SELECT count() FROM default.csv")
		if body != "50000\n" {
			t.Fatalf("count = %q, want 50000", body)
		}
	})

	// Last: it closes the engine.
	t.Run("Close lets a running query finish, then refuses", func(t *testing.T) {
		before := s.Queries()
		type result struct {
			status int
			body   string
		}
		done := make(chan result, 1)
		go func() {
			resp, err := http.Post(s.URL()+"/", "text/plain", strings.NewReader("SELECT sum(sleepEachRow(0.4)) + 7 FROM numbers(2)"))
			if err != nil {
				done <- result{body: err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			done <- result{resp.StatusCode, string(b)}
		}()
		// The counter moves just before the query takes the session: wait for that, not for a
		// guessed time.
		chtest.Eventually(t, 30*time.Second, "the slow query to reach the server", func() bool { return s.Queries() != before })
		addr := s.Addr()
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if r := <-done; r.status != 200 || r.body != "7\n" {
			t.Fatalf("query running during Close = %d %q, want 200 \"7\"", r.status, r.body)
		}
		if _, err := net.Dial("tcp", addr); err == nil {
			t.Fatal("still accepting connections after Close")
		}
	})
}
