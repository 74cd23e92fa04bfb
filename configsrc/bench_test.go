package configsrc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// BenchmarkDecodeLargeHunt decodes and checks a hunt file just under the 1 MiB limit whose
// query is full of SETTINGS tokens (columns called settings, and a long SETTINGS clause), next
// to the small typical hunt: the check is linear, so ns/op of "1MiB" over "small" stays near
// the ratio of their sizes (a quadratic check took 21 s on 990 KB).
func BenchmarkDecodeLargeHunt(b *testing.B) {
	small, err := os.ReadFile("testdata/corpus/good/brute-force.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var q strings.Builder
	q.WriteString("interval: 5m\nquery: |\n  SELECT settings")
	for q.Len() < maxFileSize-4096 {
		q.WriteString(",\n    settings, `settings`, \"settings\" AS s, 'SETTINGS' AS t")
	}
	q.WriteString("\n  FROM sample.events\n  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n  SETTINGS max_threads = 1")
	for q.Len() < maxFileSize-64 {
		q.WriteString(", max_threads = 1")
	}
	q.WriteString("\n")
	large := []byte(q.String())
	for _, tc := range []struct {
		name string
		data []byte
	}{{"small", small}, {"1MiB", large}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			for b.Loop() {
				if _, probs := decodeHunt("large.yaml", tc.data, 0.8); len(probs) > 0 {
					b.Fatal(probs[0])
				}
			}
		})
	}
}
