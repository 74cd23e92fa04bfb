package chlocal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// hold is longer than any test: a held request is ended by ClearFaults (or the
// server stopping), never by its delay running out.
const hold = 10 * time.Minute

// faultEnv is a private chlocal with table fa (a UInt32) in default and two
// independent connections.
type faultEnv struct {
	srv  *chtest.Server
	a, b driver.Conn
}

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	srv := chtest.Start(t)
	open := func() driver.Conn {
		opts, err := chtest.Options(srv.URL, "default")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := clickhouse.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	e := &faultEnv{srv: srv, a: open(), b: open()}
	if err := e.a.Exec(ctxT(t), "CREATE TABLE fa (a UInt32) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *faultEnv) count(t *testing.T) uint64 {
	t.Helper()
	var n uint64
	if err := e.b.QueryRow(ctxT(t), "SELECT count() FROM fa").Scan(&n); err != nil {
		t.Fatalf("count on the second connection: %v", err)
	}
	return n
}

// logged returns the last logged statement whose SQL contains marker.
func logged(t *testing.T, srv *chtest.Server, marker string) (ctl.Statement, bool) {
	t.Helper()
	sts := srv.StatementLog(t)
	for i := len(sts) - 1; i >= 0; i-- {
		if strings.Contains(sts[i].SQL, marker) {
			return sts[i], true
		}
	}
	return ctl.Statement{}, false
}

// async runs f in a goroutine; the channel yields its error.
func async(f func() error) chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// result waits for an async call's error, failing the test after a minute:
// a hold that is never released must fail the test, not hang it.
func result(t *testing.T, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Minute):
		t.Fatal("no answer within a minute of the hold's release")
		return nil
	}
}

func pending(ch chan error) bool {
	select {
	case err := <-ch:
		ch <- err
		return false
	default:
		return true
	}
}

func exceptionCode(err error) int32 {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return ex.Code
	}
	return 0
}

// An insert under delay_answer lands at once: another connection sees the row
// while the first still waits for its answer, and other requests are served
// meanwhile (the hold is outside the engine's lock).
func TestFaultDelayAnswerInsertLandsBeforeItsAnswer(t *testing.T) {
	e := newFaultEnv(t)
	e.srv.SetFaults(t, ctl.FaultRule{Name: "late-ack", Kind: ctl.KindInsert, Match: `\bfa\b`, Effect: ctl.DelayAnswer, Delay: hold})
	done := async(func() error { return e.a.Exec(context.Background(), "INSERT INTO fa VALUES (1)") })
	chtest.Eventually(t, time.Minute, "the held insert's row to be visible", func() bool { return e.count(t) == 1 })
	if !pending(done) {
		t.Fatalf("the insert was answered before the hold ended: %v", <-done)
	}
	st, ok := logged(t, e.srv, "INSERT INTO fa")
	if !ok || st.Fault != "late-ack" || st.Effect != ctl.DelayAnswer || !st.Executed || st.Done {
		t.Fatalf("log entry while held = %+v (found %v), want fault late-ack, executed, not done", st, ok)
	}
	e.srv.ClearFaults(t)
	if err := result(t, done); err != nil {
		t.Fatalf("insert after the hold: %v", err)
	}
	if st, _ := logged(t, e.srv, "INSERT INTO fa"); !st.Done || st.ErrorCode != 0 {
		t.Fatalf("log entry after the answer = %+v", st)
	}
	if rs := e.srv.FaultStats(t); len(rs) != 0 {
		t.Fatalf("rules after ClearFaults: %+v", rs)
	}
}

