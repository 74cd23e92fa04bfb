package shim

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// BenchmarkBacklog measures GET /keda/hunt-backlog side by side: answered from ClickHouse, and
// held while ClickHouse is down (refusing connections, or accepting and never answering). Each
// sub-benchmark reports p50/p99/max latency per request; the held paths must stay under the
// query deadline even with 200 concurrent requests.
//
//	go test ./shim -run '^$' -bench Backlog -benchtime 2000x
func BenchmarkBacklog(b *testing.B) {
	e := startEngine(b)
	coordination(b, e.conn, e.db, "a", "b", "c")
	const deadline = 300 * time.Millisecond

	fresh := startShim(b, Options{Conn: e.conn, Database: e.db}) // default 2 s: the fresh path must not hold
	b.Run("clickhouse", func(b *testing.B) { hammer(b, fresh.http.URL, 1, 3, false) })
	b.Run("clickhouse-200-concurrent", func(b *testing.B) { hammer(b, fresh.http.URL, 200, 3, false) })

	// Refused connections, with the default 1 s retry backoff and with none (every request
	// asks the dead server).
	held := startShim(b, Options{Conn: e.conn, Database: e.db, Timeout: deadline})
	noBackoff := startShim(b, Options{Conn: e.conn, Database: e.db, Timeout: deadline, RetryBackoff: time.Nanosecond})
	for _, s := range []*testShim{held, noBackoff} {
		if r := s.get(b, "/keda/hunt-backlog"); r.value(b) != 3 {
			b.Fatalf("warm-up: %s", r.Body)
		}
	}
	e.srv.Stop()
	b.Run("held-refused", func(b *testing.B) { hammer(b, held.http.URL, 1, 3, true) })
	b.Run("held-refused-200-concurrent", func(b *testing.B) { hammer(b, held.http.URL, 200, 3, true) })
	b.Run("held-refused-no-backoff-200-concurrent", func(b *testing.B) { hammer(b, noBackoff.http.URL, 200, 3, true) })

	// A server that accepts and never answers: only the deadline ends the wait.
	hole := blackhole(b)
	opts, err := clickhouse.ParseDSN("http://" + hole)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	silent := startShim(b, Options{Conn: conn, Database: e.db, Timeout: deadline})
	silentNoBackoff := startShim(b, Options{Conn: conn, Database: e.db, Timeout: deadline, RetryBackoff: time.Nanosecond})
	b.Run("held-blackhole-200-concurrent", func(b *testing.B) { hammer(b, silent.http.URL, 200, 0, true) })
	b.Run("held-blackhole-no-backoff-200-concurrent", func(b *testing.B) {
		max := hammer(b, silentNoBackoff.http.URL, 200, 0, true)
		if max > deadline+200*time.Millisecond {
			b.Errorf("a held answer took %v, deadline %v", max, deadline)
		}
	})
}

// hammer sends b.N requests from workers goroutines, checks each answer, and reports latency
// quantiles. It returns the slowest request.
func hammer(b *testing.B, base string, workers int, want float64, held bool) time.Duration {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers + 8, MaxConnsPerHost: workers + 8}}
	defer client.CloseIdleConnections()
	lat := make([]time.Duration, b.N)
	var next sync.Mutex
	i := 0
	take := func() int {
		next.Lock()
		defer next.Unlock()
		if i >= b.N {
			return -1
		}
		i++
		return i - 1
	}
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := take(); n >= 0; n = take() {
				start := time.Now()
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/keda/hunt-backlog", nil)
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat[n] = time.Since(start)
				r := reply{Status: resp.StatusCode, Body: body}
				if resp.StatusCode != 200 || !checkBody(body, &r) || r.JSON["value"] != want || r.held() != held {
					b.Errorf("answer %d %s, want %v held=%v", resp.StatusCode, body, want, held)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.ReportMetric(float64(q(0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(q(0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
	return lat[len(lat)-1]
}

func checkBody(body []byte, r *reply) bool {
	if err := json.Unmarshal(body, &r.JSON); err != nil {
		return false
	}
	if v, ok := r.JSON["value"].(float64); ok {
		r.JSON["value"] = v
		return true
	}
	return false
}

// blackhole accepts TCP connections and never writes a byte.
func blackhole(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
