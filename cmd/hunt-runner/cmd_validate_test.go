package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/schedule"
)

const corpusDir = "../../configsrc/testdata/corpus"

func exitCode(err error) int {
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestValidateCorpus: one line per problem, in the golden order and wording, paths under DIR,
// a note naming the level of the SQL check, a summary, exit 1; at the lexical level and at the
// parser level alike (the corpus's problems are all found before the parser).
func TestValidateCorpus(t *testing.T) {
	chtest.LibPath(t)
	golden, err := os.ReadFile("../../configsrc/testdata/corpus.problems.golden")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(string(golden)), "\n") {
		want = append(want, filepath.Join(corpusDir, l))
	}
	for _, level := range []struct{ flag, note string }{
		{"--offline-parser=false", "note: only a lexical check of the SQL ran (no server, --offline-parser=false)"},
		{"--offline-parser=true", "note: ClickHouse's parser (embedded engine "},
	} {
		out, err := runApp(t, "validate", level.flag, corpusDir)
		if exitCode(err) != exitError {
			t.Fatalf("%s: exit %d (%v), want %d", level.flag, exitCode(err), err, exitError)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if note := lines[len(lines)-2]; !strings.HasPrefix(note, level.note) {
			t.Errorf("%s: validate without a server does not say how far it checked the SQL: %q", level.flag, note)
		} else {
			lines = append(lines[:len(lines)-2], lines[len(lines)-1])
		}
		if got := strings.Join(lines[:len(lines)-1], "\n"); got != strings.Join(want, "\n") {
			t.Errorf("%s: problem lines differ:\n%s\n--- want\n%s", level.flag, got, strings.Join(want, "\n"))
		}
		summary := lines[len(lines)-1]
		if !strings.Contains(summary, "7 valid hunts") || !strings.Contains(summary, "problems in") {
			t.Errorf("%s: summary = %q", level.flag, summary)
		}
	}
}

type validateJSON struct {
	Hunts    []validateHunt  `json:"hunts"`
	Errors   []validateError `json:"errors"`
	Commit   string          `json:"commit"`
	SQLCheck string          `json:"sql_check"`
}

func TestValidateJSON(t *testing.T) {
	dir := filepath.Join(corpusDir, "good")
	out, err := runApp(t, "validate", "--json", "--offline-parser=false", "--spread-fraction", "0.5", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got validateJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Hunts) != 7 || got.Errors == nil || len(got.Errors) != 0 {
		t.Fatalf("hunts %d errors %v", len(got.Hunts), got.Errors)
	}
	if got.SQLCheck != "lexical" { // no server, no parser: the output says only the lexer looked
		t.Errorf("sql_check = %q, want lexical", got.SQLCheck)
	}
	for _, h := range got.Hunts {
		if !h.Pinned && h.PhaseOffset != schedule.PhaseOffset(h.ID, h.IntervalSeconds, 0.5) {
			t.Errorf("%s: offset %d, schedule says %d", h.ID, h.PhaseOffset, schedule.PhaseOffset(h.ID, h.IntervalSeconds, 0.5))
		}
		if !strings.HasPrefix(h.File, dir) {
			t.Errorf("%s: file %q not under %s", h.ID, h.File, dir)
		}
		if h.ID == "rare.process_v2" && h.Enabled {
			t.Error("rare.process_v2 is disabled in its file")
		}
		if h.ID == "legacy-cron-list" && (!h.Pinned || h.IntervalSeconds != 3600 || h.PhaseOffset != 0) {
			t.Errorf("cron hunt: %+v", h)
		}
	}

	out, err = runApp(t, "validate", "--json", filepath.Join(corpusDir, "bad"))
	if exitCode(err) != exitError {
		t.Fatalf("bad dir: exit %d", exitCode(err))
	}
	got = validateJSON{}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Hunts) != 0 || len(got.Errors) < 30 || got.Errors[0].Line < 1 || got.Errors[0].Column < 1 {
		t.Errorf("bad dir: %d hunts, %d errors, first %+v", len(got.Hunts), len(got.Errors), got.Errors[0])
	}
}

func TestValidateUsage(t *testing.T) {
	if _, err := runApp(t, "validate"); exitCode(err) != exitUsage {
		t.Errorf("no source: exit %d (%v)", exitCode(err), err)
	}
	if _, err := runApp(t, "validate", "a", "b"); exitCode(err) != exitUsage {
		t.Errorf("two dirs: exit %d", exitCode(err))
	}
	if _, err := runApp(t, "validate", filepath.Join(t.TempDir(), "missing")); exitCode(err) != exitError {
		t.Errorf("missing dir: exit %d", exitCode(err))
	}
	// A directory with no hunt files is almost always a wrong path: it must not pass CI.
	if _, err := runApp(t, "validate", t.TempDir()); exitCode(err) != exitError || !strings.Contains(err.Error(), "no hunt files") {
		t.Errorf("empty dir: exit %d (%v)", exitCode(err), err)
	}
}

func TestValidateGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git CLI not installed")
	}
	repo := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "HOME="+repo, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com",
			"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	os.MkdirAll(filepath.Join(repo, "hunts"), 0o755)
	os.WriteFile(filepath.Join(repo, "hunts", "ok.yaml"), []byte("interval: 5m\nquery: SELECT 1 WHERE {window}\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "hunts", "bad.yaml"), []byte("interval: on\nquery: SELECT 1 WHERE {window}\n"), 0o644)
	git("add", ".")
	git("commit", "-q", "-m", "hunts")
	out, err := runApp(t, "validate", "--git-url", "file://"+repo, "--git-path", "hunts", "--git-cache-dir", t.TempDir())
	if exitCode(err) != exitError {
		t.Fatalf("exit %d (%v)\n%s", exitCode(err), err, out)
	}
	if !strings.HasPrefix(out, "hunts/bad.yaml:1:11: interval: the value is a boolean in YAML 1.1") || !strings.Contains(out, "1 valid hunt, 1 problem in 1 file") || !strings.Contains(out, "(commit ") {
		t.Errorf("output:\n%s", out)
	}
}

// TestValidateWithServer: with --clickhouse-url the server's parser is asked as well.
func TestValidateWithServer(t *testing.T) {
	db := chtest.New(t)
	// The corpus reads tables this server does not have: parse only.
	out, err := runApp(t, "validate", "--clickhouse-url", db.URL, "--resolve-names=false", filepath.Join(corpusDir, "good"))
	if err != nil {
		t.Fatalf("good corpus on the server: %v\n%s", err, out)
	}
	// Names are resolved by default: the same corpus names tables the server does not know.
	out, err = runApp(t, "validate", "--clickhouse-url", db.URL, filepath.Join(corpusDir, "good"))
	if exitCode(err) != exitError || !strings.Contains(out, "database sample does not exist on the server") || !strings.Contains(out, ": 0 valid hunts,") {
		t.Errorf("unresolvable names passed, or their hunts were still counted valid: exit %d\n%s", exitCode(err), out)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "typo.yaml"), []byte("interval: 5m\nquery: |\n  SELECT count() + FROM sample.auth_events\n  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"), 0o644)
	out, err = runApp(t, "validate", "--offline-parser=false", dir)
	if err != nil {
		t.Fatalf("the lexical check should pass the syntax error only a parser sees: %v\n%s", err, out)
	}
	out, err = runApp(t, "validate", "--clickhouse-url", db.URL, dir)
	// "+ FROM" makes FROM a column and sample its alias; the server fails at the '.', line 3,
	// column 31 of the file (the block's indent of 2, then column 29 of the query).
	if exitCode(err) != exitError || !strings.Contains(out, filepath.Join(dir, "typo.yaml")+":3:31: the server's parser says: Syntax error") {
		t.Errorf("exit %d, output:\n%s", exitCode(err), out)
	}
	// The refusal names the place and what the server expected, and quotes neither the rest of
	// the file nor the statement that wraps the query, nor the server's version.
	for _, echo := range []string{"window_start", "hr_", "cityHash64", "(version "} {
		if strings.Contains(out, echo) {
			t.Errorf("the refusal quotes %q:\n%s", echo, out)
		}
	}
	if !strings.Contains(out, "of the query (.). Expected one of: ") {
		t.Errorf("the refusal lost the failing token or what was expected:\n%s", out)
	}
}

