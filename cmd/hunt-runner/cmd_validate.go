package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
)

func validateCommand() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "lint hunt definitions; prints file:line:col: message per problem and exits 1 on any",
		ArgsUsage: "[DIR | FILE...]",
		Description: "Checks every hunt file the way the runner loads it: strict YAML, schedule, query shape\n" +
			"(one read-only SELECT over {window_start}/{window_end}, only functions and table functions on the\n" +
			"allowlists of docs/hunts.md, widened by --allow-functions, --allow-table-functions and\n" +
			"--allow-dictionaries). DIR defaults to --hunts-dir; --git-url validates a branch, tag or commit\n" +
			"instead; one or more FILEs are checked on their own (for a pre-commit hook).\n" +
			"The SQL is checked at one of three levels, which the output names (a note: line; sql_check in\n" +
			"--json), and nothing of a hunt ever runs at any of them:\n" +
			"  server  with --clickhouse-url given explicitly: the exact statement the runner sends for each\n" +
			"          query is parsed by the server (EXPLAIN AST, which evaluates nothing) and checked against\n" +
			"          the same rules, and the databases, tables and columns it names are looked up in\n" +
			"          system.tables and system.columns: an unknown one is a problem (sql_check server+names).\n" +
			"          --resolve-names=false skips the look-up, e.g. against a CI server without the source\n" +
			"          tables (sql_check server). Declared sources (sources:) are always looked up: each table\n" +
			"          must exist and have its time_column.\n" +
			"  parser  without a server, when this build has the embedded engine and CHDB_LIB_PATH (or\n" +
			"          --chdb-lib) names libchdb.so (make chdb): an empty embedded ClickHouse parses the same\n" +
			"          statement with ClickHouse's own parser and the same rules apply, but no name is looked\n" +
			"          up: a missing table or column passes.\n" +
			"  lexical otherwise, or with --offline-parser=false: hunt-runner's own lexer only; a syntax error\n" +
			"          the parser would catch, or a missing table, passes.\n" +
			"Read budgets (max_rows_read, max_bytes_read) are held to --max-rows-read-ceiling and\n" +
			"--max-bytes-read-ceiling at every level.\n\n" +
			"Exit status: 0 all valid, 1 any problem or no hunt file at all (a wrong path must not pass CI),\n" +
			"2 usage. Example, in CI: hunt-runner validate hunts/",
		Flags: concat(
			[]cli.Flag{&cli.BoolFlag{Name: "json", EnvVars: envFor("json"), Usage: "print hunts and errors as JSON"},
				&cli.BoolFlag{Name: "legacy-report", Usage: "list what in the earlier (Python) runner's hunt files does not carry over, and what to write instead"},
				&cli.BoolFlag{Name: "resolve-names", Value: true, EnvVars: envFor("resolve-names"),
					Usage: "with --clickhouse-url, have the server resolve every database, table and column the queries use"},
				&cli.BoolFlag{Name: "offline-parser", Value: true, EnvVars: envFor("offline-parser"),
					Usage: "without --clickhouse-url, have ClickHouse's parser check each query in the embedded engine (CHDB_LIB_PATH); false: the lexical check only"},
				chdbLibFlag()},
			sourceFlags(), clickhouseFlags(), []cli.Flag{notifyConfigFlag}),
		Action: validateAction,
	}
}

type validateHunt struct {
	ID              string `json:"id"`
	File            string `json:"file"`
	IntervalSeconds int64  `json:"interval_seconds"`
	PhaseOffset     int64  `json:"phase_offset"`
	Pinned          bool   `json:"pinned"`
	Enabled         bool   `json:"enabled"`
}

type validateError struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
}

