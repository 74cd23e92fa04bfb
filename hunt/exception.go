package hunt

import (
	"slices"
	"time"
)

// Ceilings of an exception (docs/hunts.md). Owner and reason are shown on every status page and
// in `status`, so they are capped like other free text; the counts bound the statement a fire
// sends.
const (
	ExceptionOwnerMaxBytes  = 256
	ExceptionReasonMaxBytes = 1024
	ExceptionWhereMaxBytes  = 4 << 10
	// ExceptionsMax bounds the exceptions one hunt holds, its own and its shared lists'.
	ExceptionsMax = 256
	// ExceptionValuesMax bounds the values of one match: column.
	ExceptionValuesMax = 1024
	// ExceptionSoonDefault is how close to its until an exception is when validate warns.
	ExceptionSoonDefault = 7 * 24 * time.Hour
)

// Exception is one item of a hunt's exceptions: (or of a shared list it names in
// exceptions_from:): a finding row that matches it while it is live is neither committed nor
// notified, and counts as one hit of it.
type Exception struct {
	// ID is the exception's short, stable name, the key of its hit counts: its id: key, or
	// <list>#<n> (n counts from 1 in the list as written; the hunt's own list is "exceptions").
	ID string
	// List is the shared list's name, "" for the hunt's own exceptions:.
	List string
	// Match holds, per output column (sorted by column), the values a row's column must
	// equal (one of), as the column's text (toString), or the IP ranges it must fall in.
	Match []ExceptionMatch
	// Where is an optional boolean ClickHouse expression over the output columns, held to the
	// same containment as hunt SQL.
	Where string
	// Until is when the exception stops applying (exclusive); zero is permanent, allowed only
	// when the operator allows permanent exceptions.
	Until  time.Time
	Owner  string
	Reason string
	// File and Line place the item (in the hunt file, or the shared list's file).
	File      string
	Line, Col int
}

// ExceptionMatch is one column of an exception's match:. A row matches when its column's text
// is one of Values or its address falls in one of Ranges (normalised prefixes, 10.0.0.0/8).
type ExceptionMatch struct {
	Column string   `json:"column"`
	Values []string `json:"values,omitempty"`
	Ranges []string `json:"ranges,omitempty"`
	// Line and Col place the column's key, for messages; they are not part of the digest.
	Line int `json:"-"`
	Col  int `json:"-"`
}

// LiveAt reports whether e applies to a fire at t: it is permanent or t is before its until.
func (e *Exception) LiveAt(t time.Time) bool { return e.Until.IsZero() || t.Before(e.Until) }

// LiveExceptions are h's exceptions live at fire t, in the hunt's order. A fire decides this
// from its own time, so an exception stops applying by itself and a retry of the same fire
// applies the same ones.
func (h *Hunt) LiveExceptions(t time.Time) []Exception {
	var out []Exception
	for _, e := range h.Exceptions {
		if e.LiveAt(t) {
			out = append(out, e)
		}
	}
	return out
}

// exceptionsDigest is the normalised form of the exceptions in ComputeHash.
type exceptionDigest struct {
	ID     string           `json:"id"`
	Match  []ExceptionMatch `json:"match"`
	Where  string           `json:"where,omitempty"`
	Until  int64            `json:"until,omitempty"`
	Owner  string           `json:"owner"`
	Reason string           `json:"reason"`
}

func exceptionsDigest(es []Exception) []exceptionDigest {
	var out []exceptionDigest
	for _, e := range es {
		var until int64
		if !e.Until.IsZero() {
			until = e.Until.Unix()
		}
		out = append(out, exceptionDigest{e.ID, slices.Clone(e.Match), e.Where, until, e.Owner, e.Reason})
	}
	return out
}
