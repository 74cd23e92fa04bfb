package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestReleaseBuildIsStatic builds the binary as the Dockerfile and `make build` do and checks
// that it needs no dynamic loader: the image is FROM scratch, so a binary with an ELF
// interpreter (which the embedded engine's loader, purego, brings in) would not even start.
func TestReleaseBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "hunt-runner")
	cmd := exec.Command("go", "build", "-tags", "nochdb", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
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
