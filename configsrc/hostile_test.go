package configsrc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// hostilePolicy is the policy the hostile corpus is judged under: the defaults widened by the
// documented example's merge (whose databases must still be checked), with hunt-runner's
// database named so that reaching for it is refused.
var hostilePolicy = Policy{CoordinationDatabase: "hunt_runner", AllowTableFunctions: []string{"merge"}}

// notQueryRefusals are hostile files whose query, once the file's fields are applied, is a
// harmless SELECT the server rightly accepts: they are refused offline for a field (a ceiling,
// a column name that is an expression), and the server check is not the layer that stops them.
var notQueryRefusals = map[string]bool{
	"max-findings-over.yaml":          true,
	"timestamp-field-expression.yaml": true,
	"label-huge.yaml":                 true,
	"labels-many.yaml":                true,
	"description-huge.yaml":           true,
	"timeout-30d.yaml":                true,
}

func hostileFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/hostile/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 25 {
		t.Fatalf("hostile corpus has %d files, want at least 25", len(files))
	}
	return files
}

// TestHostileOffline: every hostile file is refused by the offline check, with a golden
// message and position, and none loads.
func TestHostileOffline(t *testing.T) {
	files := hostileFiles(t)
	src, err := NewDir("testdata/hostile", Options{Settle: -1, Policy: hostilePolicy})
	if err != nil {
		t.Fatal(err)
	}
	set, err := src.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Hunts) != 0 {
		for _, h := range set.Hunts {
			t.Errorf("hostile %s loaded", h.File)
		}
	}
	var b strings.Builder
	reported := map[string]bool{}
	for _, p := range set.Problems {
		reported[p.File] = true
		fmt.Fprintln(&b, p.Error())
	}
	for _, f := range files {
		if !reported[filepath.Base(f)] {
			t.Errorf("%s: not refused", f)
		}
	}
	golden(t, "hostile.offline.golden", b.String())
}

// hostileQuery is the statement a hostile file would have the runner send, built by hand (the
// decoder refuses the file): the query with {window} expanded over timestamp_field as written.
func hostileQuery(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Query          string `yaml:"query"`
		TimestampField string `yaml:"timestamp_field"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	q := strings.TrimSpace(f.Query)
	if f.TimestampField != "" {
		q = strings.ReplaceAll(q, "{window}", "("+f.TimestampField+" >= {window_start:DateTime64(3)} AND "+f.TimestampField+" < {window_end:DateTime64(3)})")
	}
	return q
}

// TestHostileServer: the server check alone, on the exact statement the runner would send,
// refuses every hostile query, whatever the offline check says. Its refusals are golden.
func TestHostileServer(t *testing.T) {
	files := hostileFiles(t)
	db := chtest.New(t)
	ctx := context.Background()
	var b strings.Builder
	for _, f := range files {
		name := filepath.Base(f)
		q := hostileQuery(t, f)
		err := CheckWithServer(ctx, db.Conn, hunt.Hunt{ID: "hostile", Query: q}, hostilePolicy)
		if notQueryRefusals[name] {
			if err != nil {
				t.Errorf("%s: the query itself is harmless, but the server check refused it: %v", name, err)
			}
			fmt.Fprintf(&b, "%s: (refused offline only: %v)\n", name, err)
			continue
		}
		var refusal *RefusedError
		if !errors.As(err, &refusal) {
			t.Errorf("%s: want a refusal, got %v", name, err)
			continue
		}
		msg := refusal.Msg
		if i := strings.Index(msg, "\n"); i >= 0 { // the server echoes the statement; its first line says enough
			msg = msg[:i] + " …"
		}
		fmt.Fprintf(&b, "%s: %s\n", name, msg)
	}
	golden(t, "hostile.server.golden", b.String())
}
