package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunttest"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
)

func testCommand() *cli.Command {
	return &cli.Command{
		Name:      "test",
		Usage:     "run hunt unit tests (*.test.yaml) against fixture rows; prints one line per test and exits 1 on a failure",
		ArgsUsage: "[PATH...]",
		Description: "Each PATH is a directory of hunts and their tests (recursive; default --hunts-dir, else .) or a\n" +
			"test file (its hunts: --hunts-dir, else its directory). A test file names the hunt it tests and\n" +
			"gives, per test, a window, fixture tables as the hunt names them (logs.auth_events) with typed\n" +
			"columns and rows, and the findings expected (expect: [] for none); docs/hunts.md has the format.\n\n" +
			"The hunt runs exactly as a fire runs it: the statement the runner sends, after the server's\n" +
			"containment check, with window.start and window.end bound to {window_start} and {window_end},\n" +
			"capped at max_findings. Findings are compared with expect as a set of rows over the columns\n" +
			"expect names, each value read by the hunt's column type.\n\n" +
			"The engine is the embedded one (CHDB_LIB_PATH; `make chdb`) unless --clickhouse-url is given.\n" +
			"On a server, each test creates its fixture databases (marked as scratch) and drops them after;\n" +
			"a fixture database that already exists there is refused, never written to.\n\n" +
			"Exit status: 0 all passed, 1 a test failed (or, with --require-tests, a hunt lacks a test that\n" +
			"expects findings and one that expects none), 2 usage or a file error (file:line:col: message).\n" +
			"In CI: hunt-runner test --junit report.xml hunts/",
		Flags: concat([]cli.Flag{
			&cli.BoolFlag{Name: "json", EnvVars: envFor("json"), Usage: "print the results as JSON instead of text"},
			&cli.StringFlag{Name: "junit", EnvVars: envFor("junit"), Usage: "also write the results as JUnit XML to this file (for CI test reports)"},
			&cli.BoolFlag{Name: "require-tests", EnvVars: envFor("require-tests"),
				Usage: "fail when any hunt lacks a test that expects findings and one that expects none (expect: [])"},
			&cli.StringFlag{Name: "hunts-dir", EnvVars: envFor("hunts-dir"), Usage: "directory of the hunts the tests name (default: each PATH)"},
			chdbLibFlag(),
			spreadFlag(), workloadPreviewFlag(),
		}, policyFlags(), interactiveClickhouseFlags()),
		Action: testAction,
	}
}

func testAction(c *cli.Context) error {
	ctx := c.Context
	log := newLogger(c)
	paths := c.Args().Slice()
	if len(paths) == 0 {
		paths = []string{"."}
		if d := c.String("hunts-dir"); d != "" {
			paths = []string{d}
		}
	}
	trees, err := hunttest.TreesOf(paths, c.String("hunts-dir"))
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	policy, err := huntPolicy(c)
	if err != nil {
		return err
	}
	eng, closeEngine, err := testEngine(c, log)
	if err != nil {
		return err
	}
	defer closeEngine()
	eng.Policy = policy
	rep, err := eng.Run(ctx, trees, configsrc.Options{SpreadFraction: c.Float64("spread-fraction"), Settle: -1, Policy: policy})
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	if c.Bool("json") {
		if err := rep.WriteJSON(c.App.Writer); err != nil {
			return err
		}
	} else {
		rep.WriteText(c.App.Writer, c.Bool("require-tests"))
	}
	if file := c.String("junit"); file != "" {
		if err := writeJUnit(file, rep); err != nil {
			return cli.Exit(fmt.Sprintf("--junit %s: %v", file, err), exitError)
		}
	}
	_, failed, _ := rep.Counts()
	switch {
	case len(rep.Problems) > 0:
		return cli.Exit("", exitUsage)
	case failed > 0, c.Bool("require-tests") && len(rep.Incomplete()) > 0:
		return cli.Exit("", exitError)
	case len(rep.Results) == 0:
		// A wrong path must not pass CI as "0 passed".
		return cli.Exit(fmt.Sprintf("no tests (*.test.yaml) found in %s", strings.Join(paths, ", ")), exitUsage)
	}
	return nil
}

func writeJUnit(file string, rep *hunttest.Report) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := rep.WriteJUnit(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// testEngine is the embedded engine, or the server --clickhouse-url names when given
// explicitly (its default address is no reason to test on a real server).
func testEngine(c *cli.Context, log *slog.Logger) (*hunttest.Engine, func(), error) {
	o := clickhouseOptions(c)
	private := !c.IsSet("clickhouse-url") || c.String("clickhouse-url") == ""
	var stop func()
	if private {
		srv, err := startEmbedded(c.Context, c.String("chdb-lib"), "127.0.0.1:0", "", log)
		if err != nil {
			return nil, nil, err
		}
		o = chstore.Options{URL: srv.URL()}
		stop = func() { srv.Close() }
	}
	o.Database, o.SkipConsistency = "default", true
	conn, err := openTestConn(c.Context, o, "default", log)
	if err != nil {
		if stop != nil {
			stop()
		}
		return nil, nil, cli.Exit(fmt.Sprintf("connect to ClickHouse: %v", err), exitError)
	}
	eng := &hunttest.Engine{Conn: conn, Private: private, Workload: c.String("workload-preview"),
		Open: func(ctx context.Context, db string) (driver.Conn, error) { return openTestConn(ctx, o, db, log) }}
	if err := checkWorkloads(c, conn, attrib.Workloads{Preview: eng.Workload}); err != nil {
		conn.Close()
		if stop != nil {
			stop()
		}
		return nil, nil, err
	}
	return eng, func() {
		conn.Close()
		if stop != nil {
			stop()
		}
	}, nil
}

// openTestConn connects with db as the connection's default database, which the URL's path
// names (so a hunt's unqualified tables resolve in the test's scratch database).
func openTestConn(ctx context.Context, o chstore.Options, db string, log *slog.Logger) (driver.Conn, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("--clickhouse-url: %w", err)
	}
	u.Path = "/" + db
	o.URL, o.Database, o.SkipConsistency = u.String(), db, true
	o, err = o.WithDefaults()
	if err != nil {
		return nil, err
	}
	return chstore.Open(ctx, o, log)
}
