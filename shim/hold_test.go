package shim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// These tests drive the shim's own holding logic (coalescing, retry backoff, deadline, cache
// bound) with the ClickHouse call replaced by a function the test controls, inside a synctest
// bubble, so that "every request is waiting" and "the deadline passed" are observed exactly
// instead of being slept for. ClickHouse's answers themselves are tested on the engine
// (engine_test.go).

// stalled is a Querier for a server that accepts and never answers: Query returns only when
// its context ends, as the driver does.
type stalled struct{}

func (stalled) Query(ctx context.Context, _ string, _ ...any) (driver.Rows, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// panicking is a Querier whose driver call panics (a decoding bug on an odd reply).
type panicking struct{}

func (panicking) Query(context.Context, string, ...any) (driver.Rows, error) {
	panic("decoder bug")
}

func newTestServer(t *testing.T, o Options) (*Server, *Query) {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := s.cat.Lookup(BacklogQuery)
	return s, q
}

func TestConcurrentRequestsShareOneQuery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, q := newTestServer(t, Options{Conn: stalled{}})
		var calls atomic.Int32
		release := make(chan struct{})
		s.fetch = func(context.Context, *Query, map[string]string) (float64, error) {
			calls.Add(1)
			<-release
			return 7, nil
		}
		const n = 50
		answers := make(chan answer, n)
		for range n {
			go func() { answers <- s.serve(context.Background(), q, nil) }()
		}
		synctest.Wait() // every request is now either in the query or waiting for it
		if got := calls.Load(); got != 1 {
			t.Fatalf("%d concurrent requests ran %d queries, want 1", n, got)
		}
		close(release)
		for range n {
			if a := <-answers; a.Value != 7 || a.Held {
				t.Fatalf("answer %+v, want a fresh 7", a)
			}
		}
	})
}

func TestRetryBackoffSparesAFailingServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const backoff = time.Second
		s, q := newTestServer(t, Options{Conn: stalled{}, RetryBackoff: backoff})
		var calls atomic.Int32
		fail := errors.New("connection refused")
		s.fetch = func(context.Context, *Query, map[string]string) (float64, error) {
			calls.Add(1)
			return 0, fail
		}
		if a := s.serve(context.Background(), q, nil); !a.Held || !a.Cold || a.Reason != ReasonUnreachable {
			t.Fatalf("first failure: %+v, want a cold hold (unreachable)", a)
		}
		time.Sleep(backoff - time.Millisecond) // fake time: advances at once
		for range 10 {
			if a := s.serve(context.Background(), q, nil); !a.Held {
				t.Fatalf("within the backoff: %+v, want held", a)
			}
		}
		if got := calls.Load(); got != 1 {
			t.Fatalf("%d queries within the retry backoff, want 1", got)
		}
		time.Sleep(2 * time.Millisecond)
		s.serve(context.Background(), q, nil)
		if got := calls.Load(); got != 2 {
			t.Fatalf("%d queries after the retry backoff, want 2", got)
		}
	})
}

// TestDeadlineEndsAStalledQuery: against a server that never answers, the held answer comes at
// the query's timeout, and the query's goroutine ends (synctest.Test fails on a leaked one).
func TestDeadlineEndsAStalledQuery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, q := newTestServer(t, Options{Conn: stalled{}, Timeout: 700 * time.Millisecond})
		start := time.Now()
		a := s.serve(context.Background(), q, nil)
		if took := time.Since(start); took != 700*time.Millisecond {
			t.Errorf("held answer after %v, want exactly the 700ms deadline", took)
		}
		if !a.Held || a.Reason != ReasonTimeout {
			t.Errorf("answer %+v, want held (timeout)", a)
		}
	})
}

// TestDriverPanicIsHeld: a panic inside the driver must not end the process (it runs on the
// query's own goroutine, which net/http does not recover).
func TestDriverPanicIsHeld(t *testing.T) {
	s, q := newTestServer(t, Options{Conn: panicking{}})
	if a := s.serve(context.Background(), q, nil); !a.Held || a.Reason != ReasonBadResult {
		t.Fatalf("answer %+v, want held (bad_result)", a)
	}
}

func TestCacheEvictsLeastRecentlyUsedNotHeld(t *testing.T) {
	q := &Query{Name: "q", Params: []string{"a"}}
	c := newCache(2, 2)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	held := c.get("held", q, "a=1", t0)
	held.holding = true
	c.get("idle", q, "a=2", t0.Add(time.Second))
	c.get("new", q, "a=3", t0.Add(2*time.Second)) // full: "held" is older but protected
	_, heldKept := c.entries["held"]
	_, idleKept := c.entries["idle"]
	if !heldKept || idleKept || len(c.entries) != 2 {
		t.Fatalf("entries after eviction: held=%v idle=%v n=%d, want the held one kept and idle evicted", heldKept, idleKept, len(c.entries))
	}
	// When everything is held, a cold hold (no good value yet) goes before a held good value,
	// however recently it was used; the cache stays bounded.
	held.good = true
	c.entries["new"].holding = true
	c.get("newest", q, "a=4", t0.Add(3*time.Second))
	if _, ok := c.entries["held"]; !ok || len(c.entries) != 2 {
		t.Fatalf("all held: %d entries, held good value kept=%v; want 2 and the good value kept", len(c.entries), ok)
	}
	if _, ok := c.entries["new"]; ok {
		t.Fatal("the cold hold was kept over the held good value")
	}
}