// A read under delay_answer is executed at once and its answer, stale by then,
// arrives late: it misses a row committed while it was held.
func TestFaultDelayAnswerReadIsStale(t *testing.T) {
	e := newFaultEnv(t)
	if err := e.a.Exec(ctxT(t), "INSERT INTO fa VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	e.srv.SetFaults(t, ctl.FaultRule{Kind: ctl.KindRead, Match: `max\(a\)`, Effect: ctl.DelayAnswer, Delay: hold})
	var got uint32
	done := async(func() error { return e.a.QueryRow(context.Background(), "SELECT max(a) FROM fa").Scan(&got) })
	chtest.Eventually(t, time.Minute, "the held read to execute", func() bool {
		st, ok := logged(t, e.srv, "max(a)")
		return ok && st.Executed
	})
	if err := e.b.Exec(ctxT(t), "INSERT INTO fa VALUES (2)"); err != nil {
		t.Fatalf("insert while a read is held: %v", err)
	}
	if !pending(done) {
		t.Fatal("the read was answered before the hold ended")
	}
	e.srv.ClearFaults(t)
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Fatalf("held read = %d, want the stale 1 (it ran before 2 was inserted)", got)
	}
}

// delay_start holds the request before it runs: nothing lands until the hold
// ends, and other requests are served meanwhile.
func TestFaultDelayStart(t *testing.T) {
	e := newFaultEnv(t)
	e.srv.SetFaults(t, ctl.FaultRule{Name: "paused", Kind: ctl.KindInsert, Effect: ctl.DelayStart, Delay: hold})
	done := async(func() error { return e.a.Exec(context.Background(), "INSERT INTO fa VALUES (1)") })
	chtest.Eventually(t, time.Minute, "the insert to reach the server", func() bool {
		st, ok := logged(t, e.srv, "INSERT INTO fa")
		return ok && st.Fault == "paused"
	})
	if n := e.count(t); n != 0 {
		t.Fatalf("count = %d while the insert is held before it starts, want 0", n)
	}
	if st, _ := logged(t, e.srv, "INSERT INTO fa"); st.Executed || !pending(done) {
		t.Fatalf("held insert executed or answered: %+v", st)
	}
	e.srv.ClearFaults(t)
	if err := result(t, done); err != nil {
		t.Fatalf("insert after the hold: %v", err)
	}
	if n := e.count(t); n != 1 {
		t.Fatalf("count = %d after the hold ended, want 1", n)
	}
}

// fail_after: the rows land, the client gets a typed exception (a lost
// acknowledgement); fail_before: nothing runs.
func TestFaultFailAfterAndFailBefore(t *testing.T) {
	e := newFaultEnv(t)
	e.srv.SetFaults(t, ctl.FaultRule{Kind: ctl.KindInsert, Match: `VALUES \(1\)`, Effect: ctl.FailAfter, Code: 252},
		ctl.FaultRule{Kind: ctl.KindInsert, Match: `VALUES \(2\)`, Effect: ctl.FailBefore, Code: 242, Message: "Table is in readonly mode"})
	err := e.a.Exec(ctxT(t), "INSERT INTO fa VALUES (1)")
	if exceptionCode(err) != 252 || !strings.Contains(err.Error(), "TOO_MANY_PARTS") {
		t.Fatalf("fail_after insert: %v, want *clickhouse.Exception 252 (TOO_MANY_PARTS)", err)
	}
	if n := e.count(t); n != 1 {
		t.Fatalf("count = %d after fail_after, want 1: the row landed", n)
	}
	err = e.a.Exec(ctxT(t), "INSERT INTO fa VALUES (2)")
	if exceptionCode(err) != 242 || !strings.Contains(err.Error(), "Table is in readonly mode") {
		t.Fatalf("fail_before insert: %v, want *clickhouse.Exception 242 with the rule's message", err)
	}
	if n := e.count(t); n != 1 {
		t.Fatalf("count = %d after fail_before, want still 1", n)
	}
	st1, _ := logged(t, e.srv, "VALUES (1)")
	st2, _ := logged(t, e.srv, "VALUES (2)")
	if !st1.Executed || st1.ErrorCode != 252 || st2.Executed || st2.ErrorCode != 242 {
		t.Fatalf("log: fail_after %+v, fail_before %+v", st1, st2)
	}
	// The same holds for a batch insert (Native data in the body).
	batch, err := e.a.PrepareBatch(ctxT(t), "INSERT INTO fa")
	if err != nil {
		t.Fatal(err)
	}
	_ = batch.Append(uint32(3))
	e.srv.SetFaults(t, ctl.FaultRule{Kind: ctl.KindInsert, Effect: ctl.FailAfter, Code: 319})
	if err := batch.Send(); exceptionCode(err) != 319 {
		t.Fatalf("batch under fail_after: %v, want code 319", err)
	}
	if n := e.count(t); n != 2 {
		t.Fatalf("count = %d after the batch, want 2", n)
	}
}

