package hunttest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hunt-runner/hunt-runner/configsrc"
)

// Tree is a directory of hunts and the test files to run against them.
type Tree struct {
	Dir   string   // where the hunts are (recursive, as the runner reads them)
	Files []string // test files, as paths to open
}

// FindTests lists the *.test.yaml files under dir (recursive, hidden entries skipped).
func FindTests(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && configsrc.IsTestFile(filepath.ToSlash(d.Name())) {
			out = append(out, p)
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// Report is the outcome of a test run.
type Report struct {
	Results []Result
	// Problems are files that could not be tested as written (a malformed test file, an
	// unknown hunt, a broken hunt file) and tests that could not run (their Result has the
	// problem too).
	Problems []configsrc.Problem
	Coverage []Coverage // every hunt of the trees, sorted by id
}

// Coverage is what tests a hunt has: tests that expect findings, and tests that expect none.
type Coverage struct {
	Hunt     string `json:"hunt"`
	File     string `json:"file"`
	Positive int    `json:"positive"`
	Negative int    `json:"negative"`
}

// Complete reports whether the hunt has a test that expects findings and one that expects none
// (what --require-tests asks of every hunt).
func (c Coverage) Complete() bool { return c.Positive > 0 && c.Negative > 0 }

// Counts returns the tests passed, failed and in error.
func (r *Report) Counts() (passed, failed, errored int) {
	for _, res := range r.Results {
		switch res.Status {
		case Pass:
			passed++
		case Fail:
			failed++
		default:
			errored++
		}
	}
	return
}

// Run loads each tree's hunts as the runner would, decodes its test files and runs them. A
// problem with one file never stops the others.
func (e *Engine) Run(ctx context.Context, trees []Tree, opts configsrc.Options) (*Report, error) {
	rep := &Report{}
	cover := map[string]*Coverage{}
	for _, tr := range trees {
		src, err := configsrc.NewDir(tr.Dir, opts)
		if err != nil {
			return nil, fmt.Errorf("hunts in %s: %w", tr.Dir, err)
		}
		set, err := src.Load(ctx)
		if err != nil {
			return nil, fmt.Errorf("read hunts in %s: %w", tr.Dir, err)
		}
		for _, p := range set.Problems {
			p.File = filepath.Join(tr.Dir, filepath.FromSlash(p.File))
			rep.Problems = append(rep.Problems, p)
		}
		for _, h := range set.Hunts {
			if _, ok := cover[h.ID]; !ok {
				cover[h.ID] = &Coverage{Hunt: h.ID, File: filepath.Join(tr.Dir, filepath.FromSlash(h.File))}
			}
		}
		for _, path := range tr.Files {
			f, problems := ReadFile(path)
			rep.Problems = append(rep.Problems, problems...)
			if f == nil {
				continue
			}
			h, ok := set.Get(f.Hunt)
			if !ok {
				rep.Problems = append(rep.Problems, configsrc.Problem{File: path, Line: f.HuntLine, Column: 1,
					Message: fmt.Sprintf("hunt %q is not defined in %s (its hunts: %s)", f.Hunt, tr.Dir, huntIDs(set))})
				continue
			}
			for _, res := range e.RunFile(ctx, f, *h) {
				if res.Problem != nil {
					rep.Problems = append(rep.Problems, *res.Problem)
				}
				c := cover[h.ID]
				if res.Positive {
					c.Positive++
				} else {
					c.Negative++
				}
				rep.Results = append(rep.Results, res)
			}
		}
	}
	for _, c := range cover {
		rep.Coverage = append(rep.Coverage, *c)
	}
	slices.SortFunc(rep.Coverage, func(a, b Coverage) int { return strings.Compare(a.Hunt, b.Hunt) })
	return rep, nil
}

func huntIDs(s *configsrc.Set) string {
	if len(s.Hunts) == 0 {
		return "none"
	}
	ids := make([]string, len(s.Hunts))
	for i, h := range s.Hunts {
		ids[i] = h.ID
	}
	return strings.Join(ids, ", ")
}

// TreesOf turns command-line paths into trees: a directory is hunts and tests together; a test
// file is tested against the hunts of huntsDir, or of its own directory when huntsDir is "".
func TreesOf(paths []string, huntsDir string) ([]Tree, error) {
	var trees []Tree
	byDir := map[string]int{}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if fi.IsDir() {
			files, err := FindTests(p)
			if err != nil {
				return nil, err
			}
			dir := p
			if huntsDir != "" {
				dir = huntsDir
			}
			trees = append(trees, Tree{Dir: dir, Files: files})
			continue
		}
		if !configsrc.IsTestFile(filepath.ToSlash(fi.Name())) {
			return nil, fmt.Errorf("%s is not a test file (*.test.yaml) nor a directory", p)
		}
		dir := huntsDir
		if dir == "" {
			dir = filepath.Dir(p)
		}
		if i, ok := byDir[dir]; ok {
			trees[i].Files = append(trees[i].Files, p)
			continue
		}
		byDir[dir] = len(trees)
		trees = append(trees, Tree{Dir: dir, Files: []string{p}})
	}
	return trees, nil
}
