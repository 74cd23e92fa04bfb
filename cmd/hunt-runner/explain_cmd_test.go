package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/notify"
	"github.com/hunt-runner/hunt-runner/store"
)

// TestStatusLinkFlagsRefuseCredentials: the status page's links out are shown to every reader,
// so run and dev refuse them with credentials or not http(s), naming the flag and not the
// secret; a clean URL goes on (to the connection, which fails here: nothing listens).
func TestStatusLinkFlagsRefuseCredentials(t *testing.T) {
	t.Setenv(passwordEnv, "")
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: a\ninterval: 1h\n"+huntQuery)
	common := []string{"--hunts-dir", dir, "--clickhouse-url", "http://" + closedPort(t), "--clickhouse-connect-timeout", "1ms", "--listen", "127.0.0.1:0"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--clickhouse-web-url", "https://u:s3cret@ch.example.com/play"}, exitUsage, "--clickhouse-web-url must not carry credentials"},
		{[]string{"--clickhouse-web-url", "https://ch.example.com/play?user=u&password=s3cret"}, exitUsage, "--clickhouse-web-url must not carry credentials"},
		{[]string{"--git-commit-url", "git.example.com/commit/"}, exitUsage, "--git-commit-url must be an absolute"},
		{[]string{"--clickhouse-web-url", "https://ch.example.com/play", "--git-commit-url", "https://git.example.com/c/"}, exitError, ""},
	} {
		_, err := runApp(t, append(append([]string{"run"}, c.args...), common...)...)
		if schedExit(err) != c.code {
			t.Errorf("%v: exit %d (%v), want %d", c.args, schedExit(err), err, c.code)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret")) {
			t.Errorf("%v: %v, want %q and no secret", c.args, err, c.want)
		}
	}
}

// validate names the file, line and column of a template naming a column the query cannot
// output, and of a malformed MITRE id.
func TestValidateRefusesBadExplainKeys(t *testing.T) {
	dir := t.TempDir()
	writeHunt(t, dir, "a.yaml", "id: a\ninterval: 1h\n"+huntQuery+"title: \"seen {{y}}\"\nmitre: [T11]\n")
	out, err := runApp(t, "validate", dir)
	if exitCode(err) != exitError {
		t.Fatalf("exit %d (%v), want %d\n%s", exitCode(err), err, exitError, out)
	}
	for _, want := range []string{filepath.Join(dir, "a.yaml") + ":6:8: title names {{y}}, which is not an output column",
		filepath.Join(dir, "a.yaml") + ":7:9: mitre id is not an ATT&CK"} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}

// findings --json carries each finding's title, severity, dedup key, runbook, MITRE ids and
// revision, as the runner stores them.
func TestFindingsJSONCarriesExplainAndRevision(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	h := hunt.NewSet([]hunt.Hunt{{ID: "brute", Interval: time.Minute, Enabled: true, Query: "SELECT 1", Severity: "low",
		Title: "from {{ip}}", Dedup: "{{ip}}", SeverityFrom: "sev", Runbook: "https://wiki.example.com/rb", Mitre: []string{"T1110"}}},
		"test", "c0ffee").Hunts[0]
	ex, err := h.Explainer()
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"ip":"10.0.0.9","sev":"high"}`
	run := uuid.New()
	fire := time.Now().Add(-time.Minute).Unix()
	if err := store.New(db.Conn, db.Name).InsertFindings(ctx, store.Findings{HuntID: "brute", Fire: fire, RunID: run, Severity: h.Severity,
		Docs: []string{doc}, Explained: []hunt.Explained{ex.Explain(doc)}, Runbook: h.Runbook, Mitre: h.Mitre, Revision: h.Revision(), Found: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_rows) "+
		"SELECT 'brute', toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), ?, 1", fire, run); err != nil {
		t.Fatal(err)
	}
	out, err := runApp(t, "findings", "brute", "--json", "--clickhouse-url", db.URL, "--database", db.Name)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var fs []notify.Finding
	if err := json.Unmarshal([]byte(out), &fs); err != nil || len(fs) != 1 {
		t.Fatalf("findings --json: %v\n%s", err, out)
	}
	f := fs[0]
	if f.Title != "from 10.0.0.9" || f.Severity != "high" || f.DedupKey != "10.0.0.9" || f.Runbook != h.Runbook ||
		strings.Join(f.Mitre, ",") != "T1110" || f.Revision != h.Revision() || !strings.HasSuffix(f.Revision, "@c0ffee") {
		t.Fatalf("findings --json:\n%s", out)
	}
	for _, key := range []string{`"title"`, `"dedup_key"`, `"runbook"`, `"mitre"`, `"revision"`} {
		if !strings.Contains(out, key) {
			t.Errorf("findings --json lacks %s", key)
		}
	}
}