// TestHuntSource: the shared source builder other commands use.
func TestHuntSource(t *testing.T) {
	try := func(args ...string) (string, error) {
		var got string
		app := &cli.App{Name: "x", Commands: []*cli.Command{{Name: "c", Flags: sourceFlags(), Action: func(c *cli.Context) error {
			src, err := huntSource(c, newLogger(c))
			if src != nil {
				got = src.String()
			}
			return err
		}}}}
		app.ExitErrHandler = func(*cli.Context, error) {}
		err := app.Run(append([]string{"x", "c"}, args...))
		return got, err
	}
	if got, err := try("--hunts-dir", "/srv/hunts"); err != nil || got != "dir:/srv/hunts" {
		t.Errorf("dir: %q %v", got, err)
	}
	if got, err := try("--git-url", "https://git.example.com/h.git", "--git-ref", "v2", "--git-path", "hunts"); err != nil || got != "git:https://git.example.com/h.git@v2:hunts" {
		t.Errorf("git: %q %v", got, err)
	}
	if _, err := try("--hunts-dir", "/a", "--git-url", "file:///b"); exitCode(err) != exitUsage {
		t.Errorf("both: %v", err)
	}
	if _, err := try(); exitCode(err) != exitUsage {
		t.Errorf("neither: %v", err)
	}
	if _, err := try("--git-url", "https://u:secret@git.example.com/h.git"); exitCode(err) != exitUsage || strings.Contains(err.Error(), "secret") {
		t.Errorf("password in URL: %v", err)
	}
	if _, err := try("--hunts-dir", "/a", "--spread-fraction", "1.5"); exitCode(err) != exitUsage {
		t.Errorf("bad spread fraction: %v", err)
	}
}

