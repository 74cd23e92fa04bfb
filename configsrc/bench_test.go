package configsrc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkDirLoad measures one reload of a directory of 1000 hunts (read, settle check,
// decode, query check, hash) — the work every --reload-interval costs a pod.
func BenchmarkDirLoad(b *testing.B) {
	dir := b.TempDir()
	old := time.Now().Add(-time.Hour)
	for i := range 1000 {
		p := filepath.Join(dir, fmt.Sprintf("team%d", i%10), fmt.Sprintf("hunt-%04d.yaml", i))
		writeFile(b, p, huntYAML([]string{"1m", "5m", "15m", "1h"}[i%4], fmt.Sprint(i))+"severity: high\nlabels: {team: secops}\n")
		os.Chtimes(p, old, old)
	}
	src, err := NewDir(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		set, err := src.Load(context.Background())
		if err != nil || len(set.Hunts) != 1000 {
			b.Fatalf("%v, %d hunts, problems %v", err, len(set.Hunts), len(set.Problems))
		}
	}
}

// BenchmarkDecodeHunt measures decoding and checking one typical hunt file.
func BenchmarkDecodeHunt(b *testing.B) {
	data, err := os.ReadFile("testdata/corpus/good/brute-force.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, probs := decodeHunt("brute-force.yaml", data, 0.8); len(probs) > 0 {
			b.Fatal(probs)
		}
	}
}