// The value of a query without parameters (the backlog KEDA scales on) is never evicted, even
// when it is the least recently used and every other entry is held.
func TestCacheNeverEvictsAParameterlessValue(t *testing.T) {
	backlog := &Query{Name: BacklogQuery}
	pressure := &Query{Name: PressureQuery, Params: []string{"service"}}
	c := newCache(3, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := c.get(cacheKey(backlog, ""), backlog, "", t0)
	b.holding, b.good, b.value = true, true, 25
	for i := range 100 {
		canon := fmt.Sprintf("service=s-%d", i)
		e := c.get(cacheKey(pressure, canon), pressure, canon, t0.Add(time.Duration(i+1)*time.Second))
		e.holding, e.good = true, true // as good as the backlog's, and more recently used
	}
	if got, ok := c.entries[cacheKey(backlog, "")]; !ok || got.value != 25 {
		t.Fatal("the backlog's held value was evicted")
	}
	if len(c.entries) != 4 || c.params != 3 {
		t.Fatalf("%d entries (%d parameterised), want the backlog and 3", len(c.entries), c.params)
	}
}

// A flood of one query's parameter values evicts only that query's entries.
func TestCacheFloodEvictsOnlyItsOwnQuery(t *testing.T) {
	flooded := &Query{Name: "flooded", Params: []string{"p"}}
	other := &Query{Name: "other", Params: []string{"p"}}
	c := newCache(10, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kept := c.get(cacheKey(other, "p=x"), other, "p=x", t0)
	kept.holding, kept.good = true, true
	for i := range 100 {
		canon := fmt.Sprintf("p=%d", i)
		c.get(cacheKey(flooded, canon), flooded, canon, t0.Add(time.Duration(i+1)*time.Second)).holding = true
	}
	if _, ok := c.entries[cacheKey(other, "p=x")]; !ok {
		t.Fatal("another query's held value was evicted by the flood")
	}
	if c.perQuery["flooded"] != 3 || len(c.entries) != 4 {
		t.Fatalf("flooded query holds %d entries (%d in all), want its cap of 3", c.perQuery["flooded"], len(c.entries))
	}
}

// TestHoldingLogsOnlyEdges: one line when holding starts, none while it goes on, one when it
// ends, whatever the number of requests in between.
func TestHoldingLogsOnlyEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuffer{}
		s, q := newTestServer(t, Options{Conn: stalled{}, RetryBackoff: time.Nanosecond})
		s.log = slogJSON(logs)
		var mu sync.Mutex
		var err error = errors.New("connection refused")
		s.fetch = func(context.Context, *Query, map[string]string) (float64, error) {
			mu.Lock()
			defer mu.Unlock()
			return 4, err
		}
		for range 20 {
			s.serve(context.Background(), q, nil)
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		err = nil
		mu.Unlock()
		for range 5 {
			s.serve(context.Background(), q, nil)
		}
		if started, ended := logs.count("holding the last good value"), logs.count("holding ended"); started != 1 || ended != 1 {
			t.Fatalf("%d holding-started and %d holding-ended lines for 20 failures then 5 successes, want 1 and 1:\n%s", started, ended, logs)
		}
	})
}

// TestPasswordScrubbedFromHoldingLog: a driver error that carries the ClickHouse password (as a
// DSN in an error can) reaches the holding log with the password replaced.
func TestPasswordScrubbedFromHoldingLog(t *testing.T) {
	password := rand.Text()
	logs := &logBuffer{}
	s, q := newTestServer(t, Options{Conn: stalled{}, Redact: []string{"", password}})
	s.log = slogJSON(logs)
	s.fetch = func(context.Context, *Query, map[string]string) (float64, error) {
		return 0, fmt.Errorf("dial clickhouse://scaler:%s@db:9000: connection refused", password)
	}
	s.serve(context.Background(), q, nil)
	if logs.count("holding") != 1 || !strings.Contains(logs.String(), "[redacted]") {
		t.Fatalf("no scrubbed holding line:\n%s", logs)
	}
	if strings.Contains(logs.String(), password) {
		t.Fatalf("the password is in the log:\n%s", logs)
	}
}

// TestHoldingEdgesOfNewParamsDoNotFlood: during an outage a caller that sends a new parameter
// value with every request starts a hold per value; the query logs that edge above Debug once
// a minute, not once per value.
func TestHoldingEdgesOfNewParamsDoNotFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuffer{}
		s, _ := newTestServer(t, Options{Conn: stalled{}, RetryBackoff: time.Nanosecond})
		s.log = slogJSON(logs)
		q, ok := s.cat.Lookup(PressureQuery)
		if !ok {
			t.Fatal("no pressure query")
		}
		s.fetch = func(context.Context, *Query, map[string]string) (float64, error) {
			return 0, errors.New("connection refused")
		}
		for i := range 30 {
			s.serve(context.Background(), q, map[string]string{"service": fmt.Sprint("svc-", i)})
		}
		if n := logs.countAt("WARN", "holding the last good value"); n != 1 {
			t.Fatalf("%d holding-started warnings for 30 new parameter values in one outage, want 1:\n%s", n, logs)
		}
		time.Sleep(edgeLogEvery)
		s.serve(context.Background(), q, map[string]string{"service": "svc-late"})
		if n := logs.countAt("WARN", "holding the last good value"); n != 2 {
			t.Fatalf("%d holding-started warnings after a minute more, want 2", n)
		}
	})
}
