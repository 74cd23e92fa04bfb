package configsrc

import (
	"path/filepath"
	"testing"
)

// Hunt tests (*.test.yaml) live next to the hunts they test; a source must not read them as
// hunts, or every runner would report them as broken hunt files.
func TestHuntTestFilesAreNotHunts(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "auth", "a.yaml"), huntYAML("5m", "a"))
	writeFile(t, filepath.Join(dir, "auth", "a.test.yaml"), "hunt: a\ntests: []\n")
	writeFile(t, filepath.Join(dir, "auth", "b.test.yml"), "hunt: a\ntests: []\n")
	src, err := NewDir(dir, Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	set := mustLoad(t, src)
	if ids(set) != "a" || len(set.Problems) != 0 {
		t.Fatalf("hunts %q, problems %v: the test files were read as hunts", ids(set), set.Problems)
	}
	for name, want := range map[string]bool{"a.test.yaml": true, "x/b.test.yml": true, "test.yaml": false,
		"a.test.json": false, "contest.yaml": false, "a.tests.yaml": false} {
		if IsTestFile(name) != want {
			t.Errorf("IsTestFile(%q) = %v, want %v", name, !want, want)
		}
	}
}
