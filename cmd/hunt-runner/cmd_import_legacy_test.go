package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/status"
)

// TestImportLegacyThenRun is the cut-over on the engine: the earlier runner's tables in their
// own database, import-legacy (dry, then for real), status, materialise, then a real `run`,
// whose first windows start exactly at the imported watermarks — on the new grid, off it, and
// shifted by a delay — while a hunt whose watermark lies past its latest fire waits for the
// next one. A second import changes nothing.
func TestImportLegacyThenRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old, db := chtest.New(t), chtest.NewWithSchema(t)
	for _, q := range []string{
		"CREATE TABLE hunt_watermark (hunt_id String, watermark Int64, updated DateTime64(3) DEFAULT now64(3)) ENGINE = ReplacingMergeTree(updated) ORDER BY hunt_id",
		"CREATE TABLE hunt_state (hunt_id String, overrun_count Int64, too_aggressive UInt8, updated DateTime64(3) DEFAULT now64(3)) ENGINE = ReplacingMergeTree(updated) ORDER BY hunt_id",
	} {
		if err := old.Conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var now32 uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now32); err != nil {
		t.Fatal(err)
	}
	now := int64(now32)
	// Hourly crons pinned half an hour and twenty minutes before the server's clock: no fire
	// boundary passes while the test runs, whatever the hour.
	m1, m2 := (now/60+30)%60, (now/60+40)%60
	l1, l2 := schedule.LatestFire(now, 3600, m1*60), schedule.LatestFire(now, 3600, m2*60)
	dir := t.TempDir()
	query := "query: |\n  SELECT arrayJoin([0, 1]) AS n\n  WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n"
	writeHunt(t, dir, "ongrid.yaml", fmt.Sprintf("cron: \"%d * * * *\"\n%s", m1, query))
	writeHunt(t, dir, "offgrid.yaml", fmt.Sprintf("cron: \"%d * * * *\"\n%s", m2, query))
	writeHunt(t, dir, "waiting.yaml", fmt.Sprintf("cron: \"%d * * * *\"\n%s", m1, query))
	writeHunt(t, dir, "delayed.yaml", fmt.Sprintf("cron: \"%d * * * *\"\ndelay: 2m\n%s", m1, query))
	earlier := map[string]int64{
		"ongrid":  l1 - 3600,        // the previous fire: the earlier runner was on the same grid
		"offgrid": l2 - 3600 + 1234, // the earlier runner fired at a hash offset, not at the cron's minute
		"waiting": l1 + 600,         // past this hour's fire: nothing owed until the next one
		"delayed": l1 - 3600,
		"retired": l1 - 3600, // its file is gone
	}
	for id, w := range earlier {
		if err := old.Conn.Exec(ctx, "INSERT INTO hunt_watermark (hunt_id, watermark) VALUES (?, ?)", id, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Conn.Exec(ctx, "INSERT INTO hunt_state (hunt_id, overrun_count, too_aggressive) VALUES ('ongrid', 2, 1)"); err != nil {
		t.Fatal(err)
	}
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name, "--hunts-dir", dir}
	imp := append([]string{"import-legacy", "--from-database", old.Name}, common...)
	count := func(q string) uint64 {
		var n uint64
		if err := db.Conn.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	utc := func(s int64) string { return time.Unix(s, 0).UTC().Format(time.RFC3339) }

	out, err := runApp(t, append(imp, "--dry-run", "--detailed-exitcode")...)
	if exitCode(err) != exitDetailedChanged {
		t.Fatalf("dry run: exit %d (%v)\n%s", exitCode(err), err, out)
	}
	t.Logf("import-legacy --dry-run:\n%s", out)
	if n := count("SELECT count() FROM hunt_watermark") + count("SELECT count() FROM hunt_state"); n != 0 {
		t.Fatalf("--dry-run wrote %d rows", n)
	}
	for _, s := range []string{"dry run, nothing is written", "would import: earlier watermark " + utc(earlier["ongrid"]),
		"first window [" + utc(earlier["offgrid"]) + ", " + utc(l2) + "), off the new schedule's grid",
		"first window [" + utc(earlier["waiting"]) + ", " + utc(l1+3600) + ")", "skip      retired", "not among the loaded hunts", "4 to import"} {
		if !strings.Contains(out, s) {
			t.Errorf("dry run output lacks %q:\n%s", s, out)
		}
	}

	out, err = runApp(t, imp...)
	if err != nil || !strings.Contains(out, "4 imported") {
		t.Fatalf("import: exit %d (%v)\n%s", exitCode(err), err, out)
	}
	out, err = runApp(t, append([]string{"status", "--json"}, common...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, h := range rep.Hunts {
		want := earlier[h.HuntID]
		if h.HuntID == "delayed" {
			want += 120
		}
		if h.LastRunStatus != "imported" || h.Watermark != utc(want) || h.Due != (h.HuntID != "waiting") {
			t.Errorf("status after import: %+v (watermark want %s)", h, utc(want))
		}
	}
	if out, err := runApp(t, append([]string{"materialise"}, common...)...); err != nil {
		t.Fatalf("materialise: %v\n%s", err, out)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := runAppContext(runCtx, append([]string{"run", "--tick", "200ms", "--settle", "100ms", "--lease", "10s",
			"--listen", "127.0.0.1:0", "--owner", "import-test"}, common...)...)
		done <- err
	}()
	// The runs have what is left of the test's context.
	end, _ := ctx.Deadline()
	ran := chtest.Poll(time.Until(end), func() bool {
		return ctx.Err() == nil && count("SELECT count() FROM hunt_runs WHERE status = 'succeeded'") >= 3
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if !ran {
		t.Fatal("fewer than 3 succeeded runs before the test's deadline")
	}
	rows, err := db.Conn.Query(ctx, "SELECT hunt_id, toInt64(window_start), toInt64(window_end) FROM hunt_runs WHERE status = 'succeeded' ORDER BY hunt_id")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for rows.Next() {
		var id string
		var s, e int64
		if err := rows.Scan(&id, &s, &e); err != nil {
			t.Fatal(err)
		}
		if _, dup := got[id]; dup {
			t.Errorf("%s ran twice", id)
		}
		got[id] = [2]int64{s, e}
	}
	rows.Close()
	want := map[string][2]int64{
		"delayed": {earlier["delayed"] + 120, l1}, // reads [earlier watermark, fire − delay)
		"offgrid": {earlier["offgrid"], l2},
		"ongrid":  {earlier["ongrid"], l1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("first windows %v, want %v (waiting must not run: its first window is [%d, %d))", got, want, earlier["waiting"], l1+3600)
	}

	before := count("SELECT count() FROM hunt_watermark") + count("SELECT count() FROM hunt_state")
	// The runner stopped seconds ago: its heartbeat is still live, so the import refuses.
	out, err = runApp(t, imp...)
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "import-test") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("import while the runner's heartbeat is live: exit %d, %v\n%s", exitCode(err), err, out)
	}
	out, err = runApp(t, append(imp, "--detailed-exitcode", "--force")...)
	if err != nil || !strings.Contains(out, "0 imported, 1 already imported, 3 left alone") {
		t.Errorf("second import: %v\n%s", err, out)
	}
	if after := count("SELECT count() FROM hunt_watermark") + count("SELECT count() FROM hunt_state"); after != before {
		t.Errorf("the second import wrote %d rows", after-before)
	}
}

func TestImportLegacyUsage(t *testing.T) {
	if _, err := runApp(t, "import-legacy", "--hunts-dir", t.TempDir()); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--from-database") {
		t.Errorf("no --from-database: exit %d (%v)", exitCode(err), err)
	}
	if _, err := runApp(t, "import-legacy", "--from-database", "dfe"); exitCode(err) != exitUsage {
		t.Errorf("no hunt source: exit %d (%v)", exitCode(err), err)
	}
	if _, err := runApp(t, "import-legacy", "--from-database", "dfe", "extra"); exitCode(err) != exitUsage {
		t.Errorf("an argument: exit %d (%v)", exitCode(err), err)
	}
	// With --detailed-exitcode, 2 means "imported": a usage error must not look like it.
	if _, err := runApp(t, "import-legacy", "--detailed-exitcode", "--hunts-dir", t.TempDir()); exitCode(err) != exitError {
		t.Errorf("usage error under --detailed-exitcode: exit %d (%v)", exitCode(err), err)
	}
}

// TestValidateLegacyReport: the report through validate, as text and JSON, and its exit status.
func TestValidateLegacyReport(t *testing.T) {
	corpus := filepath.Join("..", "..", "legacy", "testdata", "corpus")
	out, err := runApp(t, "validate", "--legacy-report", corpus)
	if exitCode(err) != exitError {
		t.Fatalf("exit %d (%v)", exitCode(err), err)
	}
	golden, err := os.ReadFile(filepath.Join("..", "..", "legacy", "testdata", "report.golden"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(string(golden)), "\n") {
		want = append(want, filepath.Join(corpus, l))
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Join(lines[:len(lines)-1], "\n"); got != strings.Join(want, "\n") {
		t.Errorf("report lines differ from the golden file:\n%s", got)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "26 hunt files read") || !strings.Contains(last, "changes to make") {
		t.Errorf("summary %q", last)
	}
	out, err = runApp(t, "validate", "--legacy-report", "--json", corpus)
	var js struct {
		Files    int `json:"files"`
		Findings []struct {
			File, Feature, Message string
			Line, Column           int
			Note                   bool
		} `json:"findings"`
	}
	if exitCode(err) != exitError || json.Unmarshal([]byte(out), &js) != nil || js.Files != 26 || len(js.Findings) != len(want) {
		t.Fatalf("json: exit %d, %d files, %d findings\n%s", exitCode(err), js.Files, len(js.Findings), out)
	}
	// A directory that carries over with notes only passes.
	dir := t.TempDir()
	writeHunt(t, dir, "ok.yaml", "schedule: {mode: rate, cron: \"*/5 * * * *\"}\nmax_findings: 100\nquery: SELECT 1 FROM t WHERE {window}\n")
	if out, err := runApp(t, "validate", "--legacy-report", dir); err != nil || !strings.Contains(out, "0 changes to make and 1 note") {
		t.Errorf("notes only: %v\n%s", err, out)
	}
	if _, err := runApp(t, "validate", "--legacy-report", t.TempDir()); exitCode(err) != exitError {
		t.Errorf("empty dir: exit %d", exitCode(err))
	}
}

// TestImportLegacyRefusedExitsOne: an earlier watermark that cannot be imported fails the
// command, after printing the plan that names it.
func TestImportLegacyRefusedExitsOne(t *testing.T) {
	old, db := chtest.New(t), chtest.NewWithSchema(t)
	if err := old.Conn.Exec(t.Context(), "CREATE TABLE hunt_watermark (hunt_id String, watermark Int64, updated DateTime64(3) DEFAULT now64(3)) ENGINE = ReplacingMergeTree(updated) ORDER BY hunt_id"); err != nil {
		t.Fatal(err)
	}
	if err := old.Conn.Exec(t.Context(), "INSERT INTO hunt_watermark (hunt_id, watermark) VALUES ('zero', 0)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeHunt(t, dir, "zero.yaml", "interval: 1h\nquery: SELECT 1 AS n WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n")
	out, err := runApp(t, "import-legacy", "--from-database", old.Name, "--clickhouse-url", db.URL, "--database", db.Name, "--hunts-dir", dir)
	if exitCode(err) != exitError || !strings.Contains(out, "refused   zero") || !strings.Contains(err.Error(), "could not be imported") {
		t.Errorf("exit %d (%v)\n%s", exitCode(err), err, out)
	}
}
