package configsrc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeHunt: the decoder never panics, every problem is positioned, and whatever it
// accepts satisfies the Hunt invariants the runner relies on.
func FuzzDecodeHunt(f *testing.F) {
	filepath.WalkDir("testdata/corpus", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
		return nil
	})
	f.Add([]byte("interval: &a 5m\ncron: *a\nquery: *a\n"))
	f.Add([]byte("{interval: 5m, query: [a, {b: c}], labels: {a: *x}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, probs := decodeHunt("fuzz.yaml", data, 0.8)
		for _, pr := range probs {
			if pr.Line < 1 || pr.Column < 1 || pr.Message == "" || pr.File != "fuzz.yaml" {
				t.Fatalf("bad problem %+v", pr)
			}
		}
		if len(probs) > 0 {
			return
		}
		h := p.hunt
		if !idRe.MatchString(h.ID) || h.Interval < time.Second || h.Interval%time.Second != 0 ||
			h.Offset < 0 || h.Offset >= h.Interval || strings.TrimSpace(h.Query) == "" || h.Hash == "" ||
			h.Timeout <= 0 || h.MaxCatchup < h.Interval || h.Delay < 0 {
			t.Fatalf("accepted an invalid hunt: %+v", h)
		}
		if _, issues := checkQuery(h.Query); len(issues) > 0 {
			t.Fatalf("accepted query fails its own check: %v\n%s", issues, h.Query)
		}
	})
}

// FuzzCheckQuery: the lexer and query check never panic and positions stay inside the text.
func FuzzCheckQuery(f *testing.F) {
	for _, q := range []string{
		"SELECT 1 WHERE {window}",
		"SELECT 'a;b' -- c\n; /* x /* y */ */",
		"WITH x AS (SELECT url('h')) SELECT `s3`(1) SETTINGS readonly=0 FORMAT JSON",
		"SELECT \"unterminated",
		"SELECT {window_start:DateTime64(3, 'UTC')}, {window_end:DateTime}",
		"SELECT 1e+5, 0x1F, 'it''s' INTO OUTFILE 'x'",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		info, issues := checkQuery(q)
		for _, is := range issues {
			if is.pos < 0 || is.pos > len(q) {
				t.Fatalf("issue position %d outside query of %d bytes", is.pos, len(q))
			}
		}
		if len(issues) > 0 {
			return
		}
		expanded := expandWindow(q[:info.end], info.windowTokens, "ts")
		if _, again := checkQuery(expanded); len(again) > 0 {
			t.Fatalf("expanded query fails the check: %v\n%s", again, expanded)
		}
	})
}
