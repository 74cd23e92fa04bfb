package ctl

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	for sql, want := range map[string]Kind{
		"SELECT 1":                                 KindRead,
		"  with x AS (SELECT 1) SELECT * FROM x":   KindRead,
		"(SELECT 1) UNION ALL (SELECT 2)":          KindRead,
		"-- note\n/* c */ SELECT 1":                KindRead,
		"EXPLAIN SELECT 1":                         KindRead,
		"SHOW TABLES":                              KindRead,
		"DESCRIBE TABLE t":                         KindRead,
		"EXISTS TABLE t":                           KindRead,
		"insert into t values (1)":                 KindInsert,
		"/* x */INSERT INTO t FORMAT Native":       KindInsert,
		"CREATE TABLE t (a UInt8) ENGINE = Memory": KindOther,
		"ALTER TABLE t DELETE WHERE 1":             KindOther,
		"SELECTED":                                 KindOther,
		"":                                         KindOther,
		"-- only a comment":                        KindOther,
	} {
		if got := Classify(sql); got != want {
			t.Errorf("Classify(%q) = %q, want %q", sql, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		r    FaultRule
		want string // "" = valid
	}{
		{FaultRule{Effect: DelayAnswer, Delay: time.Second}, ""},
		{FaultRule{Effect: FailBefore, Code: 252, Kind: KindInsert, Match: `hunt_lease`}, ""},
		{FaultRule{Effect: FailAfter, Every: 3}, ""},
		{FaultRule{}, "effect is required"},
		{FaultRule{Effect: "explode"}, "effect \"explode\""},
		{FaultRule{Effect: DelayAnswer}, "needs a delay"},
		{FaultRule{Effect: DelayStart, Delay: time.Second, Code: 252}, "sends no exception"},
		{FaultRule{Effect: FailBefore, Match: `(`}, "match"},
		{FaultRule{Effect: FailBefore, Kind: "write"}, "kind"},
		{FaultRule{Effect: FailBefore, Probability: 1.5}, "probability"},
		{FaultRule{Effect: FailBefore, Probability: 0.5, Every: 2}, "exclusive"},
		{FaultRule{Effect: FailBefore, Every: -1}, "negative"},
		{FaultRule{Effect: FailBefore, Delay: -time.Second}, "negative"},
		{FaultRule{Effect: FailBefore, Code: -1}, "code"},
	} {
		err := tc.r.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.r, err, tc.want)
		}
	}
	if _, err := NewInjector(FaultSet{Rules: []FaultRule{{Effect: FailBefore}, {Name: "bad", Effect: DelayStart}}}); err == nil || !strings.Contains(err.Error(), "rule 1 (bad)") {
		t.Errorf("NewInjector with a bad second rule: %v, want an error naming rule 1 (bad)", err)
	}
}

