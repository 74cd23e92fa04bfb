// Package ctl is the vocabulary of chlocal's control endpoints: fault rules
// (PUT/GET/DELETE /chlocal/faults), their counters and the statement log
// (GET /chlocal/log). It is plain Go with no chDB dependency, so that test
// helpers (internal/chtest) can build rules and read the log without linking
// the engine loader; chlocal re-exports the types under the same names.
package ctl

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Kind is a statement's kind, from its first keyword.
type Kind string

const (
	// KindAny in a rule matches every statement.
	KindAny Kind = ""
	// KindRead is SELECT, WITH, EXPLAIN, SHOW, DESCRIBE and EXISTS.
	KindRead Kind = "read"
	// KindInsert is INSERT.
	KindInsert Kind = "insert"
	// KindOther is everything else (DDL, ALTER, SET, SYSTEM, …).
	KindOther Kind = "other"
)

// Effect is what a fault does to the statement it fires on.
type Effect string

const (
	// DelayAnswer executes the statement at once, then holds the answer for
	// Delay: a read whose (by then stale) answer arrives late, an insert that
	// landed but is acknowledged late.
	DelayAnswer Effect = "delay_answer"
	// DelayStart holds the request for Delay, then executes it: a paused
	// client, or a request that lands late.
	DelayStart Effect = "delay_start"
	// FailAfter executes the statement, then answers with an exception: the
	// rows landed, the client thinks they did not (a lost acknowledgement).
	FailAfter Effect = "fail_after"
	// FailBefore answers with an exception without executing.
	FailBefore Effect = "fail_before"
)

// FaultRule matches statements and, when it fires, applies one effect.
// The zero values of the trigger fields mean "every match".
type FaultRule struct {
	// Name labels the rule in counters and the statement log; default "ruleN"
	// (N its position from 0).
	Name string
	// Kind restricts the rule to one statement kind; KindAny matches all.
	Kind Kind
	// Match is an optional RE2 regular expression searched in the statement
	// text as sent (the query, without INSERT data), e.g. `hunt_watermark`.
	Match string
	// Probability fires the rule on each match with this probability, drawn
	// from a PRNG seeded by the set's seed, so that a sequence of matches
	// fires the same way again under the same seed. 0 with Every 0: always.
	Probability float64
	// Every fires the rule on the Nth, 2Nth, … match. Exclusive with Probability.
	Every int
	// Times caps how often the rule fires; 0 is no cap.
	Times int
	// Effect is required.
	Effect Effect
	// Delay is how long DelayAnswer and DelayStart hold (required for them);
	// for FailAfter and FailBefore it holds before the exception is sent.
	Delay time.Duration
	// Code is the ClickHouse error code of FailAfter and FailBefore,
	// default 1001; e.g. 252 (TOO_MANY_PARTS) or 242 (TABLE_IS_READ_ONLY).
	Code int
	// Message is the exception text; default names the rule.
	Message string
}

// faultRuleJSON is FaultRule on the wire: Delay as a Go duration string ("1.5s").
type faultRuleJSON struct {
	Name        string  `json:"name,omitempty"`
	Kind        Kind    `json:"kind,omitempty"`
	Match       string  `json:"match,omitempty"`
	Probability float64 `json:"probability,omitempty"`
	Every       int     `json:"every,omitempty"`
	Times       int     `json:"times,omitempty"`
	Effect      Effect  `json:"effect"`
	Delay       string  `json:"delay,omitempty"`
	Code        int     `json:"code,omitempty"`
	Message     string  `json:"message,omitempty"`
}

