package hunt

import (
	"testing"
	"time"
)

// An exception applies to fires strictly before its until (zero: always), and only the
// definition of an exception is in the digest, not where it is written.
func TestExceptionsLiveAndInTheHash(t *testing.T) {
	until := time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)
	h := Hunt{ID: "x", Query: "SELECT 1", Exceptions: []Exception{
		{ID: "exceptions#1", Until: until, Owner: "o", Reason: "r", Match: []ExceptionMatch{{Column: "user", Values: []string{"a"}, Line: 4}}, File: "x.yaml", Line: 3},
		{ID: "perm#1", List: "perm", Owner: "o", Reason: "r"},
	}}
	if live := h.LiveExceptions(until.Add(-time.Second)); len(live) != 2 {
		t.Errorf("before until: %d live, want 2", len(live))
	}
	if live := h.LiveExceptions(until); len(live) != 1 || live[0].ID != "perm#1" {
		t.Errorf("at until: %+v, want only the permanent one", live)
	}
	hash := h.ComputeHash()
	h.Exceptions[0].File, h.Exceptions[0].Line, h.Exceptions[0].Match[0].Line = "y.yaml", 9, 10
	if h.ComputeHash() != hash {
		t.Error("the hash depends on where an exception is written")
	}
	h.Exceptions[0].Until = until.Add(time.Hour)
	if h.ComputeHash() == hash {
		t.Error("a changed until kept the hash")
	}
	h.Exceptions = nil
	if h.ComputeHash() != (&Hunt{ID: "x", Query: "SELECT 1"}).ComputeHash() {
		t.Error("a hunt without exceptions does not keep its hash")
	}
}