func validateAction(c *cli.Context) error {
	log := newLogger(c)
	dir := c.String("hunts-dir")
	var display func(string) string
	switch files := c.Args().Slice(); {
	case len(files) > 0 && allRegularFiles(files):
		staged, shown, err := stageFiles(files)
		if err != nil {
			return cli.Exit(err.Error(), exitError)
		}
		defer os.RemoveAll(staged)
		dir, display = staged, shown
	case len(files) > 1:
		return cli.Exit("validate takes one directory, or hunt files", exitUsage)
	case len(files) == 1:
		dir = files[0]
	}
	if c.Bool("legacy-report") {
		return legacyReport(c, dir)
	}
	src, err := huntSourceWith(c, log, dir, -1) // nothing is writing: trust files at once
	if err != nil {
		return err
	}
	set, err := src.Load(c.Context)
	if err != nil {
		return cli.Exit(fmt.Sprintf("cannot read hunts: %v", err), exitError)
	}
	problems := append([]configsrc.Problem(nil), set.Problems...)

	level, note := sqlCheck(c)
	if len(set.Hunts) == 0 {
		note = "" // no query reached a SQL check: there is nothing to say of one
	}
	if level != checkLexical && len(set.Hunts) > 0 {
		conn, err := sqlCheckConn(c, level, log)
		if err != nil {
			return err
		}
		defer conn.Close()
		if level == checkParser {
			note, err = parserNote(c, conn)
			if err != nil {
				return err
			}
		}
		policy, err := huntPolicy(c)
		if err != nil {
			return err
		}
		valid := make([]hunt.Hunt, 0, len(set.Hunts))
		for _, h := range set.Hunts {
			found, err := checkHuntSQL(c, conn, level, h, policy)
			if err != nil {
				return err
			}
			if len(found) == 0 {
				valid = append(valid, h)
			}
			problems = append(problems, found...)
		}
		// A hunt the parser refused is a problem, not also a valid hunt.
		checked := *set
		checked.Hunts = valid
		set = &checked
	}

	problems = append(problems, notifyProblems(c, set)...)
	warnings := configsrc.ExceptionWarnings(set, time.Now(), hunt.ExceptionSoonDefault)
	if display == nil {
		display = sourcePath(c, dir)
	}
	display = keepPath(display, c.String("notify-config"))
	w := c.App.Writer
	if c.Bool("json") {
		if err := writeValidateJSON(w, set, problems, warnings, display, level); err != nil {
			return err
		}
	} else {
		files := map[string]bool{}
		for _, p := range problems {
			files[p.File] = true
			p.File = printable(display(p.File))
			fmt.Fprintln(w, p.Error())
		}
		for _, p := range warnings {
			p.File = printable(display(p.File))
			fmt.Fprintf(w, "%s:%d:%d: warning: %s\n", p.File, p.Line, p.Column, p.Message)
		}
		where := src.String()
		if staged := c.Args().Slice(); len(staged) > 1 || (len(staged) == 1 && allRegularFiles(staged)) {
			where = strings.Join(staged, ", ")
		}
		if set.Commit != "" {
			where += " (commit " + set.Commit[:min(12, len(set.Commit))] + ")"
		}
		if note != "" {
			fmt.Fprintln(w, "note: "+note)
		}
		fmt.Fprintf(w, "%s: %s, %s in %s\n", where, nounCount(len(set.Hunts), "valid hunt"), nounCount(len(problems), "problem"), nounCount(len(files), "file"))
	}
	if len(problems) > 0 {
		return cli.Exit("", exitError)
	}
	if len(set.Hunts) == 0 {
		// A wrong path must not pass CI as "0 problems"; materialise refuses an empty set too.
		return cli.Exit(fmt.Sprintf("no hunt files (*.yaml, *.yml) found in %s; check the directory or --git-path", src), exitError)
	}
	return nil
}

// The levels of SQL check validate names (sql_check in --json), weakest first.
const (
	checkLexical     = "lexical"      // hunt-runner's own lexer (configsrc/query.go)
	checkParser      = "parser"       // ClickHouse's parser in the embedded engine: shape and allowlists, no names
	checkServer      = "server"       // the server's parser
	checkServerNames = "server+names" // and the names looked up in the server's catalogue
)

// noServer is the advice of every offline note: only a server knows the names.
const noServer = "add --clickhouse-url to have the server parse each query and look up its tables and columns"