// TestValidateHostileCorpus: validate refuses every hostile hunt offline and with the server,
// and the symlinked secret next to them never reaches its output.
func TestValidateHostileCorpus(t *testing.T) {
	db := chtest.New(t)
	base := t.TempDir()
	dir := filepath.Join(base, "hunts")
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
		writeTestFile(t, filepath.Join(dir, e.Name()), string(b))
	}
	secret := "s" + rand.Text()
	writeTestFile(t, filepath.Join(base, "token"), "password: "+secret+"\n")
	if err := os.Symlink(filepath.Join(base, "token"), filepath.Join(dir, "leak.yaml")); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(dir, "good.yaml"), "interval: 5m\nquery: SELECT 1 FROM sample.auth_events WHERE {window}\n")
	for _, args := range [][]string{
		{"validate", dir},
		{"validate", "--offline-parser=false", dir},
		{"validate", "--json", dir},
		{"validate", "--clickhouse-url", db.URL, "--resolve-names=false", dir},
	} {
		out, err := runApp(t, args...)
		if exitCode(err) != exitError {
			t.Errorf("%v: exit %d, want %d", args, exitCode(err), exitError)
		}
		if strings.Contains(out, secret) || (err != nil && strings.Contains(err.Error(), secret)) {
			t.Errorf("%v: the secret is in the output:\n%s", args, out)
		}
		for _, e := range entries {
			if !strings.Contains(out, e.Name()) {
				t.Errorf("%v: %s not refused:\n%s", args, e.Name(), out)
			}
		}
		if !strings.Contains(out, "leak.yaml") || !strings.Contains(out, "symlink resolves outside the hunts directory") ||
			!strings.Contains(out, "1 valid hunt") && !slices.Contains(args, "--json") {
			t.Errorf("%v: output:\n%s", args, out)
		}
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestValidatePolicyFlags: --allow-table-functions, --allow-functions, --allow-dictionaries and
// --allow-system-tables widen what validate accepts, offline and with the server, and a bad
// list is a usage error.
func TestValidatePolicyFlags(t *testing.T) {
	db := chtest.New(t)
	dir := t.TempDir()
	const w = " WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
	writeTestFile(t, filepath.Join(dir, "n.yaml"), "interval: 5m\nquery: SELECT zero FROM zeros(3)"+w)
	writeTestFile(t, filepath.Join(dir, "s.yaml"), "interval: 5m\nquery: SELECT dummy FROM system.one"+w)
	writeTestFile(t, filepath.Join(dir, "f.yaml"), "interval: 5m\nquery: SELECT throwIf(0) FROM numbers(3)"+w)
	writeTestFile(t, filepath.Join(dir, "d.yaml"), "interval: 5m\nquery: SELECT dictHas('geo.country', toUInt64(1)) FROM numbers(3)"+w)
	out, err := runApp(t, "validate", dir)
	for _, want := range []string{"table function zeros()", "reads system tables", "--allow-functions throwIf", "--allow-dictionaries"} {
		if exitCode(err) != exitError || !strings.Contains(out, want) {
			t.Errorf("default policy, want %q: exit %d\n%s", want, exitCode(err), out)
		}
	}
	widen := []string{"--allow-table-functions", "zeros", "--allow-system-tables", "--allow-functions", "throwIf", "--allow-dictionaries", "geo.country"}
	for _, args := range [][]string{
		slices.Concat([]string{"validate"}, widen, []string{dir}),
		slices.Concat([]string{"validate", "--offline-parser=false"}, widen, []string{dir}),
		slices.Concat([]string{"validate", "--clickhouse-url", db.URL, "--resolve-names=false"}, widen, []string{dir}),
	} {
		if out, err := runApp(t, args...); err != nil {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	for _, flag := range []string{"--allow-table-functions", "--allow-functions", "--allow-dictionaries"} {
		if _, err := runApp(t, "validate", flag, "url('x')", dir); exitCode(err) != exitUsage {
			t.Errorf("a bad %s list: %v", flag, err)
		}
	}
}

// Files are validated on their own (a pre-commit hook passes the changed ones), and reported
// under the paths given.
func TestValidateFiles(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "a", "good.yaml"), filepath.Join(dir, "b", "good.yaml")
	os.MkdirAll(filepath.Dir(good), 0o755)
	os.MkdirAll(filepath.Dir(bad), 0o755)
	os.WriteFile(good, []byte("id: one\ninterval: 5m\nquery: SELECT 1 AS x WHERE {window}\n"), 0o644)
	os.WriteFile(bad, []byte("id: two\ninterval: 5m\nquery: |\n  SELECT count( AS failures WHERE {window}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a", "unrelated.yaml"), []byte("not: a hunt\n"), 0o644)
	out, err := runApp(t, "validate", good, bad)
	if exitCode(err) != exitError || !strings.Contains(out, bad+":4:") || strings.Contains(out, "unrelated") ||
		!strings.Contains(out, "1 valid hunt, 1 problem in 1 file") {
		t.Fatalf("exit %d, output:\n%s", exitCode(err), out)
	}
	if out, err := runApp(t, "validate", good); err != nil {
		t.Fatalf("one good file: %v\n%s", err, out)
	}
}

// TestValidateFileNamesCannotForgeLines: a file name with a newline or an ESC sequence is shown
// escaped, so it cannot forge a line (or clear one) of validate's report.
func TestValidateFileNamesCannotForgeLines(t *testing.T) {
	dir := t.TempDir()
	name := "evil\nhunts/forged.yaml:1:1: all good\x1b[2K.yaml"
	writeTestFile(t, filepath.Join(dir, name), "interval: nope\n")
	out, err := runApp(t, "validate", dir)
	if exitCode(err) != exitError {
		t.Fatalf("exit %d\n%s", exitCode(err), out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "hunts/forged.yaml") {
			t.Errorf("a file name forged a line: %q", line)
		}
	}
	if strings.Contains(out, "\x1b") || !strings.Contains(out, `evil\x0ahunts/forged.yaml:1:1: all good\x1b[2K.yaml`) {
		t.Errorf("file name not escaped:\n%q", out)
	}
}

// Declared sources and read budgets: malformed values and a budget above the operator's
// ceiling fail offline with file:line; with a server, a source table that does not exist or
// lacks its time column fails with the line of its entry.
func TestValidateSourcesAndBudget(t *testing.T) {
	db := chtest.New(t)
	if err := db.Conn.Exec(context.Background(), "CREATE TABLE feed (ts DateTime, v UInt8) ENGINE = MergeTree ORDER BY ts"); err != nil {
		t.Fatal(err)
	}
	q := "query: SELECT v FROM " + db.Name + ".feed WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"
	feed := db.Name + ".feed"
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "ok.yaml"), "interval: 5m\n"+q+"sources: [{table: "+feed+", time_column: ts, max_silence: 15m}]\nmax_rows_read: 1000\nmax_bytes_read: 1GiB\n")
	out, err := runApp(t, "validate", "--max-rows-read-ceiling", "1000", "--max-bytes-read-ceiling", "1GiB", dir)
	if err != nil {
		t.Fatalf("within the ceilings: %v\n%s", err, out)
	}
	out, err = runApp(t, "validate", "--max-rows-read-ceiling", "999", dir)
	if exitCode(err) != exitError || !strings.Contains(out, filepath.Join(dir, "ok.yaml")+":4:16: max_rows_read 1000 is above the operator's ceiling of 999") {
		t.Errorf("a budget above the ceiling: exit %d\n%s", exitCode(err), out)
	}
	if _, err := runApp(t, "validate", "--max-bytes-read-ceiling", "lots", dir); exitCode(err) != exitUsage {
		t.Errorf("a malformed ceiling flag: %v", err)
	}
	if _, err := runApp(t, "validate", "--max-rows-read-default", "10", "--max-rows-read-ceiling", "5", dir); exitCode(err) != exitUsage {
		t.Errorf("a default above its ceiling: %v", err)
	}
	writeTestFile(t, filepath.Join(dir, "bad.yaml"), "interval: 5m\n"+q+"sources:\n  - {table: feed, time_column: ts, max_silence: soon}\nmax_bytes_read: 2 parsecs\n")
	out, err = runApp(t, "validate", dir)
	for _, want := range []string{"bad.yaml:4:49: sources.max_silence", "bad.yaml:5:17: max_bytes_read must be a size"} {
		if exitCode(err) != exitError || !strings.Contains(out, want) {
			t.Errorf("want %q: exit %d\n%s", want, exitCode(err), out)
		}
	}
	os.Remove(filepath.Join(dir, "bad.yaml"))
	writeTestFile(t, filepath.Join(dir, "gone.yaml"), "interval: 5m\n"+q+"sources:\n  - {table: "+feed+", time_column: ts, max_silence: 1m}\n  - {table: nosuch, time_column: ts, max_silence: 1m}\n")
	writeTestFile(t, filepath.Join(dir, "col.yaml"), "interval: 5m\n"+q+"sources:\n  - {table: "+feed+", time_column: when, max_silence: 1m}\n")
	out, err = runApp(t, "validate", "--clickhouse-url", db.URL, "--resolve-names=false", dir)
	for _, want := range []string{filepath.Join(dir, "gone.yaml") + ":5:1: sources: table nosuch does not exist",
		filepath.Join(dir, "col.yaml") + ":4:1: sources: table " + feed + " has no column when", ": 1 valid hunt,"} {
		if exitCode(err) != exitError || !strings.Contains(out, want) {
			t.Errorf("with the server, want %q: exit %d\n%s", want, exitCode(err), out)
		}
	}
}

