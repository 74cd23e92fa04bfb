package main

import (
	"context"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// A command's coordination statements carry the coordination log_comment naming this process:
// status, with no --owner, names the host.
func TestCoordinationStatementsNameTheRunner(t *testing.T) {
	db, name, common := fresh(t)
	if out, err := runApp(t, append([]string{"schema"}, common...)...); err != nil {
		t.Fatalf("schema: %v\n%s", err, out)
	}
	srv := &chtest.Server{URL: strings.TrimSuffix(db.URL, "/")}
	var mark uint64
	if l := srv.StatementLog(t); len(l) > 0 {
		mark = l[len(l)-1].Seq
	}
	if out, err := runApp(t, append([]string{"status"}, common...)...); err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	want := attrib.CoordinationComment(attrib.Host())
	n := 0
	for _, st := range srv.StatementsSince(t, mark) {
		if !strings.Contains(st.SQL, name) {
			continue
		}
		n++
		if got := st.Settings["log_comment"]; got != want {
			t.Errorf("statement %.80q: log_comment %q, want %q", st.SQL, got, want)
		}
	}
	if n == 0 {
		t.Fatal("status sent no statement naming its database")
	}
}

// run's --owner is the runner id of its statements.
func TestRunnerIDIsTheOwner(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{{[]string{"--owner", "pod-7"}, "pod-7"}, {nil, attrib.Host()}} {
		var got string
		app := &cli.App{Name: "hunt-runner", ExitErrHandler: func(*cli.Context, error) {}, Commands: []*cli.Command{{
			Name: "probe", Flags: concat(clickhouseFlags(), []cli.Flag{&cli.StringFlag{Name: "owner"}}),
			Action: func(c *cli.Context) error { got = clickhouseOptions(c).LogComment; return nil },
		}}}
		if err := app.RunContext(context.Background(), append([]string{"hunt-runner", "probe"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if got != attrib.CoordinationComment(tc.want) {
			t.Errorf("%v: log_comment %q, want runner %q", tc.args, got, tc.want)
		}
	}
}

// status HUNT says what the hunt's last runs cost, or why it cannot: on an engine without a query
// log, the setting to change.
func TestStatusOfAHuntShowsItsCost(t *testing.T) {
	db, _, common := fresh(t)
	if out, err := runApp(t, append([]string{"schema"}, common...)...); err != nil {
		t.Fatalf("schema: %v\n%s", err, out)
	}
	dir := t.TempDir()
	writeHunt(t, dir, "probe.yaml", "id: probe\ninterval: 1h\nquery: SELECT 1 AS x FROM numbers(1) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n")
	out, err := runApp(t, append([]string{"status", "--hunts-dir", dir}, append(common, "probe")...)...)
	var exists uint8
	if qerr := db.Conn.QueryRow(context.Background(), "EXISTS system.query_log").Scan(&exists); qerr != nil {
		t.Fatal(qerr)
	}
	want := "cost of probe's last runs: none in system.query_log"
	if exists == 0 {
		want = "cost of probe's last runs: not available: cannot read the query log: `system`.`query_log` does not exist"
	}
	if err != nil || !strings.Contains(out, want) {
		t.Errorf("status probe: %v, want %q in\n%s", err, want, out)
	}
}