// sqlCheck says how far the SQL is checked, and the note that says so (none for a server,
// which is the authority). The server only when the operator pointed at one: the flag's
// default address is not a reason to make CI depend on a database.
func sqlCheck(c *cli.Context) (level, note string) {
	const lexical = "only a lexical check of the SQL ran (no server"
	switch {
	case c.IsSet("clickhouse-url") && c.Bool("resolve-names"):
		return checkServerNames, ""
	case c.IsSet("clickhouse-url"):
		return checkServer, ""
	case !c.Bool("offline-parser"):
		return checkLexical, lexical + ", --offline-parser=false): " + noServer
	case !embeddedBuilt:
		return checkLexical, lexical + ", and this build has no embedded engine: -tags nochdb): " + noServer +
			", or use a build with the engine (make dev) to have ClickHouse's parser check each query offline"
	case c.String("chdb-lib") == "":
		return checkLexical, lexical + ", no embedded engine): " + noServer +
			", or set CHDB_LIB_PATH to libchdb.so (make chdb) to have ClickHouse's parser check each query offline"
	}
	return checkParser, "" // parserNote, once the engine says its version
}

// parserNote says that ClickHouse's parser ran, which one, and what it could not check.
func parserNote(c *cli.Context, conn driver.Conn) (string, error) {
	var version string
	if err := conn.QueryRow(c.Context, "SELECT version()").Scan(&version); err != nil {
		return "", cli.Exit(fmt.Sprintf("embedded ClickHouse: read version(): %v", err), exitError)
	}
	return "ClickHouse's parser (embedded engine " + version + ") checked each query, but no table or column was looked up (no server): " + noServer, nil
}

// sqlCheckConn connects to what parses the queries at level: the server, or the embedded engine.
func sqlCheckConn(c *cli.Context, level string, log *slog.Logger) (driver.Conn, error) {
	if level == checkParser {
		url, err := offlineEngineURL(c, log)
		if err != nil {
			return nil, err
		}
		conn, err := openTestConn(c.Context, chstore.Options{URL: url}, "default", log)
		if err != nil {
			return nil, cli.Exit(fmt.Sprintf("embedded ClickHouse: %v", err), exitError)
		}
		return conn, nil
	}
	// Parsing needs no coordination tables: connect to "default" unless a database was named.
	o := clickhouseOptions(c)
	if ep, err := chstore.ParseURL(o.URL); !c.IsSet("database") && (err != nil || ep.Database == "") {
		o.Database = "default"
	}
	conn, _, err := openWith(c, o, log)
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("ClickHouse check: %v", err), exitError)
	}
	return conn, nil
}

// checkHuntSQL checks h's SQL at level and returns its problems; an error is a failure to ask,
// which says nothing about the hunt.
func checkHuntSQL(c *cli.Context, conn driver.Conn, level string, h hunt.Hunt, policy configsrc.Policy) ([]configsrc.Problem, error) {
	var err error
	var sourceProblems []configsrc.Problem
	if level == checkParser {
		err = configsrc.CheckWithParser(c.Context, conn, h, policy)
	} else {
		err = configsrc.CheckWithServer(c.Context, conn, h, policy)
		if err == nil && level == checkServerNames {
			// The shape is safe; now the names must exist (tables, columns, functions).
			err = configsrc.ResolveWithServer(c.Context, conn, h)
		}
		if err == nil {
			// Declared sources: the tables exist and have their time columns (catalogue only).
			sourceProblems, err = configsrc.CheckSourcesWithServer(c.Context, conn, h)
		}
	}
	var refusal *configsrc.RefusedError
	switch {
	case err == nil:
		return sourceProblems, nil
	case errors.As(err, &refusal) && refusal.FileLine > 0:
		return []configsrc.Problem{{File: refusal.File, Line: refusal.FileLine, Column: max(refusal.FileColumn, 1), Message: refusal.Msg, HuntID: h.ID}}, nil
	case errors.As(err, &refusal):
		line, col := h.QueryPos(refusal.Line, refusal.Column)
		return []configsrc.Problem{{File: h.File, Line: line, Column: col, Message: refusal.Msg, HuntID: h.ID}}, nil
	}
	return nil, cli.Exit(fmt.Sprintf("ClickHouse check of %s: %v", h.File, err), exitError)
}

