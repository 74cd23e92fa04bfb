package configsrc

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDuplicateKeepsPublished: a second file claiming a hunt's id (here a disabled file in
// another team's folder) never stops the hunt. A loader starting afresh keeps the copy whose
// definition is the published one, a running loader keeps what runs; both files are reported
// either way. A copy that is neither running nor published is never chosen.
func TestDuplicateKeepsPublished(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "team-a", "victim.yaml"), "id: victim\n"+huntYAML("5m", "a"))
	src, err := NewDir(dir, Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	good := mustLoad(t, src)
	victim, ok := good.Get("victim")
	if !ok {
		t.Fatalf("victim not loaded: %v", good.Problems)
	}
	running := NewLoader(src, time.Hour, nil)
	if _, _, err := running.Load(ctx); err != nil {
		t.Fatal(err)
	}

	writeFile(t, filepath.Join(dir, "team-b", "squat.yaml"), "id: victim\nenabled: false\n"+huntYAML("5m", "b"))
	published := func(context.Context) (map[string]string, error) { return map[string]string{"victim": victim.Hash}, nil }
	for name, l := range map[string]*Loader{
		"restart with a publication": NewLoader(src, time.Hour, nil, WithPublished(published)),
		"running":                    running,
	} {
		set, _, err := l.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := set.Get("victim")
		if !ok || h.Hash != victim.Hash || h.File != "team-a/victim.yaml" || !h.Enabled {
			t.Errorf("%s: victim is %+v (loaded %v), want team-a's definition", name, h, ok)
		}
		if _, stale := set.Stale["victim"]; !stale {
			t.Errorf("%s: the kept definition is not listed as stale", name)
		}
		files := map[string]bool{}
		for _, p := range set.Problems {
			if strings.Contains(p.Message, `duplicate hunt id "victim"`) {
				files[p.File] = true
			}
		}
		if !files["team-a/victim.yaml"] || !files["team-b/squat.yaml"] {
			t.Errorf("%s: both files must be reported: %v", name, set.Problems)
		}
	}

	for name, fn := range map[string]func(context.Context) (map[string]string, error){
		"nothing published":      nil,
		"an unrelated hash":      func(context.Context) (map[string]string, error) { return map[string]string{"victim": "0000"}, nil },
		"publication unreadable": func(context.Context) (map[string]string, error) { return nil, errors.New("down") },
	} {
		var opts []LoaderOption
		if fn != nil {
			opts = append(opts, WithPublished(fn))
		}
		set, _, err := NewLoader(src, time.Hour, nil, opts...).Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := set.Get("victim"); ok {
			t.Errorf("%s: a copy neither running nor published was loaded", name)
		}
	}
}
