package chtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
)

// EnvFaultSeed fixes the seed of SetFaults, to replay a run whose seed a
// failing test logged.
const EnvFaultSeed = "CHTEST_FAULT_SEED"

// SetFaults replaces the server's fault rules (counters start from zero)
// with a seed taken from CHTEST_FAULT_SEED or picked at random, and logs the
// seed so that a failure can be replayed. It returns the seed. Faults are for
// private servers only: the shared engine of New serves every test of the
// binary. A restart (Stop, Start) keeps the rules, with fresh counters.
func (s *Server) SetFaults(t testing.TB, rules ...ctl.FaultRule) uint64 {
	t.Helper()
	var seed uint64
	if v := os.Getenv(EnvFaultSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			t.Fatalf("chtest: %s=%q: want a positive integer", EnvFaultSeed, v)
		}
		seed = n
	}
	st := s.SetFaultSet(t, ctl.FaultSet{Seed: seed, Rules: rules})
	t.Logf("chtest: %d fault rule(s) on %s, seed %d (replay with %s=%d)", len(rules), s.Addr, st.Seed, EnvFaultSeed, st.Seed)
	return st.Seed
}

// SetFaultSet replaces the server's fault rules with set as given (Seed 0:
// the server picks one) and returns the rules as the server holds them.
func (s *Server) SetFaultSet(t testing.TB, set ctl.FaultSet) ctl.FaultStatus {
	t.Helper()
	body, err := json.Marshal(set)
	if err != nil {
		t.Fatalf("chtest: faults: %v", err)
	}
	var st ctl.FaultStatus
	s.control(t, http.MethodPut, "/chlocal/faults", body, &st)
	s.mu.Lock()
	if len(set.Rules) > 0 {
		set.Seed = st.Seed
		s.faults = &set
	} else {
		s.faults = nil
	}
	s.mu.Unlock()
	return st
}

// ClearFaults removes every fault rule and releases the requests being held
// by a delay at once: hold a request with a long delay, observe what the test
// waits for, then clear.
func (s *Server) ClearFaults(t testing.TB) {
	t.Helper()
	s.control(t, http.MethodDelete, "/chlocal/faults", nil, nil)
	s.mu.Lock()
	s.faults = nil
	s.mu.Unlock()
}

// FaultStats returns the rules in effect with how often each matched and fired.
func (s *Server) FaultStats(t testing.TB) []ctl.RuleStatus {
	t.Helper()
	var st ctl.FaultStatus
	s.control(t, http.MethodGet, "/chlocal/faults", nil, &st)
	return st.Rules
}

// StatementLog returns the statements the server keeps (the last 4096 by
// default), oldest first: the SQL and settings as the server received them.
func (s *Server) StatementLog(t testing.TB) []ctl.Statement {
	t.Helper()
	return s.StatementsSince(t, 0)
}

// StatementsSince returns the kept statements whose Seq is above since, e.g.
// those sent after a mark taken from the last entry of StatementLog.
func (s *Server) StatementsSince(t testing.TB, since uint64) []ctl.Statement {
	t.Helper()
	var out []ctl.Statement
	s.control(t, http.MethodGet, "/chlocal/log?since="+strconv.FormatUint(since, 10), nil, &out)
	return out
}

var controlClient = &http.Client{Timeout: 30 * time.Second}

// control sends one request to a chlocal control endpoint and decodes its JSON answer.
func (s *Server) control(t testing.TB, method, path string, body []byte, out any) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("chtest: %s %s: %v", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := controlClient.Do(req)
	if err != nil {
		t.Fatalf("chtest: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("chtest: %s %s: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chtest: %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("chtest: %s %s: %v", method, path, err)
		}
	}
}

// reapplyFaults puts the rules back after a restart; s.mu is held.
func (s *Server) reapplyFaults() error {
	if s.faults == nil {
		return nil
	}
	body, err := json.Marshal(s.faults)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPut, s.URL+"/chlocal/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("restore faults: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// Trips runs f and returns the statements a chlocal server received meanwhile that name db's
// database: round trips of the code under test, without connection set-up queries or other
// tests' statements on the shared engine. Under load a driver may open a fresh connection
// (its handshake is not a round trip of the protocol being counted).
func Trips(t testing.TB, db *DB, f func()) []ctl.Statement {
	t.Helper()
	s := &Server{t: t, URL: strings.TrimSuffix(db.URL, "/")}
	log := s.StatementLog(t)
	var mark uint64
	if len(log) > 0 {
		mark = log[len(log)-1].Seq
	}
	f()
	var out []ctl.Statement
	for _, st := range s.StatementsSince(t, mark) {
		if strings.Contains(st.SQL, db.Name) {
			out = append(out, st)
		}
	}
	return out
}
