package configsrc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	goldenfile "github.com/hunt-runner/hunt-runner/internal/golden"
)

// golden compares got with testdata/name (go test -update rewrites it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

func loadCorpus(t *testing.T) *Set {
	t.Helper()
	src, err := NewDir("testdata/corpus", Options{Settle: -1})
	if err != nil {
		t.Fatal(err)
	}
	set, err := src.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestCorpus loads good and broken files side by side: every broken file is reported with its
// exact message and position (golden), every good file loads, one bad file never stops others.
func TestCorpus(t *testing.T) {
	set := loadCorpus(t)

	var b strings.Builder
	for _, p := range set.Problems {
		fmt.Fprintln(&b, p.Error())
	}
	golden(t, "corpus.problems.golden", b.String())

	bad, _ := filepath.Glob("testdata/corpus/bad/*")
	if len(bad) < 30 {
		t.Fatalf("corpus has %d broken files, want at least 30", len(bad))
	}
	reported := map[string]bool{}
	for _, p := range set.Problems {
		reported[p.File] = true
		if p.Line < 1 || p.Column < 1 || p.Message == "" {
			t.Errorf("problem without position or message: %+v", p)
		}
	}
	for _, f := range bad {
		rel := "bad/" + filepath.Base(f)
		if !reported[rel] {
			t.Errorf("%s: broken file reported no problem", rel)
		}
	}
	for _, h := range set.Hunts {
		if !strings.HasPrefix(h.File, "good/") {
			t.Errorf("hunt %s from %s loaded, but only good/ files are valid", h.ID, h.File)
		}
	}
	good := 0
	filepath.WalkDir("testdata/corpus/good", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !IsExceptionsFile(p) { // a shared list is no hunt
			good++
			rel, _ := filepath.Rel("testdata/corpus", p)
			if reported[filepath.ToSlash(rel)] {
				t.Errorf("%s: good file reported a problem", rel)
			}
		}
		return nil
	})
	if len(set.Hunts) != good {
		t.Errorf("loaded %d hunts, want the %d good files", len(set.Hunts), good)
	}

	var hb strings.Builder
	for _, h := range set.Hunts {
		fmt.Fprintf(&hb, "%s file=%s line=%d interval=%v offset=%v pinned=%v enabled=%v delay=%v max_catchup=%v timeout=%v severity=%s labels=%v hash=%s\n%s\n\n",
			h.ID, h.File, h.Line, h.Interval, h.Offset, h.Pinned, h.Enabled, h.Delay, h.MaxCatchup, h.Timeout, h.Severity, h.Labels, h.Hash[:12], h.Query)
		for _, x := range h.Exceptions {
			fmt.Fprintf(&hb, "  exception %s list=%q %s:%d match=%v where=%q until=%s owner=%s\n", x.ID, x.List, x.File, x.Line, x.Match, x.Where, x.Until.Format(time.RFC3339), x.Owner)
		}
	}
	fmt.Fprintf(&hb, "set hash %s\n", set.Hash)
	golden(t, "corpus.hunts.golden", hb.String())
}

// TestDuplicateIDs: both files are rejected and each message names the other file.
func TestDuplicateIDs(t *testing.T) {
	set := loadCorpus(t)
	if _, ok := set.Get("failed-logins"); ok {
		t.Fatal("duplicate id failed-logins was loaded")
	}
	var a, b *Problem
	for i, p := range set.Problems {
		switch {
		case p.File == "bad/dup-a.yaml" && p.HuntID == "failed-logins":
			a = &set.Problems[i]
		case p.File == "bad/dup-b.yaml" && p.HuntID == "failed-logins":
			b = &set.Problems[i]
		}
	}
	if a == nil || b == nil {
		t.Fatalf("want a duplicate problem in each file, got a=%v b=%v", a, b)
	}
	if !strings.Contains(a.Message, "bad/dup-b.yaml:2:5") || !strings.Contains(b.Message, "bad/dup-a.yaml:1:5") {
		t.Errorf("each message must name the other file:\n%s\n%s", a, b)
	}
}

// TestDefaults pins the documented defaults and the compat expansion.
func TestDefaults(t *testing.T) {
	set := loadCorpus(t)
	h, ok := set.Get("legacy-rate")
	if !ok {
		t.Fatal("legacy-rate not loaded")
	}
	want := hunt.Hunt{Interval: 5 * time.Minute, Offset: 0, Pinned: true, Enabled: true, Timeout: hunt.TimeoutDefault,
		MaxCatchup: 24 * 5 * time.Minute, Severity: hunt.SeverityDefault}
	if h.Interval != want.Interval || h.Offset != want.Offset || h.Pinned != want.Pinned || h.Enabled != want.Enabled ||
		h.Timeout != want.Timeout || h.MaxCatchup != want.MaxCatchup || h.Severity != want.Severity || h.Delay != 0 {
		t.Errorf("legacy-rate = %+v", h)
	}
	if !strings.Contains(h.Query, "WHERE (ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}) AND parent") {
		t.Errorf("{window} not expanded over ts: %s", h.Query)
	}
	l, _ := set.Get("legacy-cron-list")
	if !strings.Contains(l.Query, "_timestamp_load >= {window_start:DateTime64(3)}") || l.Interval != time.Hour || !l.Pinned {
		t.Errorf("legacy-cron-list = %+v", l)
	}
}
