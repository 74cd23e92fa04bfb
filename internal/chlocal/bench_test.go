package chlocal_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// BenchmarkSelect1 measures a SELECT 1 round trip through clickhouse-go
// over HTTP and reports p50/p90 latency and the chlocal process's memory.
func BenchmarkSelect1(b *testing.B) {
	db := chtest.New(b)
	ctx := context.Background()
	if err := db.Conn.Ping(ctx); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		var v uint8
		if err := db.Conn.QueryRow(ctx, "SELECT 1").Scan(&v); err != nil || v != 1 {
			b.Fatalf("SELECT 1 = %d, %v", v, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
	reportMemory(b, db.URL)
}

// BenchmarkInsertBatch1000 measures a 1,000-row Native batch insert.
func BenchmarkInsertBatch1000(b *testing.B) {
	db := chtest.New(b)
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "CREATE TABLE bi (id UInt64, s String, ts DateTime64(6, 'UTC')) ENGINE = MergeTree ORDER BY id"); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for b.Loop() {
		batch, err := db.Conn.PrepareBatch(ctx, "INSERT INTO bi")
		if err != nil {
			b.Fatal(err)
		}
		for i := range 1000 {
			if err := batch.Append(uint64(i), "hunt-finding-payload", now); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportMemory(b, db.URL)
}

func reportMemory(b *testing.B, url string) {
	if os.Getenv(chtest.EnvURL) != "" {
		return
	}
	resp, err := http.Get(url + "/chlocal/stats")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		RSS int64 `json:"rss_bytes"`
		HWM int64 `json:"max_rss_bytes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.RSS)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(st.HWM)/(1<<20), "peak-rss-MiB")
}
