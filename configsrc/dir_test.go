package configsrc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// huntYAML is a valid hunt file whose query carries a marker, so a test can tell versions apart.
func huntYAML(interval, marker string) string {
	return fmt.Sprintf(`interval: %s
query: |
  SELECT user, '%s' AS version FROM sample.auth_events
  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}
`, interval, marker)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t testing.TB, src Source) *Set {
	t.Helper()
	set, err := src.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func ids(s *Set) string {
	var out []string
	for _, h := range s.Hunts {
		out = append(out, h.ID)
	}
	return strings.Join(out, ",")
}

// configMapVersion writes files into a fresh timestamped directory and swaps ..data to it the
// way the kubelet does (symlink to a temp name, then rename over ..data), then links each key.
func configMapVersion(t testing.TB, dir string, n int, files map[string]string) {
	t.Helper()
	if err := configMapSwap(dir, n, files); err != nil {
		t.Fatal(err)
	}
}

func configMapSwap(dir string, n int, files map[string]string) error {
	ts := fmt.Sprintf("..2026_11_29_10_%02d_00.%d", n%60, n)
	for name, content := range files {
		p := filepath.Join(dir, ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				return err
			}
		}
	}
	// Keys no longer in the map: the kubelet removes their links.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if _, ok := files[e.Name()]; !ok && !strings.HasPrefix(e.Name(), "..") {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

func TestDirConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	configMapVersion(t, dir, 1, map[string]string{"a.yaml": huntYAML("5m", "v1"), "b.yaml": huntYAML("10m", "v1")})
	src, err := NewDir(dir, Options{}) // default Settle: the ..data snapshot does not need it
	if err != nil {
		t.Fatal(err)
	}
	set := mustLoad(t, src)
	if ids(set) != "a,b" || len(set.Problems) != 0 {
		t.Fatalf("v1: hunts %s, problems %v", ids(set), set.Problems)
	}
	if a, _ := set.Get("a"); a.File != "a.yaml" || !strings.Contains(a.Query, "'v1'") {
		t.Fatalf("v1: a = %+v", a)
	}

	configMapVersion(t, dir, 2, map[string]string{"a.yaml": huntYAML("5m", "v2"), "c.yaml": huntYAML("1h", "v2")})
	set = mustLoad(t, src)
	if ids(set) != "a,c" {
		t.Fatalf("v2: hunts %s", ids(set))
	}
	if a, _ := set.Get("a"); !strings.Contains(a.Query, "'v2'") {
		t.Fatalf("v2: a = %+v", a)
	}
}

// TestDirConfigMapSwapConcurrent swaps versions while loading: every load must see exactly one
// whole version, never a mix and never an error.
func TestDirConfigMapSwapConcurrent(t *testing.T) {
	dir := t.TempDir()
	version := func(n int) map[string]string {
		m := map[string]string{}
		for i := range 5 {
			m[fmt.Sprintf("h%d.yaml", i)] = huntYAML("5m", fmt.Sprintf("v%d", n))
		}
		return m
	}
	configMapVersion(t, dir, 0, version(0))
	src, err := NewDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var swaps atomic.Int32
	wg.Go(func() {
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if err := configMapSwap(dir, n, version(n)); err != nil {
				t.Error(err)
				return
			}
			swaps.Add(1)
		}
	})
	defer wg.Wait()
	defer close(stop)
	loads := 0
	for loads < 200 || swaps.Load() < 20 {
		set, err := src.Load(context.Background())
		if err != nil {
			t.Fatalf("load %d: %v", loads, err)
		}
		if len(set.Hunts) != 5 || len(set.Problems) != 0 {
			t.Fatalf("load %d: %d hunts, problems %v", loads, len(set.Hunts), set.Problems)
		}
		marker := set.Hunts[0].Query[strings.Index(set.Hunts[0].Query, "'v"):][:5]
		for _, h := range set.Hunts {
			if !strings.Contains(h.Query, marker) {
				t.Fatalf("load %d mixes versions: %s has not %s", loads, h.ID, marker)
			}
		}
		loads++
	}
}

