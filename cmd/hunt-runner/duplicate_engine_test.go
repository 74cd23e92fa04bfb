package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/configsrc"
)

// TestDuplicateIDKeepsPublishedAfterRestart: after materialise published a hunt, a second file
// claiming its id (a disabled file in another team's folder) does not stop it when a runner
// starts afresh: the loader the worker builds keeps the published definition.
func TestDuplicateIDKeepsPublishedAfterRestart(t *testing.T) {
	db, name, conn := fresh(t)
	if out, err := runApp(t, append([]string{"schema"}, conn...)...); err != nil {
		t.Fatalf("schema: %v\n%s", err, out)
	}
	dir := t.TempDir()
	writeHunt(t, dir, "victim.yaml", "id: victim\ninterval: 5m\n"+huntQuery)
	if out, err := runApp(t, append([]string{"materialise", "--hunts-dir", dir}, conn...)...); err != nil {
		t.Fatalf("materialise: %v\n%s", err, out)
	}
	if err := os.Mkdir(filepath.Join(dir, "team-b"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeHunt(t, filepath.Join(dir, "team-b"), "squat.yaml", "id: victim\nenabled: false\ninterval: 1h\n"+huntQuery)
	src, err := configsrc.NewDir(dir, configsrc.Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := configsrc.NewLoader(src, time.Hour, nil, configsrc.WithPublished(publishedDefinitions(db.Conn, name, "")))
	set, _, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := set.Get("victim"); !ok || h.File != "victim.yaml" || h.Interval != 5*time.Minute {
		t.Fatalf("victim = %+v (loaded %v); problems %v", h, ok, set.Problems)
	}
	if len(set.Problems) != 2 {
		t.Errorf("both files must be reported: %v", set.Problems)
	}
}
