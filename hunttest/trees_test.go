package hunttest

import (
	"path/filepath"
	"testing"
)

// A directory is its hunts and its tests (hidden entries skipped); test files are tested against
// --hunts-dir, or their own directory, one tree per hunts directory.
func TestTreesOf(t *testing.T) {
	dir := writeTree(t, map[string]string{"a/x.test.yaml": "", "a/y.test.yml": "", "a/h.yaml": "", ".git/z.test.yaml": "",
		"b/w.test.yaml": ""})
	trees, err := TreesOf([]string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(trees) != 1 || trees[0].Dir != dir || len(trees[0].Files) != 3 {
		t.Fatalf("directory: %+v", trees)
	}
	x, w := filepath.Join(dir, "a", "x.test.yaml"), filepath.Join(dir, "b", "w.test.yaml")
	if trees, err = TreesOf([]string{x, w}, ""); err != nil || len(trees) != 2 || trees[0].Dir != filepath.Join(dir, "a") {
		t.Fatalf("files: %+v %v", trees, err)
	}
	if trees, err = TreesOf([]string{x, w}, dir); err != nil || len(trees) != 1 || trees[0].Dir != dir || len(trees[0].Files) != 2 {
		t.Fatalf("files with --hunts-dir: %+v %v", trees, err)
	}
	if _, err := TreesOf([]string{filepath.Join(dir, "a", "h.yaml")}, ""); err == nil {
		t.Fatal("a hunt file was taken for a test file")
	}
}