// A rule targets by kind and regex: inserts into hunt_lease fail, inserts
// into hunt_leases or hunt_watermark and reads of hunt_lease do not.
func TestFaultTargeting(t *testing.T) {
	e := newFaultEnv(t)
	ctx := ctxT(t)
	for _, tb := range []string{"hunt_lease", "hunt_leases", "hunt_watermark"} {
		if err := e.a.Exec(ctx, "CREATE TABLE "+tb+" (a UInt32) ENGINE = MergeTree ORDER BY a"); err != nil {
			t.Fatal(err)
		}
	}
	e.srv.SetFaults(t, ctl.FaultRule{Name: "lease", Kind: ctl.KindInsert, Match: `\bhunt_lease\b`, Effect: ctl.FailBefore, Code: 252})
	if err := e.a.Exec(ctx, "INSERT INTO hunt_lease VALUES (1)"); exceptionCode(err) != 252 {
		t.Fatalf("insert into hunt_lease: %v, want code 252", err)
	}
	for _, q := range []string{"INSERT INTO hunt_leases VALUES (1)", "INSERT INTO hunt_watermark VALUES (1)", "SELECT count() FROM hunt_lease"} {
		if err := e.a.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rs := e.srv.FaultStats(t)
	if len(rs) != 1 || rs[0].Name != "lease" || rs[0].Matched != 1 || rs[0].Fired != 1 {
		t.Fatalf("stats = %+v, want lease matched 1 fired 1", rs)
	}
	// /chlocal/stats carries the same counters.
	resp, err := http.Get(e.srv.URL + "/chlocal/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Faults []ctl.RuleStatus `json:"faults"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.Faults) != 1 || st.Faults[0].Fired != 1 {
		t.Fatalf("/chlocal/stats faults = %+v", st.Faults)
	}
}

// Every Nth match fires, up to Times; a probability rule with a fixed seed
// fires on the same statements again.
func TestFaultTriggersOnTheEngine(t *testing.T) {
	e := newFaultEnv(t)
	ctx := ctxT(t)
	run := func(n int) string {
		var b strings.Builder
		for i := range n {
			err := e.a.Exec(ctx, fmt.Sprintf("SELECT %d AS trig", i))
			switch {
			case err == nil:
				b.WriteByte('.')
			case exceptionCode(err) == 1001:
				b.WriteByte('x')
			default:
				t.Fatalf("statement %d: %v", i, err)
			}
		}
		return b.String()
	}
	e.srv.SetFaults(t, ctl.FaultRule{Match: `AS trig`, Effect: ctl.FailBefore, Every: 3, Times: 2})
	if got := run(9); got != "..x..x..." {
		t.Fatalf("every 3, times 2: %s", got)
	}
	prob := func(seed uint64) string {
		e.srv.SetFaultSet(t, ctl.FaultSet{Seed: seed, Rules: []ctl.FaultRule{{Match: `AS trig`, Effect: ctl.FailBefore, Probability: 0.5}}})
		return run(40)
	}
	a, b, c := prob(7), prob(7), prob(8)
	if a != b || a == c || !strings.Contains(a, "x") || !strings.Contains(a, ".") {
		t.Fatalf("seed 7: %s\nseed 7: %s\nseed 8: %s\nwant the first two equal, the third different", a, b, c)
	}
}

// The statement log records the settings clickhouse-go sends, per query and
// per connection, and never the password.
func TestStatementLogSettings(t *testing.T) {
	srv := chtest.Start(t)
	opts, err := chtest.Options(srv.URL, "default")
	if err != nil {
		t.Fatal(err)
	}
	password := "pw-" + fmt.Sprint(time.Now().UnixNano()) // generated: chlocal ignores it
	opts.Auth.Username, opts.Auth.Password = "default", password
	opts.Settings = clickhouse.Settings{"max_threads": 3}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// No deadline: clickhouse-go would turn one into max_execution_time.
	qctx := clickhouse.Context(context.Background(),
		clickhouse.WithSettings(clickhouse.Settings{"max_execution_time": 17, "readonly": 1}),
		clickhouse.WithParameters(clickhouse.Parameters{"n": "5"}))
	var n uint8
	if err := conn.QueryRow(qctx, "SELECT {n:UInt8} AS logmark").Scan(&n); err != nil || n != 5 {
		t.Fatalf("query: %d, %v", n, err)
	}
	st, ok := logged(t, srv, "AS logmark")
	if !ok {
		t.Fatal("statement not in the log")
	}
	want := map[string]string{"max_execution_time": "17", "readonly": "1", "max_threads": "3"}
	for k, v := range want {
		if st.Settings[k] != v {
			t.Errorf("setting %s = %q, want %q (logged %v)", k, st.Settings[k], v, st.Settings)
		}
	}
	if st.Params["n"] != "5" || st.Kind != ctl.KindRead || st.Database != "default" || !st.Done {
		t.Errorf("entry = %+v", st)
	}
	// A password sent as a URL parameter is not a setting and is not logged.
	resp, err := http.Post(srv.URL+"/?user=default&password="+password, "text/plain", strings.NewReader("SELECT 'pw-in-url'"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st, ok := logged(t, srv, "pw-in-url"); !ok || len(st.Settings) != 0 {
		t.Fatalf("statement with user and password parameters: %+v (found %v), want no settings", st, ok)
	}
	resp, err = http.Get(srv.URL + "/chlocal/log?limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(raw), password) {
		t.Fatal("the statement log contains the connection's password")
	}
	// limit keeps the newest entries.
	resp, err = http.Get(srv.URL + "/chlocal/log?limit=1")
	if err != nil {
		t.Fatal(err)
	}
	var last []ctl.Statement
	err = json.NewDecoder(resp.Body).Decode(&last)
	resp.Body.Close()
	if err != nil || len(last) != 1 || !strings.Contains(last[0].SQL, "pw-in-url") {
		t.Fatalf("limit=1: %+v, %v", last, err)
	}
	if got := srv.StatementsSince(t, last[0].Seq); len(got) != 0 {
		t.Fatalf("StatementsSince(last) = %+v, want none", got)
	}
}

// Control endpoints are never subject to faults, so a test can always undo them.
func TestFaultsSpareControlEndpoints(t *testing.T) {
	srv := chtest.Start(t)
	srv.SetFaults(t, ctl.FaultRule{Effect: ctl.FailBefore}, ctl.FaultRule{Effect: ctl.DelayStart, Delay: hold})
	for _, p := range []string{"/chlocal/stats", "/chlocal/faults", "/chlocal/log", "/ping"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Chlocal-Fault") != "" {
			t.Fatalf("%s under faults: %s", p, resp.Status)
		}
	}
	resp, err := http.Post(srv.URL+"/", "text/plain", strings.NewReader("SELECT 1"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 || resp.Header.Get("X-Chlocal-Fault") != "rule0" {
		t.Fatalf("a statement under fail_before: %s, fault %q", resp.Status, resp.Header.Get("X-Chlocal-Fault"))
	}
	srv.ClearFaults(t)
}

// Bad rule sets are refused with 400 and leave the current rules in place.
func TestFaultsRefuseBadRules(t *testing.T) {
	srv := chtest.Start(t)
	srv.SetFaults(t, ctl.FaultRule{Name: "keep", Effect: ctl.FailBefore, Match: `nothing-matches-this`})
	for _, body := range []string{
		`{"rules":[{"effect":"fail_before","match":"("}]}`,
		`{"rules":[{"effect":"fail_before","probabilty":0.5}]}`,
		`{"rules":[{"effect":"delay_answer"}]}`,
		`{"rules":[{"effect":"fail_before","kind":"write"}]}`,
		`not json`,
	} {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/chlocal/faults", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "error") {
			t.Errorf("PUT %s: %s %s, want 400 with an error", body, resp.Status, b)
		}
	}
	if rs := srv.FaultStats(t); len(rs) != 1 || rs[0].Name != "keep" {
		t.Fatalf("rules after refused PUTs: %+v", rs)
	}
}
