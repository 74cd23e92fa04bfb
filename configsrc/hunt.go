package configsrc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// ErrUnavailable is wrapped by Source.Load when the source as a whole cannot be read
// (directory missing, git remote unreachable). A Loader keeps the previous set then.
var ErrUnavailable = errors.New("hunt source unavailable")

// Problem is one thing wrong with a hunt file, positioned for an editor.
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
	HuntID  string `json:"hunt_id,omitempty"`
}

func (p Problem) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
}

// Set is one immutable load of hunt definitions: the hunt.Set (valid hunts, and stale ones
// kept by a Loader) with what is wrong with the files. Callers must not modify it.
type Set struct {
	hunt.Set
	Problems []Problem
	// Stale lists hunts kept from the previous set because their file became invalid; the
	// value is the first problem of that file.
	Stale map[string]Problem

	// duplicates holds, per id defined by more than one file, every valid copy: none is in
	// Hunts, and a Loader may keep the one that is running or published (resolveDuplicates).
	duplicates map[string][]hunt.Hunt
}

// Source is where hunt definitions come from.
type Source interface {
	// Load reads every hunt file. The error is non-nil (wrapping ErrUnavailable) only when the
	// source as a whole cannot be read; problems with single files are in Set.Problems.
	Load(ctx context.Context) (*Set, error)
	String() string
}

// finish sorts hunts and problems and computes the set hash.
func (s *Set) finish() {
	sortProblems(s.Problems)
	s.Set = *hunt.NewSet(s.Hunts, s.Source, s.Commit)
}

func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
}
