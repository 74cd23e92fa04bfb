package shim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBuiltinCatalogue(t *testing.T) {
	c, err := LoadCatalogue(nil, "", CatalogueOptions{Database: "coord", OtelDatabase: "telemetry"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(c.Names(), ","), "hunt-backlog,hunt-backlog-direct,pressure"; got != want {
		t.Fatalf("names %s, want %s", got, want)
	}
	backlog, _ := c.Lookup("hunt-backlog")
	if backlog.SQL != "SELECT value FROM `coord`.`hunt_backlog_v1`" {
		t.Errorf("hunt-backlog SQL = %q", backlog.SQL)
	}
	if backlog.Timeout != DefaultTimeout || backlog.MaxStale != DefaultMaxStale || backlog.ColdHold != 0 {
		t.Errorf("hunt-backlog defaults: %+v", backlog)
	}
	if backlog.Clamp(-3) != 0 || backlog.Clamp(1e9) != 100000 {
		t.Errorf("hunt-backlog clamp: %v %v", backlog.Clamp(-3), backlog.Clamp(1e9))
	}
	direct, _ := c.Lookup("hunt-backlog-direct")
	if !strings.Contains(direct.SQL, "`coord`.") || !strings.Contains(direct.SQL, "AS due") {
		t.Errorf("hunt-backlog-direct is not the schedule package's due SQL on coord:\n%s", direct.SQL)
	}
	p, _ := c.Lookup("pressure")
	if !strings.Contains(p.SQL, "FROM `telemetry`.otel_metrics_gauge") || strings.Contains(p.SQL, dbPlaceholder) {
		t.Errorf("pressure SQL database not resolved:\n%s", p.SQL)
	}
	if strings.Join(p.Params, ",") != "service" || p.Binds["window_seconds"] != "60" {
		t.Errorf("pressure params %v binds %v", p.Params, p.Binds)
	}
	if p.Clamp(250) != 100 || p.Clamp(-1) != 0 {
		t.Errorf("pressure clamp")
	}
}

func TestCatalogueOverrideMerges(t *testing.T) {
	override := `
queries:
  pressure:
    params: [app]
    binds: {threshold: 5}
    sql: |
      SELECT count() FROM __DB__.otel_metrics_gauge
      WHERE ServiceName = {app:String} AND TimeUnix >= now() - INTERVAL {window_seconds:UInt32} SECOND
        AND Value > {threshold:Float64}
    timeout: 750ms
  hunt-backlog:
    builtin: due_count
    max_stale: 1m
  findings-last-hour:
    database: audit
    sql: SELECT count() FROM __DB__.hunt_findings WHERE found > now() - INTERVAL 1 HOUR
    cold_hold: 1
`
	c, err := LoadCatalogue([]byte(override), "queries.yaml", CatalogueOptions{Database: "coord", Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Lookup("pressure")
	// params (a list) replaced; binds (a map) merged, the built-in window_seconds survives.
	if strings.Join(p.Params, ",") != "app" || p.Binds["window_seconds"] != "60" || p.Binds["threshold"] != "5" {
		t.Errorf("pressure params %v binds %v", p.Params, p.Binds)
	}
	if p.Timeout != 750*time.Millisecond || p.ClampMax == nil || *p.ClampMax != 100 {
		t.Errorf("pressure timeout %v clamp_max %v", p.Timeout, p.ClampMax)
	}
	if !strings.Contains(p.SQL, "FROM `otel`.otel_metrics_gauge") {
		t.Errorf("pressure database: %s", p.SQL)
	}
	b, _ := c.Lookup("hunt-backlog")
	if !strings.Contains(b.SQL, "AS due") || b.MaxStale != time.Minute || b.Timeout != 3*time.Second {
		t.Errorf("hunt-backlog after override: %+v", b)
	}
	f, ok := c.Lookup("findings-last-hour")
	if !ok || f.ColdHold != 1 || !strings.Contains(f.SQL, "`audit`.hunt_findings") {
		t.Errorf("added query: %+v", f)
	}
	// An override naming builtin clears an inherited sql.
	c, err = LoadCatalogue([]byte("queries:\n  pressure:\n    builtin: due_count\n    params: []\n    binds: {}\n"), "o", CatalogueOptions{})
	if err == nil {
		p, _ := c.Lookup("pressure")
		t.Fatalf("a builtin with the built-in window_seconds bind still declared should not validate: %+v", p)
	}
}

func TestCatalogueRejects(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"not yaml", "queries: [", "queries.yaml"},
		{"unknown field", "queries:\n  pressure:\n    sqll: SELECT 1\n", "field sqll not found"},
		{"bare number timeout", "queries:\n  pressure:\n    timeout: 5\n", "want a duration"},
		{"both sql and builtin", "queries:\n  x:\n    sql: SELECT 1\n    builtin: due_count\n    database: a\n", "not both"},
		{"unknown builtin", "queries:\n  x:\n    builtin: nope\n    database: a\n", `unknown builtin "nope"`},
		{"neither", "queries:\n  x:\n    clamp_min: 1\n", "set sql or builtin"},
		{"undeclared placeholder", "queries:\n  x:\n    sql: SELECT {who:String}\n", "{who:…} which is neither"},
		{"unused param", "queries:\n  x:\n    sql: SELECT 1\n    params: [who]\n", `"who" is declared but`},
		{"param value rule", "queries:\n  x:\n    sql: SELECT {a-b:String}\n    params: [a-b]\n", "param \"a-b\" must match"},
		{"param and bind", "queries:\n  x:\n    sql: SELECT {a:String}\n    params: [a]\n    binds: {a: 1}\n", "both a param and a bind"},
		{"bad database", "queries:\n  x:\n    sql: SELECT 1 FROM __DB__.t\n    database: 'a;b'\n", "database \"a;b\" must match"},
		{"database unused", "queries:\n  x:\n    sql: SELECT 1\n    database: a\n", "never uses __DB__"},
		{"__DB__ without database", "queries:\n  x:\n    sql: SELECT 1 FROM __DB__.t\n", "no database is set"},
		{"clamps crossed", "queries:\n  x:\n    sql: SELECT 1\n    clamp_min: 5\n    clamp_max: 1\n", "clamp_min 5 > clamp_max 1"},
		{"cold hold outside", "queries:\n  x:\n    sql: SELECT 1\n    clamp_max: 1\n    cold_hold: 2\n", "cold_hold 2 is outside"},
		{"tiny timeout", "queries:\n  x:\n    sql: SELECT 1\n    timeout: 1ms\n", "within [50ms, 1m]"},
		{"bad name", "queries:\n  X Y:\n    sql: SELECT 1\n", "name must match"},
		{"empty query", "queries:\n  x:\n", `query "x" is empty`},
		{"bind of a list", "queries:\n  x:\n    sql: SELECT {a:String}\n    binds: {a: [1]}\n", "want a string, number or bool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCatalogue([]byte(tc.yaml), "queries.yaml", CatalogueOptions{})
			if !errors.Is(err, ErrCatalogue) {
				t.Fatalf("err = %v, want ErrCatalogue", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestCatalogueErrorHasLine(t *testing.T) {
	_, err := LoadCatalogue([]byte("queries:\n  pressure:\n    clamp_max: 10\n    colld_hold: 1\n"), "/etc/shim/queries.yaml", CatalogueOptions{})
	if err == nil || !strings.Contains(err.Error(), "/etc/shim/queries.yaml") || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("err = %v, want the file and line 4", err)
	}
}

func TestCanonicalParams(t *testing.T) {
	a := canonicalParams(map[string]string{"b": "2", "a": "1"})
	b := canonicalParams(map[string]string{"a": "1", "b": "2"})
	if a != b || a != "a=1&b=2" {
		t.Fatalf("canonical %q %q", a, b)
	}
}

// TestBadCatalogueRefusesToStart needs no engine: New never touches ClickHouse.
func TestBadCatalogueRefusesToStart(t *testing.T) {
	_, err := New(Options{Conn: stalled{}, Override: []byte("queries:\n  extra:\n    sql: SELECT {nope:String}\n"), OverrideSource: "/etc/shim/queries.yaml"})
	if err == nil || !strings.Contains(err.Error(), "/etc/shim/queries.yaml") || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("New = %v, want a catalogue error naming the file and the parameter", err)
	}
}
