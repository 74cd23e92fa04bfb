package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

type previewJSON struct {
	Hunt    string `json:"hunt"`
	Windows []struct {
		Fire     time.Time `json:"fire"`
		Start    time.Time `json:"start"`
		End      time.Time `json:"end"`
		Findings []string  `json:"findings"`
	} `json:"windows"`
}

// preview returns, window for window, the findings `run` commits for the same windows, and
// changes nothing: no coordination table gains a row, and the server sees no write at all.
func TestPreviewMatchesRunAndWritesNothing(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	ctx := context.Background()
	common := []string{"--clickhouse-url", srv.URL, "--database", db.Name}
	if out, err := runApp(t, append([]string{"schema"}, common...)...); err != nil {
		t.Fatalf("schema: %v\n%s", err, out)
	}
	src := "src_" + strings.TrimPrefix(db.Name, "t_")
	for _, q := range []string{
		"CREATE DATABASE " + src,
		"CREATE TABLE " + src + ".events (ts DateTime64(3, 'UTC'), id UInt32) ENGINE = MergeTree ORDER BY ts",
		// An event every 250 ms from a minute ago to two minutes ahead; every third is suspicious.
		"INSERT INTO " + src + ".events SELECT now64(3) - INTERVAL 60 SECOND + toIntervalMillisecond(number * 250), number FROM numbers(720)",
	} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	hunt := "id: every-third\ninterval: 2s\nquery: |\n  SELECT id, ts FROM " + src + ".events\n" +
		"  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} AND id % 3 = 0\n"
	if err := os.WriteFile(filepath.Join(dir, "every-third.yaml"), []byte(hunt), 0o644); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(runCtx, append([]string{"run", "--hunts-dir", dir, "--tick", "200ms", "--settle", "100ms",
			"--lease", "10s", "--listen", "127.0.0.1:0", "--owner", "preview-test"}, common...)...)
		done <- err
	}()
	var runs uint64
	chtest.Eventually(t, 2*time.Minute, "four committed runs", func() bool {
		_ = db.Conn.QueryRow(ctx, "SELECT count() FROM "+db.Name+".hunt_runs WHERE status = 'succeeded'").Scan(&runs)
		return runs >= 4
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	// What run committed, per window.
	type window struct{ start, end time.Time }
	committed := map[window][]string{}
	rows, err := db.Conn.Query(ctx, "SELECT r.window_start, r.window_end, groupArray(f.finding) FROM "+db.Name+".hunt_runs AS r "+
		"LEFT JOIN "+db.Name+".hunt_findings_committed AS f ON f.hunt_id = r.hunt_id AND f.fire = r.fire "+
		"WHERE r.status = 'succeeded' GROUP BY r.window_start, r.window_end ORDER BY r.window_start SETTINGS join_use_nulls = 0")
	if err != nil {
		t.Fatal(err)
	}
	var from, to time.Time
	for rows.Next() {
		var w window
		var docs []string
		if err := rows.Scan(&w.start, &w.end, &docs); err != nil {
			t.Fatal(err)
		}
		docs = slices.DeleteFunc(docs, func(s string) bool { return s == "" })
		slices.Sort(docs)
		committed[w] = docs
		if from.IsZero() || w.start.Before(from) {
			from = w.start
		}
		to = w.end
	}
	rows.Close()

	counts := func() map[string]uint64 {
		out := map[string]uint64{}
		var tables []string
		trows, err := db.Conn.Query(ctx, "SELECT name FROM system.tables WHERE database = {d:String} AND engine NOT LIKE '%View'", clickhouse.Named("d", db.Name))
		if err != nil {
			t.Fatal(err)
		}
		for trows.Next() {
			var name string
			if err := trows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, name)
		}
		trows.Close()
		if len(tables) < 10 {
			t.Fatalf("coordination tables %v", tables)
		}
		for _, table := range tables {
			var n uint64
			if err := db.Conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s", db.Name, table)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			out[table] = n
		}
		return out
	}
	before := counts()
	log := srv.StatementLog(t)
	mark := log[len(log)-1].Seq

	out, err := runApp(t, append(append([]string{"preview", "--hunts-dir", dir, "--json",
		"--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339)}, common...), "every-third")...)
	if err != nil {
		t.Fatalf("preview: %v\n%s", err, out)
	}
	sent := srv.StatementsSince(t, mark)
	if !slices.ContainsFunc(sent, func(st ctl.Statement) bool { return strings.Contains(st.SQL, "formatRowNoNewline") }) {
		t.Fatalf("the statement log does not show preview's hunt queries: %d statements", len(sent))
	}
	for _, st := range sent {
		head := strings.TrimSpace(strings.ToUpper(st.SQL))
		if st.Kind == ctl.KindInsert || !strings.HasPrefix(head, "SELECT") && !strings.HasPrefix(head, "EXPLAIN") &&
			!strings.HasPrefix(head, "WITH") {
			t.Errorf("preview sent a statement that is not a read: %s %q", st.Kind, st.SQL)
		}
	}
	if after := counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("coordination tables changed under preview: %v → %v", before, after)
	}

	var got previewJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Preview windows tile [from, to); each committed window is one of them, or (a run that
	// caught up) several in a row, whose findings together are the run's.
	if len(got.Windows) == 0 || !got.Windows[0].Start.Equal(from) || !got.Windows[len(got.Windows)-1].End.Equal(to) {
		t.Fatalf("preview windows %+v do not tile %s to %s", got.Windows, from, to)
	}
	single, findings := 0, 0
	for w, want := range committed {
		var have []string
		n := 0
		for _, pw := range got.Windows {
			if !pw.Start.Before(w.start) && !pw.End.After(w.end) {
				have = append(have, pw.Findings...)
				n++
			}
		}
		slices.Sort(have)
		if !slices.Equal(have, want) {
			t.Errorf("window %s to %s: run committed %d findings, preview found %d\nrun:     %v\npreview: %v", w.start, w.end, len(want), len(have), want, have)
		}
		if n == 1 {
			single++
		}
		findings += len(want)
	}
	if single == 0 || findings == 0 {
		t.Fatalf("no one-interval window with findings to compare (%d single, %d findings)", single, findings)
	}
}

// The range cap and the per-window timeout stop a preview with a message that says what to do.
func TestPreviewRangeCapAndWindowTimeout(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	src := "src_" + strings.TrimPrefix(db.Name, "t_")
	for _, q := range []string{
		"CREATE DATABASE " + src,
		"CREATE TABLE " + src + ".events (ts DateTime64(3, 'UTC'), id UInt32) ENGINE = MergeTree ORDER BY ts",
		"INSERT INTO " + src + ".events SELECT toDateTime64('2026-01-01 00:00:00', 3, 'UTC') + toIntervalMillisecond(number * 100), number FROM numbers(600)",
	} {
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+src) })
	file := filepath.Join(t.TempDir(), "slow.yaml")
	hunt := "id: slow\ninterval: 10s\nquery: |\n  SELECT id, sleepEachRow(0.03) AS z FROM " + src + ".events\n" +
		"  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"
	if err := os.WriteFile(file, []byte(hunt), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--clickhouse-url", db.URL, "--allow-functions", "sleepEachRow", "--hunt-file", file, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z"}
	_, err := runApp(t, append(append([]string{"preview", "--max-windows", "4"}, common...), "slow")...)
	if exitCode(err) != exitError || !strings.Contains(fmt.Sprint(err), " windows of hunt slow (every 10s), more than --max-windows 4; narrow the range or raise --max-windows") {
		t.Fatalf("range cap: %v", err)
	}
	_, err = runApp(t, append(append([]string{"preview", "--window-timeout", "1s"}, common...), "slow")...)
	if exitCode(err) != exitError || !strings.Contains(fmt.Sprint(err), ": took longer than 1s (the hunt's timeout, lowered by --window-timeout)") {
		t.Fatalf("window timeout: %v", err)
	}
	fast := filepath.Join(t.TempDir(), "fast.yaml")
	if err := os.WriteFile(fast, []byte(strings.Replace(strings.Replace(hunt, "id: slow", "id: fast", 1), ", sleepEachRow(0.03) AS z", "", 1)+
		"    AND id IN (100, 101, 300)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runApp(t, "preview", "--clickhouse-url", db.URL, "--hunt-file", fast, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z", "fast")
	if err != nil || !strings.Contains(out, `  {"id":100}`) || !strings.Contains(out, `  {"id":300}`) ||
		!strings.Contains(out, "fast: 3 findings in 2 of ") || !strings.Contains(out, "nothing written") {
		t.Fatalf("preview text: %v\n%s", err, out)
	}
	_, err = runApp(t, append(append([]string{"preview"}, common...), "nosuch")...)
	if exitCode(err) != exitError || !strings.Contains(fmt.Sprint(err), `no valid hunt "nosuch"`) {
		t.Fatalf("unknown hunt: %v", err)
	}
}

// preview and diff run hunts as --hunts-user, as run does: a connection of its own, apart from
// the one that checks the hunt.
func TestPreviewRunsAsTheHuntsIdentity(t *testing.T) {
	db := chtest.New(t)
	for _, cmd := range []*cli.Command{previewCommand(), diffCommand()} {
		for _, withUser := range []bool{false, true} {
			args := []string{"x", cmd.Name, "--clickhouse-url", db.URL}
			if withUser {
				args = append(args, "--hunts-user", "hunts")
			}
			var separate bool
			app := &cli.App{Name: "x", Commands: []*cli.Command{{Name: cmd.Name, Flags: cmd.Flags, Action: func(c *cli.Context) error {
				p, closeConns, err := newPreviewer(c, buildLogger(io.Discard, "info", "json"))
				if err != nil {
					return err
				}
				defer closeConns()
				separate = p.Hunts != p.Check
				return nil
			}}}}
			app.ExitErrHandler = func(*cli.Context, error) {}
			if cmd.Name == "preview" {
				args = append(args, "--from", "1h")
			}
			if err := app.Run(args); err != nil {
				t.Fatalf("%s: %v", cmd.Name, err)
			}
			if separate != withUser {
				t.Errorf("%s with --hunts-user %v: hunts run on their own connection %v", cmd.Name, withUser, separate)
			}
		}
	}
}