// MarshalJSON writes Delay as a duration string.
func (r FaultRule) MarshalJSON() ([]byte, error) {
	j := faultRuleJSON{r.Name, r.Kind, r.Match, r.Probability, r.Every, r.Times, r.Effect, "", r.Code, r.Message}
	if r.Delay != 0 {
		j.Delay = r.Delay.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads Delay as a duration string and refuses unknown fields,
// so that a misspelt field fails instead of silently widening a rule.
func (r *FaultRule) UnmarshalJSON(b []byte) error {
	var j faultRuleJSON
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	var d time.Duration
	if j.Delay != "" {
		var err error
		if d, err = time.ParseDuration(j.Delay); err != nil {
			return fmt.Errorf("delay: %w", err)
		}
	}
	*r = FaultRule{j.Name, j.Kind, j.Match, j.Probability, j.Every, j.Times, j.Effect, d, j.Code, j.Message}
	return nil
}

// FaultSet is a complete rule set. Rules are tried in order for each
// statement; the first that matches and fires applies, and the rules after
// it do not see that statement.
type FaultSet struct {
	// Seed seeds every rule's PRNG; 0 picks a random seed, reported by the
	// injector (and logged by chlocal) so that a failing run can be replayed.
	Seed  uint64      `json:"seed,omitempty"`
	Rules []FaultRule `json:"rules"`
}

// RuleStatus is a rule with its counters.
type RuleStatus struct {
	FaultRule
	// Matched counts statements the rule matched (kind and regex) and drew for.
	Matched int64
	// Fired counts statements the rule was applied to.
	Fired int64
}

// MarshalJSON flattens the rule and its counters into one object.
func (s RuleStatus) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(s.FaultRule)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["matched"], m["fired"] = s.Matched, s.Fired
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *RuleStatus) UnmarshalJSON(b []byte) error {
	var c struct {
		Matched int64 `json:"matched"`
		Fired   int64 `json:"fired"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	delete(m, "matched")
	delete(m, "fired")
	rb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(rb, &s.FaultRule); err != nil {
		return err
	}
	s.Matched, s.Fired = c.Matched, c.Fired
	return nil
}

// FaultStatus is what GET /chlocal/faults returns.
type FaultStatus struct {
	Seed  uint64       `json:"seed"`
	Rules []RuleStatus `json:"rules"`
}

// errorNames are the symbolic names of the codes a fault is likely to use,
// sent as clickhouse-server sends them (X-ClickHouse-Exception-Name and the
// "(NAME)" suffix); other codes go without a name.
var errorNames = map[int]string{
	159: "TIMEOUT_EXCEEDED", 164: "READONLY", 202: "TOO_MANY_SIMULTANEOUS_QUERIES",
	209: "SOCKET_TIMEOUT", 210: "NETWORK_ERROR", 241: "MEMORY_LIMIT_EXCEEDED",
	242: "TABLE_IS_READ_ONLY", 252: "TOO_MANY_PARTS", 319: "UNKNOWN_STATUS_OF_INSERT",
	425: "SYSTEM_ERROR", 999: "KEEPER_EXCEPTION", 1000: "POCO_EXCEPTION", 1001: "STD_EXCEPTION",
}

// ErrorName is the symbolic name of a ClickHouse error code, "" when unknown here.
func ErrorName(code int) string { return errorNames[code] }

// DefaultFaultCode is the code of FailAfter and FailBefore when a rule gives none.
const DefaultFaultCode = 1001

// Validate checks a rule on its own.
func (r FaultRule) Validate() error {
	switch r.Kind {
	case KindAny, KindRead, KindInsert, KindOther:
	default:
		return fmt.Errorf("kind %q: want read, insert, other or empty", r.Kind)
	}
	if r.Match != "" {
		if _, err := regexp.Compile(r.Match); err != nil {
			return fmt.Errorf("match: %w", err)
		}
	}
	if r.Probability < 0 || r.Probability > 1 {
		return fmt.Errorf("probability %v: want 0 < p <= 1 (or 0 for every match)", r.Probability)
	}
	if r.Every < 0 || r.Times < 0 {
		return errors.New("every and times must not be negative")
	}
	if r.Every > 0 && r.Probability > 0 {
		return errors.New("probability and every are exclusive")
	}
	if r.Delay < 0 {
		return fmt.Errorf("delay %v is negative", r.Delay)
	}
	switch r.Effect {
	case DelayAnswer, DelayStart:
		if r.Delay == 0 {
			return fmt.Errorf("effect %s needs a delay", r.Effect)
		}
		if r.Code != 0 || r.Message != "" {
			return fmt.Errorf("effect %s sends no exception: code and message are for fail_after and fail_before", r.Effect)
		}
	case FailAfter, FailBefore:
		if r.Code < 0 {
			return fmt.Errorf("code %d: want a positive ClickHouse error code", r.Code)
		}
	case "":
		return errors.New("effect is required (delay_answer, delay_start, fail_after or fail_before)")
	default:
		return fmt.Errorf("effect %q: want delay_answer, delay_start, fail_after or fail_before", r.Effect)
	}
	return nil
}

// Injector decides, statement by statement, which fault applies. It is safe
// for concurrent use.
type Injector struct {
	mu    sync.Mutex
	seed  uint64
	rules []*rule
}

type rule struct {
	FaultRule
	re             *regexp.Regexp
	rng            *mrand.Rand
	matched, fired int64
}

// NewInjector validates and compiles a rule set. A zero seed is replaced by
// a random one (see Seed).
func NewInjector(set FaultSet) (*Injector, error) {
	in := &Injector{seed: set.Seed}
	if in.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		in.seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	for i, fr := range set.Rules {
		if err := fr.Validate(); err != nil {
			return nil, fmt.Errorf("rule %d (%s): %w", i, fr.Name, err)
		}
		if fr.Name == "" {
			fr.Name = fmt.Sprintf("rule%d", i)
		}
		if (fr.Effect == FailAfter || fr.Effect == FailBefore) && fr.Code == 0 {
			fr.Code = DefaultFaultCode
		}
		r := &rule{FaultRule: fr, rng: mrand.New(mrand.NewPCG(in.seed, uint64(i)))}
		if fr.Match != "" {
			r.re = regexp.MustCompile(fr.Match) // compiled by Validate
		}
		in.rules = append(in.rules, r)
	}
	return in, nil
}

// Seed is the seed in use (the given one, or the random one picked).
func (in *Injector) Seed() uint64 { return in.seed }

// Decide returns the rule that applies to a statement of this kind and text,
// and counts it. Rules are tried in order and stop at the first that fires,
// so a rule counts (and draws for) only the matches that reach it: under the
// same seed, the same sequence of statements fires the same way.
func (in *Injector) Decide(kind Kind, text string) (FaultRule, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range in.rules {
		if r.Kind != KindAny && r.Kind != kind {
			continue
		}
		if r.re != nil && !r.re.MatchString(text) {
			continue
		}
		r.matched++
		if r.Times > 0 && r.fired >= int64(r.Times) {
			continue
		}
		fire := true
		switch {
		case r.Every > 0:
			fire = r.matched%int64(r.Every) == 0
		case r.Probability > 0:
			fire = r.rng.Float64() < r.Probability
		}
		if fire {
			r.fired++
			return r.FaultRule, true
		}
	}
	return FaultRule{}, false
}

// Status returns the rules (with defaults filled in) and their counters.
func (in *Injector) Status() FaultStatus {
	in.mu.Lock()
	defer in.mu.Unlock()
	st := FaultStatus{Seed: in.seed, Rules: make([]RuleStatus, 0, len(in.rules))}
	for _, r := range in.rules {
		st.Rules = append(st.Rules, RuleStatus{FaultRule: r.FaultRule, Matched: r.matched, Fired: r.fired})
	}
	return st
}

// Classify returns a statement's kind from its first keyword, after
// whitespace, comments and opening brackets.
func Classify(sql string) Kind {
	s := sql
	for {
		s = strings.TrimLeft(s, " \t\r\n\f\v(")
		switch {
		case strings.HasPrefix(s, "--"), strings.HasPrefix(s, "#"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i+1:]
				continue
			}
			return KindOther
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s[2:], "*/"); i >= 0 {
				s = s[2+i+2:]
				continue
			}
			return KindOther
		}
		break
	}
	end := 0
	for end < len(s) && (s[end] >= 'A' && s[end] <= 'Z' || s[end] >= 'a' && s[end] <= 'z') {
		end++
	}
	switch strings.ToUpper(s[:end]) {
	case "SELECT", "WITH", "EXPLAIN", "SHOW", "DESCRIBE", "DESC", "EXISTS":
		return KindRead
	case "INSERT":
		return KindInsert
	}
	return KindOther
}
