package configsrc

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// rawFile is one hunt file as read from a source. problem, if set, replaces parsing (the file
// could not be read consistently).
type rawFile struct {
	rel     string // forward slashes, relative to the source root
	data    []byte
	problem string
	// unsettled marks a file that may still be being written; data is kept only to time how
	// long its content stays the same.
	unsettled bool
}

// isHuntFile reports whether a path names a file a hunt source reads: .yaml or .yml, not
// hidden, and not a hunt test (*.test.yaml, read by `hunt-runner test`), which lives next to
// the hunts it tests. A shared exception list (IsExceptionsFile) is read too, and buildSet
// takes it as a list, never as a hunt.
func isHuntFile(rel string) bool {
	ext := path.Ext(rel)
	return (ext == ".yaml" || ext == ".yml") && !IsTestFile(rel)
}

// IsTestFile reports whether a path names a hunt test file: *.test.yaml or *.test.yml.
func IsTestFile(rel string) bool {
	ext := path.Ext(rel)
	return (ext == ".yaml" || ext == ".yml") && strings.HasSuffix(strings.TrimSuffix(rel, ext), ".test")
}

// hidden reports whether a path element is hidden (dot-files, .git, and a ConfigMap's ..data
// and ..timestamp directories).
func hidden(name string) bool { return strings.HasPrefix(name, ".") }

// buildSet decodes every file, rejects duplicate ids (all copies, each naming the others, kept
// aside in Set.duplicates for a Loader to choose from) and returns the set.
func buildSet(files []rawFile, fraction float64, policy Policy, source, commit string) *Set {
	s := &Set{Set: hunt.Set{Source: source, Commit: commit}}
	byID := map[string][]parsed{}
	lists := map[string]exceptionList{}
	broken := map[string]bool{}
	for _, f := range files {
		if f.problem != "" {
			s.Problems = append(s.Problems, Problem{File: f.rel, Line: 1, Column: 1, Message: f.problem})
			if name := exceptionsListName(f.rel); name != "" {
				broken[name] = true
			}
			continue
		}
		if IsExceptionsFile(f.rel) {
			l, probs := decodeExceptionList(f.rel, f.data, policy)
			if other, dup := lists[l.name]; dup {
				probs = append(probs, Problem{File: f.rel, Line: 1, Column: 1,
					Message: fmt.Sprintf("exception list %s is also defined in %s; list names must be unique", safeName(l.name), other.file)})
			}
			if len(probs) > 0 {
				s.Problems = append(s.Problems, probs...)
				broken[l.name] = true
				continue
			}
			lists[l.name] = l
			continue
		}
		p, probs := decodeHuntPolicy(f.rel, f.data, fraction, policy)
		if len(probs) > 0 {
			s.Problems = append(s.Problems, probs...)
			continue
		}
		p.hunt.Commit = commit
		byID[p.hunt.ID] = append(byID[p.hunt.ID], p)
	}
	s.Problems = append(s.Problems, resolveExceptions(byID, lists, broken)...)
	for id, ps := range byID {
		ps = slices.DeleteFunc(ps, func(p parsed) bool { return p.invalid })
		if len(ps) == 0 {
			continue
		}
		if len(ps) == 1 {
			s.Hunts = append(s.Hunts, ps[0].hunt)
			continue
		}
		if s.duplicates == nil {
			s.duplicates = map[string][]hunt.Hunt{}
		}
		for i, p := range ps {
			s.duplicates[id] = append(s.duplicates[id], p.hunt)
			var others []string
			for j, o := range ps {
				if j != i {
					others = append(others, fmt.Sprintf("%s:%d:%d", o.hunt.File, o.idLine, o.idCol))
				}
			}
			slices.Sort(others)
			s.Problems = append(s.Problems, Problem{File: p.hunt.File, Line: p.idLine, Column: p.idCol, HuntID: id,
				Message: fmt.Sprintf("duplicate hunt id %q, also defined in %s; ids must be unique: neither file's definition is loaded, and a running or published definition of the hunt keeps running until one file is fixed", id, strings.Join(others, ", "))})
		}
	}
	s.finish()
	return s
}
