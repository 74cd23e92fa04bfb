package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// TestRunExecutesNoHostileHunt loads the hostile corpus, plus hunts aimed at a local listener,
// into a running `hunt-runner run` beside one good hunt, and checks the three things the issue
// asks: nothing hostile executed (the listener is never contacted), no row appears in any
// coordination table except from the good hunt, and the good hunt ran.
func TestRunExecutesNoHostileHunt(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()

	// A listener that counts every connection: url(), s3() and remote() would all dial it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var contacted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			contacted.Add(1)
			c.Close()
		}
	}()
	addr := l.Addr().String()

	dir := t.TempDir()
	src := filepath.Join("..", "..", "configsrc", "testdata", "hostile")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		// Aim the corpus at this listener and at this test's coordination database.
		text := strings.NewReplacer("127.0.0.1:9", addr, "hunt_runner.", db.Name+".").Replace(string(b))
		writeTestFile(t, filepath.Join(dir, e.Name()), text)
	}
	win := "WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"
	for name, q := range map[string]string{
		"listener-url":       "SELECT * FROM url('http://" + addr + "/x', CSV, 'a String') " + win,
		"listener-heredoc":   "SELECT $$'$$ AS a, * FROM url('http://" + addr + "/x', CSV, 'a String') " + win + " -- '",
		"listener-s3":        "SELECT * FROM s3('http://" + addr + "/b/x.csv', CSV, 'a String') " + win,
		"listener-remote":    "SELECT * FROM remote('" + addr + "', system.one) " + win,
		"listener-in":        "SELECT 1 AS x " + win + " AND 'a' IN (SELECT * FROM url('http://" + addr + "/x', CSV, 'a String'))",
		"listener-hascolumn": "SELECT 1 AS x " + win + " AND hasColumnInTable('" + addr + "', 'default', '', 'db', 't', 'c')",
		"listener-apply":     "SELECT * APPLY(x -> hasColumnInTable('" + addr + "', 'default', '', 'db', 't', x)) FROM (SELECT 'c' AS a) " + win,
		"listener-breakout":  "SELECT 1 AS x " + win + "\n) UNION ALL SELECT * FROM url('http://" + addr + "/x', CSV, 'a String') FROM (SELECT 1",
	} {
		writeTestFile(t, filepath.Join(dir, name+".yaml"), "interval: 1m\nquery: |\n  "+strings.ReplaceAll(q, "\n", "\n  ")+"\n")
	}
	writeTestFile(t, filepath.Join(dir, "good.yaml"), "id: good\ninterval: 1h\nquery: |\n  SELECT arrayJoin([1, 2]) AS n\n  "+win+"\n")

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(runCtx, "run", "--hunts-dir", dir, "--tick", "200ms", "--settle", "100ms", "--lease", "10s",
			"--listen", "127.0.0.1:0", "--owner", "contain-test", "--clickhouse-url", db.URL, "--database", db.Name)
		done <- err
	}()
	var runs uint64
	chtest.Poll(time.Minute, func() bool {
		_ = db.Conn.QueryRow(ctx, "SELECT count() FROM hunt_runs WHERE hunt_id = 'good' AND status = 'succeeded'").Scan(&runs)
		return runs >= 1
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	if runs < 1 {
		t.Fatal("the good hunt never ran")
	}
	if n := contacted.Load(); n != 0 {
		t.Errorf("the listener was contacted %d times: a hostile hunt executed", n)
	}
	for _, table := range schema.TableNames() {
		if table == schema.TableSchedule || table == schema.TablePublish || table == schema.TableSchema {
			continue // materialise's and schema's tables; run never writes them
		}
		if table == schema.TableHeartbeat {
			continue // keyed by runner, not by hunt
		}
		if table == schema.TableCheck {
			// Keyed by revision: only the good hunt's may be recorded as accepted.
			var n uint64
			if err := db.Conn.QueryRow(ctx, fmt.Sprintf("SELECT uniqExact(hunt_hash) FROM %s.%s", schema.QuoteIdent(db.Name), schema.QuoteIdent(table))).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 1 {
				t.Errorf("%s records %d accepted revisions: a hostile hunt passed the check", table, n)
			}
			continue
		}
		rows, err := db.Conn.Query(ctx, fmt.Sprintf("SELECT DISTINCT hunt_id FROM %s.%s WHERE hunt_id != 'good'", schema.QuoteIdent(db.Name), schema.QuoteIdent(table)))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			t.Errorf("%s holds a row of %q: only the good hunt may appear", table, id)
		}
		rows.Close()
	}
	var findings uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM hunt_findings WHERE hunt_id = 'good'").Scan(&findings); err != nil || findings == 0 {
		t.Errorf("the good hunt stored %d findings (%v), want its rows", findings, err)
	}
}