func TestFaultRuleJSON(t *testing.T) {
	in := FaultSet{Seed: 9, Rules: []FaultRule{{Name: "late", Kind: KindRead, Match: `hunt_watermark`, Probability: 0.3, Effect: DelayAnswer, Delay: 1500 * time.Millisecond}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"delay":"1.5s"`) {
		t.Fatalf("JSON %s: want the delay as a duration string", b)
	}
	var out FaultSet
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
	if err := json.Unmarshal([]byte(`{"rules":[{"effect":"fail_before","probabilty":0.1}]}`), &out); err == nil {
		t.Fatal("a misspelt field was accepted")
	}
	if err := json.Unmarshal([]byte(`{"rules":[{"effect":"delay_start","delay":"soon"}]}`), &out); err == nil {
		t.Fatal("a bad delay was accepted")
	}
	st := FaultStatus{Seed: 3, Rules: []RuleStatus{{FaultRule: in.Rules[0], Matched: 7, Fired: 2}}}
	b, _ = json.Marshal(st)
	var st2 FaultStatus
	if err := json.Unmarshal(b, &st2); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(st2) != fmt.Sprint(st) {
		t.Fatalf("status round trip: %+v, want %+v", st2, st)
	}
}

// pattern returns which of n matching statements the injector fires on.
func pattern(in *Injector, n int) string {
	var b strings.Builder
	for range n {
		if _, ok := in.Decide(KindRead, "SELECT 1"); ok {
			b.WriteByte('x')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String()
}

func TestTriggers(t *testing.T) {
	every, _ := NewInjector(FaultSet{Rules: []FaultRule{{Effect: FailBefore, Every: 3}}})
	if got := pattern(every, 9); got != "..x..x..x" {
		t.Errorf("every 3: %s", got)
	}
	capped, _ := NewInjector(FaultSet{Rules: []FaultRule{{Effect: FailBefore, Every: 2, Times: 2}}})
	if got := pattern(capped, 8); got != ".x.x...." {
		t.Errorf("every 2, times 2: %s", got)
	}
	always, _ := NewInjector(FaultSet{Rules: []FaultRule{{Effect: FailBefore, Kind: KindInsert}, {Effect: FailAfter}}})
	if r, ok := always.Decide(KindRead, "SELECT 1"); !ok || r.Name != "rule1" || r.Code != DefaultFaultCode {
		t.Errorf("a read skips the insert rule and hits rule1 with the default code: %+v %v", r, ok)
	}
	if r, _ := always.Decide(KindInsert, "INSERT INTO t VALUES (1)"); r.Name != "rule0" {
		t.Errorf("the first rule that fires wins: %+v", r)
	}
	st := always.Status()
	if st.Rules[0].Matched != 1 || st.Rules[0].Fired != 1 || st.Rules[1].Matched != 1 || st.Rules[1].Fired != 1 {
		t.Errorf("counters: %+v", st.Rules)
	}
	re, _ := NewInjector(FaultSet{Rules: []FaultRule{{Effect: FailBefore, Match: `\bhunt_lease\b`}}})
	if _, ok := re.Decide(KindInsert, "INSERT INTO db.hunt_leases VALUES"); ok {
		t.Error("the regex matched hunt_leases")
	}
	if _, ok := re.Decide(KindInsert, "INSERT INTO db.hunt_lease VALUES"); !ok {
		t.Error("the regex missed hunt_lease")
	}
}

func TestProbabilityReproducible(t *testing.T) {
	set := func(seed uint64) *Injector {
		in, err := NewInjector(FaultSet{Seed: seed, Rules: []FaultRule{{Effect: FailBefore, Probability: 0.3}}})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	a, b, c := pattern(set(42), 200), pattern(set(42), 200), pattern(set(43), 200)
	if a != b {
		t.Fatalf("same seed, different patterns:\n%s\n%s", a, b)
	}
	if a == c {
		t.Fatal("seeds 42 and 43 gave the same pattern")
	}
	if n := strings.Count(a, "x"); n < 30 || n > 90 {
		t.Fatalf("fired %d of 200 at p=0.3", n)
	}
	if r := set(0); r.Seed() == 0 {
		t.Fatal("seed 0 was not replaced by a random seed")
	}
}

func TestStatementLog(t *testing.T) {
	if NewStatementLog(0) != nil || NewStatementLog(-1).Add(Statement{}) != 0 {
		t.Fatal("a log of size <= 0 must be off")
	}
	l := NewStatementLog(3)
	for i := range 5 {
		l.Add(Statement{SQL: fmt.Sprintf("SELECT %d", i+1)})
	}
	sqls := func(sts []Statement) string {
		var s []string
		for _, st := range sts {
			s = append(s, fmt.Sprintf("%d:%s", st.Seq, st.SQL))
		}
		return strings.Join(s, ",")
	}
	if got := sqls(l.List(0, 0)); got != "3:SELECT 3,4:SELECT 4,5:SELECT 5" {
		t.Errorf("List(0, 0) = %s", got)
	}
	if got := sqls(l.List(0, 2)); got != "4:SELECT 4,5:SELECT 5" {
		t.Errorf("List(0, 2) = %s", got)
	}
	if got := sqls(l.List(4, 0)); got != "5:SELECT 5" {
		t.Errorf("List(4, 0) = %s", got)
	}
	if got := l.List(5, 0); len(got) != 0 {
		t.Errorf("List(5, 0) = %v", got)
	}
	l.Finish(1, 60) // evicted: no effect
	l.SetFault(5, "late", DelayAnswer)
	l.SetExecuted(5)
	l.Finish(5, 252)
	if st := l.List(4, 0)[0]; st.Fault != "late" || st.Effect != DelayAnswer || !st.Executed || !st.Done || st.ErrorCode != 252 {
		t.Errorf("updated entry = %+v", st)
	}
	seq := l.Add(Statement{SQL: "CREATE USER u IDENTIFIED WITH sha256_password BY 'hunter\\'2' SETTINGS x = 1"})
	if got := l.List(seq-1, 0)[0].SQL; strings.Contains(got, "hunter") || !strings.Contains(got, "BY '[masked]' SETTINGS") {
		t.Errorf("password literal not masked: %s", got)
	}
	seq = l.Add(Statement{SQL: strings.Repeat("x", MaxLoggedSQL+10)})
	if got := l.List(seq-1, 0)[0].SQL; len(got) != MaxLoggedSQL {
		t.Errorf("SQL kept %d bytes, want %d", len(got), MaxLoggedSQL)
	}
}
