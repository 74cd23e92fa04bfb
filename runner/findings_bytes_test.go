package runner

import (
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// heapDuring runs f and reports what the process allocated meanwhile (TotalAlloc, which no
// collection hides) and the highest live heap sampled.
func heapDuring(f func()) (allocated, peak uint64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var top atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > top.Load() {
				top.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, top.Load() - min(top.Load(), before.HeapAlloc)
}

// The attack: 120 findings of 1 MB each. Every one is stored as a truncation record
// within the per-finding cap (none is lost: a detection whose row is large still shows), and
// the runner allocates a small multiple of what it stores, not the 120 MB the hunt produced.
func TestFindingsOverTheByteCapAreTruncated(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "megabytes", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)),
		Query: "SELECT number AS n, repeat('x', 1000000) AS blob FROM numbers(120) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	r := e.runner("pod-a", testSet("x", h), nil)
	allocated, peak := heapDuring(func() { e.tickAndWait(r) })
	t.Logf("120 findings of 1 MB: the runner allocated %.1f MiB during the run, live heap peaked %.1f MiB above its start",
		float64(allocated)/(1<<20), float64(peak)/(1<<20))
	if n := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'megabytes'"); n != 120 {
		t.Fatalf("stored %d findings, want all 120 as truncation records; runs %+v", n, e.runs("megabytes"))
	}
	if n := e.count("SELECT max(length(finding)) FROM hunt_findings_committed WHERE hunt_id = 'megabytes'"); n > DefaultMaxFindingBytes {
		t.Fatalf("a stored finding holds %d bytes, over the cap of %d", n, DefaultMaxFindingBytes)
	}
	var doc string
	e.scan(&doc, "SELECT any(finding) FROM hunt_findings_committed WHERE hunt_id = 'megabytes'")
	var rec struct {
		Bytes  int    `json:"hr_truncated_bytes"`
		Hash   string `json:"hr_hash"`
		Prefix string `json:"hr_prefix"`
	}
	if err := json.Unmarshal([]byte(doc), &rec); err != nil || rec.Bytes < 1000000 || rec.Hash == "" || !strings.HasPrefix(rec.Prefix, `{"n":`) {
		t.Fatalf("finding %.200q is not a truncation record of a 1 MB document (%v)", doc, err)
	}
	if n := e.count("SELECT sum(findings_dropped) FROM hunt_runs WHERE hunt_id = 'megabytes' AND status = 'succeeded'"); n != 0 {
		t.Fatalf("findings_dropped = %d, want 0 (every finding is kept, truncated)", n)
	}
	// Measured: about 19 MiB (the client allocates some 13 bytes per byte of findings it
	// decodes, keeps and encodes, most of it short-lived). Unbounded, the runner receives
	// 120 MB; with only the run cap, 8 MiB of whole documents.
	const bound = 48 << 20
	if allocated > bound {
		t.Fatalf("the runner allocated %d bytes during the run, want under %d", allocated, bound)
	}
}

// A run whose findings together exceed the run's byte cap stores them until the cap and
// records the rest as dropped; the runner never receives the rest.
func TestFindingsStopAtTheRunByteCap(t *testing.T) {
	e := newEnv(t)
	const runCap = 1 << 20
	h := hunt.Hunt{ID: "many", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), MaxFindings: hunt.MaxFindingsCeiling, Labels: map[string]string{"team": "a"},
		Query: "SELECT number AS n, repeat('y', 4000) AS pad FROM numbers(5000) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	r := e.runner("pod-a", testSet("x", h), func(o *Options) { o.MaxRunFindingsBytes = runCap })
	allocated, peak := heapDuring(func() { e.tickAndWait(r) })
	t.Logf("5000 findings of 4 KB under a 1 MiB run cap: the runner allocated %.1f MiB, live heap peaked %.1f MiB above its start",
		float64(allocated)/(1<<20), float64(peak)/(1<<20))
	stored := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'many'")
	bytes := e.count("SELECT sum(length(finding)) + count() * " + strconv.FormatInt(rowBytes(&h), 10) + " FROM hunt_findings_committed WHERE hunt_id = 'many'")
	if stored == 0 || bytes > runCap+DefaultMaxFindingBytes {
		t.Fatalf("stored %d findings of %d bytes, want some and at most the cap %d plus one finding", stored, bytes, runCap)
	}
	if bytes < runCap {
		t.Fatalf("stored %d bytes, want the rows up to the cap of %d", bytes, runCap)
	}
	if n := e.count("SELECT sum(findings_dropped) FROM hunt_runs WHERE hunt_id = 'many' AND status = 'succeeded'"); n != 5000-stored {
		t.Fatalf("findings_dropped = %d, want %d", n, 5000-stored)
	}
	// Measured: about 19 MiB. Unbounded, the server sends 20 MB in one block.
	const bound = 48 << 20
	if allocated > bound {
		t.Fatalf("the runner allocated %d bytes during the run, want under %d", allocated, bound)
	}
}

// The runner's reader applies the caps itself: fed a result nothing bounded (the statement's
// columns without its caps), it keeps no document over the per-finding cap, stops at the run
// cap, and counts every row it did not keep.
func TestReadFindingsBoundsAnUnboundedResult(t *testing.T) {
	e := newEnv(t)
	unbounded := "SELECT formatRowNoNewline('JSONEachRow', *) AS hr_finding, count() OVER () AS hr_total, toUInt64(0) AS hr_truncated, toUInt64(0) AS hr_before " +
		"FROM (SELECT number AS n, repeat('z', if(number % 10 = 0, 5000, 1000)) AS pad FROM numbers(1000)) ORDER BY cityHash64(hr_finding), hr_finding"
	rows, err := e.db.Conn.Query(clickhouse.Context(e.ctx), unbounded)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	caps := findingCaps{rows: 10000, findingMax: 2000, runMax: 100 << 10, rowBytes: 10}
	got, err := readFindings(rows, caps, nil)
	if err != nil {
		t.Fatal(err)
	}
	var kept int64
	for _, d := range got.docs {
		if int64(len(d)) > caps.findingMax {
			t.Fatalf("kept a document of %d bytes, over the per-finding cap %d", len(d), caps.findingMax)
		}
		kept += int64(len(d)) + caps.rowBytes
	}
	if kept < caps.runMax-caps.findingMax || kept > caps.runMax+caps.findingMax || got.bytes != kept {
		t.Fatalf("kept %d bytes (counted %d), want the run cap %d within one finding", kept, got.bytes, caps.runMax)
	}
	if got.total != 1000 || got.dropped != 1000-uint64(len(got.docs)) {
		t.Fatalf("total %d dropped %d with %d kept, want 1000 and the rest", got.total, got.dropped, len(got.docs))
	}
}