// offlineEngine is the embedded engine validate parses with when no server is given, started
// on first use and kept until the process ends (closeOfflineEngine): chDB holds one engine per
// process and cannot start another after Close, so a process that validates more than once
// (the tests, which run the app in-process) parses every time with the first one. Another
// library is started, and so refused: a missing one as missing, any other as a second engine.
var offlineEngine struct {
	sync.Mutex
	srv embeddedEngine
	lib string
}

func offlineEngineURL(c *cli.Context, log *slog.Logger) (string, error) {
	offlineEngine.Lock()
	defer offlineEngine.Unlock()
	if lib := c.String("chdb-lib"); offlineEngine.srv == nil || lib != offlineEngine.lib {
		srv, err := startEmbedded(c.Context, lib, "127.0.0.1:0", "", log)
		if err != nil {
			// The operator named a library: a broken one must not quietly make CI lexical.
			code := exitError
			if ec := cli.ExitCoder(nil); errors.As(err, &ec) {
				code = ec.ExitCode()
			}
			return "", cli.Exit(fmt.Sprintf("validate: %v (or --offline-parser=false for the lexical check only)", err), code)
		}
		offlineEngine.srv, offlineEngine.lib = srv, lib
	}
	return offlineEngine.srv.URL(), nil
}

// closeOfflineEngine stops validate's embedded engine, if one was started, and removes its data.
func closeOfflineEngine() {
	offlineEngine.Lock()
	defer offlineEngine.Unlock()
	if offlineEngine.srv != nil {
		offlineEngine.srv.Close()
		offlineEngine.srv = nil
	}
}

func writeValidateJSON(w io.Writer, set *configsrc.Set, problems, warnings []configsrc.Problem, display func(string) string, check string) error {
	out := struct {
		Hunts    []validateHunt  `json:"hunts"`
		Errors   []validateError `json:"errors"`
		Warnings []validateError `json:"warnings,omitempty"`
		Commit   string          `json:"commit,omitempty"`
		SQLCheck string          `json:"sql_check"`
	}{Hunts: []validateHunt{}, Errors: []validateError{}, Commit: set.Commit, SQLCheck: check}
	for _, p := range warnings {
		out.Warnings = append(out.Warnings, validateError{File: display(p.File), Line: p.Line, Column: p.Column, Message: p.Message})
	}
	for _, h := range set.Hunts {
		out.Hunts = append(out.Hunts, validateHunt{ID: h.ID, File: display(h.File),
			IntervalSeconds: int64(h.Interval / time.Second), PhaseOffset: int64(h.Offset / time.Second),
			Pinned: h.Pinned, Enabled: h.Enabled})
	}
	for _, p := range problems {
		out.Errors = append(out.Errors, validateError{File: display(p.File), Line: p.Line, Column: p.Column, Message: p.Message})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// printable escapes the bytes of a file name a terminal would act on (control characters, ESC
// sequences, invalid UTF-8) as \xNN, so that a file named with a newline cannot forge a line of
// the report.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || r < 0x20 || (r >= 0x7f && r < 0xa0) || r == '\\' {
			for _, c := range []byte(s[i : i+size]) {
				fmt.Fprintf(&b, "\\x%02x", c)
			}
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// nounCount writes n and the noun, plural unless n is 1.
func nounCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func allRegularFiles(paths []string) bool {
	for _, p := range paths {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// stageFiles copies hunt files into a fresh directory, each under its own numbered folder so
// that equal names do not collide, and returns it with a mapping from the staged relative
// paths back to the paths the user gave. Copies, not links: the directory source refuses
// links that leave its root.
func stageFiles(files []string) (string, func(string) string, error) {
	dir, err := os.MkdirTemp("", "hunt-runner-validate-")
	if err != nil {
		return "", nil, err
	}
	given := map[string]string{}
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
		rel := filepath.Join(strconv.Itoa(i), filepath.Base(f))
		if err := os.MkdirAll(filepath.Join(dir, strconv.Itoa(i)), 0o755); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, rel), b, 0o600); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
		given[filepath.ToSlash(rel)] = f
	}
	return dir, func(rel string) string {
		if f, ok := given[rel]; ok {
			return f
		}
		return rel
	}, nil
}