// validate and exceptions: a warning (not a failure) for an exception that expires within 7
// days and for one that expired; offline, an exception without until: is an error unless
// --allow-permanent-exceptions; with the server, an IP range on a column that holds no address
// is an error at the shared list's line.
func TestValidateExceptions(t *testing.T) {
	db := chtest.New(t)
	if err := db.Conn.Exec(context.Background(), "CREATE TABLE auth (ts DateTime, user String, ip IPv4, port UInt16) ENGINE = MergeTree ORDER BY ts"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	soon := time.Now().UTC().Add(72 * time.Hour).Format(time.RFC3339)
	writeTestFile(t, filepath.Join(dir, "h.yaml"), "interval: 5m\nquery: SELECT user, ip, port FROM "+db.Name+".auth WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"+
		"exceptions:\n"+
		"  - {match: {user: a}, until: "+soon+", owner: o, reason: r}\n"+
		"  - {match: {user: b}, until: 2020-01-01, owner: o, reason: r}\n"+
		"  - {match: {user: c}, until: 2099-01-01, owner: o, reason: r}\n")
	out, err := runApp(t, "validate", dir)
	h := filepath.Join(dir, "h.yaml")
	for _, want := range []string{h + ":4:5: warning: exception exceptions#1 expires at " + soon, h + ":5:5: warning: exception exceptions#2 expired at 2020-01-01T00:00:00Z and no longer applies", ": 1 valid hunt, 0 problems"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("want %q: %v\n%s", want, err, out)
		}
	}
	if strings.Contains(out, "exceptions#3") {
		t.Errorf("an exception far from its until is warned about:\n%s", out)
	}
	writeTestFile(t, filepath.Join(dir, "h.yaml"), "interval: 5m\nquery: SELECT user, ip, port FROM "+db.Name+".auth WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n"+
		"exceptions_from: [scanners]\n")
	writeTestFile(t, filepath.Join(dir, "lists", "scanners.exceptions.yaml"), "name: scanners\nexceptions:\n  - owner: o\n    reason: r\n    match: {port: 10.0.0.0/8}\n")
	out, err = runApp(t, "validate", dir)
	if list := filepath.Join(dir, "lists", "scanners.exceptions.yaml"); exitCode(err) != exitError || !strings.Contains(out, list+":3:5: exception has no until") {
		t.Errorf("an exception without until: exit %d\n%s", exitCode(err), out)
	}
	if out, err = runApp(t, "validate", "--allow-permanent-exceptions", dir); err != nil {
		t.Errorf("allowed permanent exceptions: %v\n%s", err, out)
	}
	out, err = runApp(t, "validate", "--allow-permanent-exceptions", "--clickhouse-url", db.URL, dir)
	if list := filepath.Join(dir, "lists", "scanners.exceptions.yaml"); exitCode(err) != exitError ||
		!strings.Contains(out, list+":5:13: exception scanners#1: match.port gives an IP range, but the column is UInt16") {
		t.Errorf("a range on a UInt16 column with the server: exit %d\n%s", exitCode(err), out)
	}
}
