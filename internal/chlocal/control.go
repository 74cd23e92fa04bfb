package chlocal

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
)

// The control vocabulary, re-exported so that callers of chlocal need no
// second import. Tests that only talk to a chlocal process should import
// internal/chlocal/ctl instead, which does not link the chDB loader.
type (
	// FaultRule is one fault rule; see ctl.FaultRule.
	FaultRule = ctl.FaultRule
	// FaultSet is a rule set with its PRNG seed; see ctl.FaultSet.
	FaultSet = ctl.FaultSet
	// FaultStatus is the rules with their counters; see ctl.FaultStatus.
	FaultStatus = ctl.FaultStatus
	// Statement is one entry of the statement log; see ctl.Statement.
	Statement = ctl.Statement
)

// The fault effects and statement kinds, re-exported from ctl.
const (
	DelayAnswer = ctl.DelayAnswer
	DelayStart  = ctl.DelayStart
	FailAfter   = ctl.FailAfter
	FailBefore  = ctl.FailBefore
	KindRead    = ctl.KindRead
	KindInsert  = ctl.KindInsert
	KindOther   = ctl.KindOther
)

// maxControlBody bounds a PUT /chlocal/faults body.
const maxControlBody = 1 << 20

// SetFaults replaces the fault rules (and resets their counters); an empty
// set removes them. Requests already held by a delay stay held: see ClearFaults.
func (s *Server) SetFaults(set FaultSet) error {
	if len(set.Rules) == 0 {
		s.faults.Store(nil)
		s.log.Info("chlocal: faults cleared")
		return nil
	}
	in, err := ctl.NewInjector(set)
	if err != nil {
		return fmt.Errorf("chlocal: faults: %w", err)
	}
	s.faults.Store(in)
	s.log.Info("chlocal: faults set", slog.Int("rules", len(set.Rules)), slog.Uint64("seed", in.Seed()))
	return nil
}

// ClearFaults removes every rule and releases the requests being held by a
// delay at once (a delay_start request then executes, a delay_answer one is
// answered), so that a test can hold a request for as long as it needs and
// end the hold when it has seen what it waits for.
func (s *Server) ClearFaults() {
	_ = s.SetFaults(FaultSet{})
	s.relMu.Lock()
	close(s.release)
	s.release = make(chan struct{})
	s.relMu.Unlock()
}

// Faults returns the current rules and how often each matched and fired.
func (s *Server) Faults() FaultStatus {
	if in := s.faults.Load(); in != nil {
		return in.Status()
	}
	return FaultStatus{Rules: []ctl.RuleStatus{}}
}

// Statements returns the statement log, oldest first: entries after since,
// at most the last limit (0: all kept).
func (s *Server) Statements(since uint64, limit int) []Statement {
	return s.stmts.List(since, limit)
}

// serveControl answers chlocal's own endpoints; it reports false for any
// other path. Faults never apply here, so that a test can always read and
// change them.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case "/chlocal/stats":
		rss, hwm := memoryUsage()
		st := s.Faults()
		writeJSON(w, http.StatusOK, map[string]any{
			"queries": s.queries.Load(), "rss_bytes": rss, "max_rss_bytes": hwm,
			"fault_seed": st.Seed, "faults": st.Rules,
		})
	case "/chlocal/faults":
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, s.Faults())
		case http.MethodPut, http.MethodPost:
			var set FaultSet
			dec := json.NewDecoder(io.LimitReader(r.Body, maxControlBody))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&set); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "fault set: " + err.Error()})
				return true
			}
			if err := s.SetFaults(set); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return true
			}
			writeJSON(w, http.StatusOK, s.Faults())
		case http.MethodDelete:
			s.ClearFaults()
			writeJSON(w, http.StatusOK, s.Faults())
		default:
			w.Header().Set("Allow", "GET, PUT, POST, DELETE")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use GET, PUT or DELETE"})
		}
	case "/chlocal/log":
		q := r.URL.Query()
		limit, err1 := uintParam(q.Get("limit"))
		since, err2 := uintParam(q.Get("since"))
		if err1 != nil || err2 != nil || limit > 1<<31 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "limit and since must be non-negative integers"})
			return true
		}
		writeJSON(w, http.StatusOK, s.Statements(since, int(limit)))
	default:
		return false
	}
	return true
}

// uintParam parses an optional non-negative URL parameter ("" is 0).
func uintParam(v string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	return strconv.ParseUint(v, 10, 64)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// hold waits d, less when ClearFaults releases it, and less when the server
// is closing (reported as false), so that a long injected delay never keeps
// Close waiting.
func (s *Server) hold(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	s.relMu.Lock()
	release := s.release
	s.relMu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-release:
		return true
	case <-s.closing:
		return false
	}
}
