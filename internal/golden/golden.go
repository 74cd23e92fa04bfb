// Package golden compares what a test produced with a file under testdata, and rewrites the
// file when the test runs with -update (go test ./pkg -update), so every golden test reads and
// refreshes its files the same way.
package golden

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// Check compares got with the file at path; under -update it writes got there first.
func Check(t testing.TB, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs; if intended, go test -update rewrites it\n%s", path, firstDifference(string(want), got))
	}
}

// firstDifference shows the first line that differs, with its number.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n--- want\n" + wl + "\n--- got\n" + gl
		}
	}
	return ""
}
