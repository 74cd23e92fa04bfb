package ctl

import (
	"regexp"
	"sync"
	"time"
)

// Statement is one SQL request as chlocal received it.
type Statement struct {
	// Seq numbers statements from 1 in arrival order.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// QueryID is the query_id the client sent (clickhouse-go sends one).
	QueryID  string `json:"query_id,omitempty"`
	Kind     Kind   `json:"kind"`
	Database string `json:"database"`
	// SQL is the statement text as sent, without INSERT data, cut at
	// MaxLoggedSQL bytes; password literals of IDENTIFIED BY are masked.
	SQL string `json:"sql"`
	// Settings are the settings sent as URL parameters, as the server applies
	// them (not the user, password or other parameters of the HTTP interface).
	Settings map[string]string `json:"settings,omitempty"`
	// Params are the server-side query parameters (param_NAME), without the prefix.
	Params map[string]string `json:"params,omitempty"`
	// Fault and Effect name the rule that fired on the statement, if any.
	Fault  string `json:"fault,omitempty"`
	Effect Effect `json:"effect,omitempty"`
	// Executed is set once the engine has run the statement (successfully or
	// not): false for a statement refused before (fail_before, a bad request)
	// or still held by delay_start.
	Executed bool `json:"executed"`
	// Done is set when the answer was sent; ErrorCode is its exception code (0: success).
	Done      bool `json:"done"`
	ErrorCode int  `json:"error_code,omitempty"`
}

// MaxLoggedSQL bounds the SQL text kept per statement.
const MaxLoggedSQL = 16 << 10

// DefaultLogSize is the number of statements the log keeps by default.
const DefaultLogSize = 4096

var identifiedByRe = regexp.MustCompile(`(?is)(\bIDENTIFIED\s+(?:WITH\s+\w+\s+)?BY\s+)'(?:[^'\\]|\\.)*'`)

// StatementLog is a bounded ring of the latest statements, safe for
// concurrent use. A nil *StatementLog records nothing.
type StatementLog struct {
	mu   sync.Mutex
	ring []Statement
	next uint64 // Seq of the next statement
}

// NewStatementLog keeps the last size statements; size <= 0 gives nil (no log).
func NewStatementLog(size int) *StatementLog {
	if size <= 0 {
		return nil
	}
	return &StatementLog{ring: make([]Statement, size), next: 1}
}

// Add records a statement and returns its Seq (0 when l is nil).
func (l *StatementLog) Add(st Statement) uint64 {
	if l == nil {
		return 0
	}
	if len(st.SQL) > MaxLoggedSQL {
		st.SQL = st.SQL[:MaxLoggedSQL]
	}
	st.SQL = identifiedByRe.ReplaceAllString(st.SQL, "$1'[masked]'")
	l.mu.Lock()
	defer l.mu.Unlock()
	st.Seq = l.next
	l.next++
	l.ring[st.Seq%uint64(len(l.ring))] = st
	return st.Seq
}

// SetFault records the rule that fired on statement seq, while it is still kept.
func (l *StatementLog) SetFault(seq uint64, name string, effect Effect) {
	l.update(seq, func(st *Statement) { st.Fault, st.Effect = name, effect })
}

// SetExecuted records that the engine ran statement seq.
func (l *StatementLog) SetExecuted(seq uint64) {
	l.update(seq, func(st *Statement) { st.Executed = true })
}

// Finish records the answer of statement seq: code 0 for success.
func (l *StatementLog) Finish(seq uint64, code int) {
	l.update(seq, func(st *Statement) { st.Done, st.ErrorCode = true, code })
}

func (l *StatementLog) update(seq uint64, f func(*Statement)) {
	if l == nil || seq == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := &l.ring[seq%uint64(len(l.ring))]
	if st.Seq == seq {
		f(st)
	}
}

// List returns, oldest first, the kept statements with Seq > since, at most
// the last limit of them (limit <= 0: all).
func (l *StatementLog) List(since uint64, limit int) []Statement {
	out := []Statement{}
	if l == nil {
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	first := uint64(1)
	if n := uint64(len(l.ring)); l.next > n {
		first = l.next - n
	}
	first = max(first, since+1)
	if limit > 0 && l.next-first > uint64(limit) {
		first = l.next - uint64(limit)
	}
	for seq := first; seq < l.next; seq++ {
		st := l.ring[seq%uint64(len(l.ring))]
		st.Settings = cloneMap(st.Settings)
		st.Params = cloneMap(st.Params)
		out = append(out, st)
	}
	return out
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
