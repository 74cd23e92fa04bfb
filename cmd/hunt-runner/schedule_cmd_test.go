package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// schedExit is the status main would exit with for a command's error.
func schedExit(err error) int {
	if err == nil {
		return exitOK
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return exitError
}

// writeHunt writes a hunt file dated in the past, so the directory source trusts it at once.
func writeHunt(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

const huntQuery = `query: |
  SELECT 1 AS x
  WHERE now() >= {window_start:DateTime64(3)} AND now() < {window_end:DateTime64(3)}
`

func countRows(t *testing.T, db *chtest.DB, table string) uint64 {
	t.Helper()
	var n uint64
	if err := db.Conn.QueryRow(context.Background(), "SELECT count() FROM "+schema.QuoteIdent(db.Name)+"."+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMaterialiseAndDueCommands(t *testing.T) {
	db := chtest.NewWithSchema(t)
	t.Setenv(passwordEnv, "")
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: hunt-a\ninterval: 5m\n"+huntQuery)
	writeHunt(t, dir, "b.yaml", "id: hunt-b\ncron: \"*/15 * * * *\"\n"+huntQuery)
	writeHunt(t, dir, "c.yaml", "id: hunt-c\ninterval: 1h\nenabled: false\n"+huntQuery)
	writeHunt(t, dir, "bad.yaml", "id: hunt-bad\ninterval: true\n"+huntQuery)
	conn := []string{"--clickhouse-url", db.URL, "--database", db.Name, "--clickhouse-connect-timeout", "10s"}
	materialise := func(extra ...string) (string, int) {
		t.Helper()
		out, err := runApp(t, append(append([]string{"materialise", "--hunts-dir", dir}, conn...), extra...)...)
		return out, schedExit(err)
	}

	out, code := materialise("--dry-run", "--detailed-exitcode")
	if code != exitDetailedChanged || !strings.Contains(out, "+ hunt-a  every 5m at +") || !strings.Contains(out, "+ hunt-b  every 15m at +0s") ||
		!strings.Contains(out, "would write 2 row(s)") || !strings.Contains(out, "bad.yaml") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if n := countRows(t, db, "hunt_schedule"); n != 0 {
		t.Fatalf("dry run wrote %d rows", n)
	}
	// Publishing is success (CI jobs and Helm hooks fail on anything else); the old flag still
	// picks a status for "changed", and the detailed one never lets an error look like a change.
	if out, code := materialise("--dry-run"); code != exitOK || !strings.Contains(out, "would write 2 row(s)") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if out, code := materialise("--dry-run", "--changed-exit-code=0"); code != exitOK || !strings.Contains(out, "would write 2 row(s)") {
		t.Fatalf("dry run with --changed-exit-code=0: exit %d\n%s", code, out)
	}
	if out, code := materialise("--dry-run", "--changed-exit-code=3"); code != 3 {
		t.Fatalf("dry run with --changed-exit-code=3: exit %d\n%s", code, out)
	}
	if out, code := materialise("--detailed-exitcode", "--spread-fraction=7"); code != exitError {
		t.Fatalf("usage error with --detailed-exitcode: exit %d, want 1 (2 means changed)\n%s", code, out)
	}
	if out, code := materialise("--detailed-exitcode", "--changed-exit-code=0"); code != exitUsage {
		t.Fatalf("both exit-code flags: exit %d\n%s", code, out)
	}

	out, code = materialise()
	if code != exitOK || !strings.Contains(out, "2 added, 0 changed, 0 tombstoned, 1 unchanged; wrote 2 row(s)") {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	// As validate shows it: the path under --hunts-dir, line and column.
	if !strings.Contains(out, filepath.Join(dir, "bad.yaml")+":2:11: interval: the value is a boolean") || !strings.Contains(out, "(left out)") {
		t.Errorf("invalid hunt not reported with its path and position:\n%s", out)
	}
	out, code = materialise("--detailed-exitcode")
	if code != exitOK || !strings.Contains(out, "0 added, 0 changed, 0 tombstoned, 3 unchanged; wrote 0 row(s)") {
		t.Fatalf("second run: exit %d\n%s", code, out)
	}
	if n := countRows(t, db, "hunt_schedule"); n != 2 {
		t.Fatalf("hunt_schedule has %d rows after two runs, want 2", n)
	}
	if n := countRows(t, db, "hunt_publish"); n != 1 {
		t.Fatalf("hunt_publish has %d rows after two runs, want 1", n)
	}

	// due: nothing has run, so both published hunts are due.
	out, err := runApp(t, append([]string{"due"}, conn...)...)
	if err != nil || out != "2\n" {
		t.Fatalf("due: %v %q", err, out)
	}
	out, err = runApp(t, append([]string{"due", "--json"}, conn...)...)
	if err != nil || strings.TrimSpace(out) != `{"due":2}` {
		t.Fatalf("due --json: %v %q", err, out)
	}
	out, err = runApp(t, append([]string{"due", "--json", "--explain"}, conn...)...)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Due   int
		Hunts []struct {
			HuntID     string     `json:"hunt_id"`
			Fire       time.Time  `json:"fire"`
			Watermark  *time.Time `json:"watermark"`
			LeaseUntil *time.Time `json:"lease_until"`
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("due --json --explain: %v\n%s", err, out)
	}
	if got.Due != 2 || len(got.Hunts) != 2 || got.Hunts[0].Watermark != nil || got.Hunts[0].LeaseUntil != nil || got.Hunts[0].Fire.IsZero() {
		t.Fatalf("due --json --explain = %+v", got)
	}
	if !strings.Contains(out, `"watermark":null`) || !strings.Contains(out, `"lease_until":null`) {
		t.Errorf("missing null watermark/lease keys: %s", out)
	}
	out, err = runApp(t, append([]string{"due", "--explain"}, conn...)...)
	if err != nil || !strings.HasPrefix(out, "2\nHUNT_ID") || !strings.Contains(out, "hunt-a") || !strings.Contains(out, "hunt-b") {
		t.Fatalf("due --explain: %v\n%s", err, out)
	}

	// Remove hunt-a while bad.yaml is still broken: hunt-a is kept, not tombstoned.
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	out, code = materialise("--detailed-exitcode")
	if code != exitDetailedChanged || !strings.Contains(out, "= hunt-a  kept as published") || strings.Contains(out, "- hunt-a") {
		t.Fatalf("removal with a broken file: exit %d\n%s", code, out)
	}
	// Fix the broken file: now hunt-a is tombstoned and hunt-bad added.
	writeHunt(t, dir, "bad.yaml", "id: hunt-bad\ninterval: 10m\n"+huntQuery)
	out, code = materialise()
	if code != exitOK || !strings.Contains(out, "- hunt-a  tombstone (removed;") || !strings.Contains(out, "+ hunt-bad") {
		t.Fatalf("removal: exit %d\n%s", code, out)
	}

	// An empty directory is refused, a missing one is unreadable: neither writes anything.
	before := countRows(t, db, "hunt_schedule")
	empty := t.TempDir()
	out, err = runApp(t, append([]string{"materialise", "--hunts-dir", empty}, conn...)...)
	if schedExit(err) != exitError || !strings.Contains(err.Error(), "--allow-empty") {
		t.Fatalf("empty source: exit %d, %v\n%s", schedExit(err), err, out)
	}
	out, err = runApp(t, append([]string{"materialise", "--hunts-dir", filepath.Join(empty, "missing")}, conn...)...)
	if schedExit(err) != exitError || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("missing source: exit %d, %v\n%s", schedExit(err), err, out)
	}
	if n := countRows(t, db, "hunt_schedule"); n != before {
		t.Fatalf("refused runs wrote %d rows", n-before)
	}
	out, err = runApp(t, append([]string{"materialise", "--hunts-dir", empty, "--allow-empty"}, conn...)...)
	if schedExit(err) != exitOK || !strings.Contains(out, "2 tombstoned") {
		t.Fatalf("--allow-empty: exit %d, %v\n%s", schedExit(err), err, out)
	}
	out, err = runApp(t, append([]string{"due"}, conn...)...)
	if err != nil || out != "0\n" {
		t.Fatalf("due after tombstoning everything: %v %q", err, out)
	}
}

func TestDueCommandFailsLoudly(t *testing.T) {
	db := chtest.New(t) // no tables: the query fails, and due must not print 0
	t.Setenv(passwordEnv, "")
	out, err := runApp(t, "due", "--clickhouse-url", db.URL, "--database", db.Name, "--clickhouse-connect-timeout", "10s")
	if schedExit(err) != exitError || strings.TrimSpace(out) == "0" {
		t.Fatalf("due without tables: exit %d, %v, %q", schedExit(err), err, out)
	}
}