// TestDirHalfWrittenNeverValid: a file changed within Settle is never parsed, even when its
// partial content happens to be valid YAML and a valid hunt.
func TestDirHalfWrittenNeverValid(t *testing.T) {
	dir := t.TempDir()
	full := huntYAML("5m", "full") + "severity: high\n"
	writeFile(t, filepath.Join(dir, "h.yaml"), full)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "h.yaml"), old, old)

	clock := time.Now()
	src, err := NewDir(dir, Options{Settle: time.Second, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	loader := NewLoader(src, time.Minute, nil)
	set, _, err := loader.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := set.Get("h"); !ok || h.Severity != "high" {
		t.Fatalf("initial load: %+v %v", h, set.Problems)
	}

	// A writer has written the first part of the new version (itself valid: severity missing)
	// and a brand new file's first half.
	newFull := huntYAML("10m", "new") + "severity: low\n"
	writeFile(t, filepath.Join(dir, "h.yaml"), newFull[:strings.Index(newFull, "severity")])
	writeFile(t, filepath.Join(dir, "n.yaml"), newFull[:strings.Index(newFull, "severity")])
	clock = time.Now()
	set, _, _ = loader.Load(context.Background())
	h, _ := set.Get("h")
	if h.Interval != 5*time.Minute || h.Severity != "high" {
		t.Fatalf("half-written h.yaml was loaded: %+v", h)
	}
	if _, stale := set.Stale["h"]; !stale {
		t.Errorf("h should be reported stale, got %v", set.Stale)
	}
	if _, ok := set.Get("n"); ok {
		t.Fatal("half-written new file n.yaml was loaded")
	}
	if len(set.Problems) != 2 || !strings.Contains(set.Problems[0].Message, "may still be being written") {
		t.Errorf("problems = %v", set.Problems)
	}

	// Still within Settle of the first sighting: the same content read twice is not enough.
	clock = clock.Add(500 * time.Millisecond)
	set, _, _ = loader.Load(context.Background())
	if _, ok := set.Get("n"); ok {
		t.Fatal("n.yaml trusted before it was quiet for Settle")
	}

	// The writer finishes; after Settle of quiet both files load in full.
	writeFile(t, filepath.Join(dir, "h.yaml"), newFull)
	writeFile(t, filepath.Join(dir, "n.yaml"), newFull)
	clock = time.Now().Add(2 * time.Second)
	set, _, _ = loader.Load(context.Background())
	for _, id := range []string{"h", "n"} {
		if h, ok := set.Get(id); !ok || h.Severity != "low" || h.Interval != 10*time.Minute {
			t.Errorf("%s after settle: %+v (problems %v)", id, h, set.Problems)
		}
	}
	if len(set.Stale) != 0 || len(set.Problems) != 0 {
		t.Errorf("stale %v problems %v", set.Stale, set.Problems)
	}
}

// TestDirHalfWrittenConcurrent writes files in chunks while loading with the real clock: no
// load ever contains a truncated hunt.
func TestDirHalfWrittenConcurrent(t *testing.T) {
	dir := t.TempDir()
	src, err := NewDir(dir, Options{Settle: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	full := huntYAML("5m", "complete") + "severity: critical\nlabels: {team: secops}\n"
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := range 3 {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("w%d.yaml", n)))
			if err != nil {
				return
			}
			for i := 0; i < len(full); i += 16 {
				f.WriteString(full[i:min(i+16, len(full))])
				f.Sync()
				time.Sleep(3 * time.Millisecond)
			}
			f.Close()
		}
	}()
	check := func(set *Set) {
		for _, h := range set.Hunts {
			if h.Severity != "critical" || h.Labels["team"] != "secops" {
				t.Fatalf("truncated hunt loaded: %+v", h)
			}
		}
	}
	for {
		select {
		case <-done:
			// No sleep: the files are fresh, so this Load itself waits out Settle and re-reads.
			set := mustLoad(t, src)
			check(set)
			if len(set.Hunts) != 3 {
				t.Fatalf("after the writer finished: hunts %s problems %v", ids(set), set.Problems)
			}
			return
		default:
			check(mustLoad(t, src))
		}
	}
}

// TestDirRootSymlinkSwap: git-sync publishes a checkout by swapping a symlink to the whole tree.
func TestDirRootSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "wt1", "hunts", "a.yaml"), huntYAML("5m", "1"))
	writeFile(t, filepath.Join(base, "wt2", "hunts", "b.yaml"), huntYAML("5m", "2"))
	link := filepath.Join(base, "current")
	os.Symlink("wt1", link)
	// Freshly written files: one Load waits out Settle and returns a clean set.
	src, _ := NewDir(filepath.Join(link, "hunts"), Options{Settle: 200 * time.Millisecond})
	if set := mustLoad(t, src); ids(set) != "a" || len(set.Problems) != 0 {
		t.Fatalf("before swap: %s %v", ids(set), set.Problems)
	}
	os.Symlink("wt2", link+".tmp")
	os.Rename(link+".tmp", link)
	if set := mustLoad(t, src); ids(set) != "b" || len(set.Problems) != 0 {
		t.Fatalf("after swap: %s %v", ids(set), set.Problems)
	}
}

