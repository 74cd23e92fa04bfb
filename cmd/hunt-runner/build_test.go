package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReleaseBuildIsStatic builds the binary with `make build` (as the Dockerfile does) and
// checks that it needs no dynamic loader: the image is FROM scratch, so a binary with an ELF
// interpreter (which the embedded engine's loader, purego, brings in) would not even start. It
// also checks that the build stamps the version --version prints.
func TestReleaseBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	bin := filepath.Join(t.TempDir(), "hunt-runner")
	const stamp = "v0.0.0-buildtest"
	cmd := exec.Command("make", "-C", filepath.Join("..", ".."), "build", "BIN="+bin, "VERSION="+stamp)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "--version").Output(); err != nil || string(out) != "hunt-runner version "+stamp+"\n" {
		t.Errorf("--version of the release build: %v %q, want %s", err, out, stamp)
	}
	if df, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile")); err != nil || !strings.Contains(string(df), "-X main.version=${VERSION}") {
		t.Errorf("the Dockerfile does not stamp the version (%v)", err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("release binary is dynamically linked (%v): something outside `dev` links the embedded engine", p.Type)
		}
	}
	out, err := exec.Command(bin, "dev").CombinedOutput()
	if err == nil {
		t.Fatalf("dev ran in a release build:\n%s", out)
	}
}

// TestMakeDevSaysWhatItDoes: the first `make dev` compiles for minutes; it must say so before
// it starts and show progress (go build -v, counted), not sit silent as `go run` does.
func TestMakeDevSaysWhatItDoes(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	// A library path that exists, so that -n does not plan a download.
	lib := filepath.Join(t.TempDir(), "libchdb.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-n", "-C", filepath.Join("..", ".."), "dev", "CHDB_LIB_PATH="+lib).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n dev: %v\n%s", err, out)
	}
	plan := string(out)
	announce, build := strings.Index(plan, "echo \"building"), strings.Index(plan, "go build -v")
	if announce < 0 || build < 0 || announce > build || strings.Contains(plan, "go run") {
		t.Errorf("make dev must announce the build, then build with progress:\n%s", plan)
	}
}
