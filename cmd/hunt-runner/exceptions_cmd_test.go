package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// status HUNT, in text and --json, lists the hunt's exceptions (from the hunt files) with owner,
// expiry, reason and the hits its committed runs recorded.
func TestStatusListsExceptions(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	dir := t.TempDir()
	h := "interval: 1h\nquery: |\n  SELECT arrayJoin(['a', 'b']) AS user\n  WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}\n" +
		"exceptions_from: [svc]\n"
	list := "name: svc\nexceptions:\n  - {match: {user: a}, until: 2099-01-31, owner: secops@corp, reason: the backup account}\n"
	for name, text := range map[string]string{"probe.yaml": h, "svc.exceptions.yaml": list} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Conn.Exec(ctx, "INSERT INTO "+db.Name+".hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started, exception_hits)"+
		" SELECT 'probe', toStartOfHour(now()), generateUUIDv4(), now64(6), ?, 'pod-a', toStartOfHour(now()) - 3600, 1, now64(6), map('svc#1', 5)", uuid.New()); err != nil {
		t.Fatal(err)
	}
	common := []string{"--clickhouse-url", db.URL, "--database", db.Name, "--hunts-dir", dir}
	out, err := runApp(t, append([]string{"status", "probe"}, common...)...)
	if want := "exception probe svc#1: owner secops@corp, until 2099-01-31T00:00:00Z, 5 hit(s) in 7 days: the backup account"; err != nil || !strings.Contains(out, want) {
		t.Errorf("status probe lacks %q: %v\n%s", want, err, out)
	}
	out, err = runApp(t, append([]string{"status", "--json", "probe"}, common...)...)
	if want := `"exceptions": [`; err != nil || !strings.Contains(out, want) || !strings.Contains(out, `"hits": 5`) || !strings.Contains(out, `"list": "svc"`) {
		t.Errorf("status --json lacks the exception with its hits: %v\n%s", err, out)
	}
}