func TestDirMissingIsUnavailable(t *testing.T) {
	src, _ := NewDir(filepath.Join(t.TempDir(), "nope"), Options{})
	if _, err := src.Load(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// TestLoaderLastGood walks the reload rules: broken file keeps the last good hunt (stale),
// deleted file drops it, unreadable source keeps everything, a fix clears the stale mark.
func TestLoaderLastGood(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "hunts")
	writeFile(t, filepath.Join(dir, "a.yaml"), huntYAML("5m", "a1"))
	writeFile(t, filepath.Join(dir, "b.yaml"), huntYAML("5m", "b1"))
	writeFile(t, filepath.Join(dir, "sub", "c.yml"), huntYAML("1h", "c1"))
	src, _ := NewDir(dir, Options{Settle: -1})
	l := NewLoader(src, time.Hour, nil)
	ctx := context.Background()

	set, changed, err := l.Load(ctx)
	if err != nil || !changed || ids(set) != "a,b,c" {
		t.Fatalf("first load: %v %v %s", err, changed, ids(set))
	}
	first := set
	if _, changed, _ := l.Load(ctx); changed {
		t.Fatal("unchanged source reported as changed")
	}

	// a.yaml breaks, b.yaml is deleted.
	writeFile(t, filepath.Join(dir, "a.yaml"), "interval: 5m\nquery: DROP TABLE sample.auth_events\n")
	os.Remove(filepath.Join(dir, "b.yaml"))
	set, changed, err = l.Load(ctx)
	if err != nil || !changed {
		t.Fatalf("reload: %v %v", err, changed)
	}
	if ids(set) != "a,c" {
		t.Fatalf("hunts %s, want a (stale) and c", ids(set))
	}
	a, _ := set.Get("a")
	old, _ := first.Get("a")
	if a.Hash != old.Hash || !strings.Contains(a.Query, "'a1'") {
		t.Errorf("a is not its last good definition: %+v", a)
	}
	if p, ok := set.Stale["a"]; !ok || p.File != "a.yaml" || !strings.Contains(p.Message, "DROP") {
		t.Errorf("stale = %v", set.Stale)
	}
	if len(set.Problems) != 1 {
		t.Errorf("problems = %v", set.Problems)
	}
	select {
	case got := <-l.Changes():
		if got != set {
			t.Error("Changes delivered an older set")
		}
	default:
		t.Error("no change delivered")
	}

	// Still broken on the next reload: still kept.
	if set2, _, _ := l.Load(ctx); ids(set2) != "a,c" || len(set2.Stale) != 1 {
		t.Errorf("second reload: %s stale %v", ids(set2), set2.Stale)
	}

	// The directory disappears (unmounted): everything is kept.
	os.Rename(dir, dir+".gone")
	set3, changed, err := l.Load(ctx)
	if !errors.Is(err, ErrUnavailable) || changed || set3 != l.Current() || ids(set3) != "a,c" {
		t.Fatalf("unavailable: err %v changed %v hunts %s", err, changed, ids(set3))
	}
	os.Rename(dir+".gone", dir)

	// The directory is there but empty (a mount that came up empty): everything is kept.
	os.Rename(dir, dir+".full")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	set3, changed, err = l.Load(ctx)
	if !errors.Is(err, ErrUnavailable) || changed || ids(set3) != "a,c" {
		t.Fatalf("empty: err %v changed %v hunts %s", err, changed, ids(set3))
	}
	os.Remove(dir)
	os.Rename(dir+".full", dir)

	// Fixed: the new definition replaces the stale one.
	writeFile(t, filepath.Join(dir, "a.yaml"), huntYAML("10m", "a2"))
	set, _, _ = l.Load(ctx)
	if a, _ := set.Get("a"); a.Interval != 10*time.Minute || len(set.Stale) != 0 || len(set.Problems) != 0 {
		t.Errorf("after fix: %+v stale %v problems %v", a, set.Stale, set.Problems)
	}
	if set.Hash == first.Hash {
		t.Error("set hash did not change")
	}
}

func TestLoaderFirstLoadUnavailable(t *testing.T) {
	src, _ := NewDir(filepath.Join(t.TempDir(), "missing"), Options{})
	l := NewLoader(src, time.Hour, nil)
	if _, _, err := l.Load(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if l.Current() != nil {
		t.Fatal("Current should be nil before a successful load")
	}
}

func TestLoaderStartPolls(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), huntYAML("5m", "1"))
	src, _ := NewDir(dir, Options{Settle: -1})
	l := NewLoader(src, 10*time.Millisecond, nil)
	if _, _, err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-l.Changes()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- l.Start(ctx) }()
	writeFile(t, filepath.Join(dir, "b.yaml"), huntYAML("5m", "1"))
	select {
	case set := <-l.Changes():
		if ids(set) != "a,b" {
			t.Errorf("polled set: %s", ids(set))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not pick up the new file")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Start returned %v", err)
	}
}
