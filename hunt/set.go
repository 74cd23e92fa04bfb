package hunt

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
)

// Set is one immutable load of hunt definitions: the hunts sorted by id, a content hash over
// them, and where they came from. Callers must not modify it.
type Set struct {
	Hunts  []Hunt // sorted by ID; disabled hunts included (materialise tombstones them)
	Hash   string // hex SHA-256 over the hunts' ids and hashes
	Commit string // git commit SHA the set was read from, "" for a directory
	Source string // description of the source, for logs and hunt_publish.source
}

// NewSet returns the set of hunts: defaults applied (WithDefaults), Hash filled where it is
// empty, sorted by id, with the set hash computed. hunts is not modified.
func NewSet(hunts []Hunt, source, commit string) *Set {
	s := &Set{Hunts: make([]Hunt, len(hunts)), Source: source, Commit: commit}
	for i, h := range hunts {
		h = h.WithDefaults()
		h.Commit = cmp.Or(h.Commit, commit)
		if h.Hash == "" {
			h.Hash = h.ComputeHash()
		}
		s.Hunts[i] = h
	}
	s.finish()
	return s
}

// finish sorts the hunts and computes the set hash.
func (s *Set) finish() {
	slices.SortFunc(s.Hunts, func(a, b Hunt) int { return cmp.Compare(a.ID, b.ID) })
	sum := sha256.New()
	for _, h := range s.Hunts {
		fmt.Fprintf(sum, "%s\x00%s\n", h.ID, h.Hash)
	}
	s.Hash = hex.EncodeToString(sum.Sum(nil))
}

// Get returns the hunt with the given id.
func (s *Set) Get(id string) (*Hunt, bool) {
	i, ok := slices.BinarySearchFunc(s.Hunts, id, func(h Hunt, id string) int { return cmp.Compare(h.ID, id) })
	if !ok {
		return nil, false
	}
	return &s.Hunts[i], true
}

// Enabled returns the enabled hunts, sorted by id: the ones that run and notify (a disabled
// hunt is tombstoned by materialise and never run). The pointers are into s.Hunts. It is
// computed on each call, so it holds for a set whose Hunts a caller narrowed.
func (s *Set) Enabled() []*Hunt {
	out := make([]*Hunt, 0, len(s.Hunts))
	for i := range s.Hunts {
		if s.Hunts[i].Enabled {
			out = append(out, &s.Hunts[i])
		}
	}
	return out
}
