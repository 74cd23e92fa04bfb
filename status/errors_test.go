package status

import (
	"context"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// TestCleanErrorOnTheEngine runs hunts as the runner wraps them and checks what a person reads:
// the server's cause in full, with neither the driver's framing, the version, nor the wrapping
// statement, and a syntax error at the line of the hunt's own query.
func TestCleanErrorOnTheEngine(t *testing.T) {
	db := chtest.New(t)
	ctx := clickhouse.Context(context.Background(), clickhouse.WithParameters(clickhouse.Parameters{configsrc.ParamLimit: "10",
		configsrc.ParamMaxFindingBytes: "65536", configsrc.ParamMaxRunBytes: "1048576", configsrc.ParamRowBytes: "0"}))
	for q, want := range map[string]string{
		"SELECT * FROM nodb.t":                      "Code 81: Database nodb does not exist (UNKNOWN_DATABASE)",
		"SELECT 1 AS n\nFROM sample..x\nWHERE 1":    "Code 62: Syntax error: failed at (.) (line 2, col 13 of the hunt's query). Expected one of: Colon, Caret, At, identifier (SYNTAX_ERROR)",
		"SELECT count() AS n FROM system.one WHERE": "Code 62: Syntax error: failed at the end of the hunt's query. Expected one of: expression",
	} {
		rows, err := db.Conn.Query(ctx, configsrc.FindingsQuery(q))
		if err == nil {
			rows.Close()
			t.Fatalf("%q ran", q)
		}
		got := CleanError("hunt query: " + err.Error())
		if !strings.HasPrefix(got, "hunt query: "+want) {
			t.Errorf("%q:\n got %q\nwant %q…\n raw %q", q, got, want, err.Error())
		}
		for _, bad := range []string{"sendQuery", "HTTP 4", "version", "hr_finding", "hr_limit", "cityHash64"} {
			if strings.Contains(got, bad) {
				t.Errorf("%q: %q still has %q", q, got, bad)
			}
		}
	}
}
