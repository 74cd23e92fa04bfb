package configsrc

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// BenchmarkExceptionsStatement times the findings statement over a hunt result of 200,000 rows
// (max_findings 1000), without exceptions (FindingsQuery) and with two live ones, a value
// match removing a seventh of the rows and a range match with a where:. docs/hunts.md quotes
// the figures.
func BenchmarkExceptionsStatement(b *testing.B) {
	db := chtest.New(b)
	ctx := context.Background()
	q := "SELECT concat('host-', toString(number % 7)) AS user, number AS n, toIPv4(167772160 + number % 256) AS ip " +
		"FROM numbers(200000) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"
	live := []hunt.Exception{
		{ID: "a", Match: []hunt.ExceptionMatch{{Column: "user", Values: []string{"host-3"}}}},
		{ID: "b", Match: []hunt.ExceptionMatch{{Column: "ip", Ranges: []string{"10.0.0.128/25"}}}, Where: "n % 2 = 0"},
	}
	for _, tc := range []struct {
		name string
		live []hunt.Exception
	}{{"none", nil}, {"two-live", live}} {
		b.Run(tc.name, func(b *testing.B) {
			stmt, extra := ExceptionsQuery(q, tc.live)
			params := clickhouse.Parameters{"window_start": "946684800", "window_end": "946684801", ParamLimit: "1003",
				ParamMaxFindingBytes: "65536", ParamMaxRunBytes: "8388608", ParamRowBytes: "64"}
			for k, v := range extra {
				params[k] = v
			}
			qctx := clickhouse.Context(ctx, clickhouse.WithParameters(params))
			start := time.Now()
			for range b.N {
				rows, err := db.Conn.Query(qctx, stmt)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for rows.Next() {
					n++
				}
				rows.Close()
				if n == 0 {
					b.Fatal("no rows")
				}
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/statement")
		})
	}
}
