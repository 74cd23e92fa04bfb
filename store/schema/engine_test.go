package schema_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// freshDatabase returns a database name that does not exist yet, dropped at cleanup, so Apply
// has the database itself to create.
func freshDatabase(t *testing.T, db *chtest.DB) string {
	t.Helper()
	name := db.Name + "_schema"
	t.Cleanup(func() {
		if err := db.Conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(name)); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}

func TestApplyTwiceIsNoOp(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	// replicated and cluster run through chlocal's rewrite of Replicated engines and ON CLUSTER
	// (on by default in cmd/chlocal); on a real single server they would need Keeper.
	topologies := []schema.Topology{schema.TopologyAuto, schema.TopologySingle, schema.TopologyReplicated, schema.TopologyCluster, schema.TopologyCloud}
	for _, topo := range topologies {
		t.Run(string(topo), func(t *testing.T) {
			name := freshDatabase(t, db)
			want := []string{"database " + name}
			for _, tb := range schema.ObjectNames() {
				want = append(want, "table "+name+"."+tb)
			}
			start := time.Now()
			rep, err := schema.Apply(ctx, db.Conn, name, topo, "default")
			if err != nil {
				t.Fatal(err)
			}
			first := time.Since(start)
			if !slices.Equal(rep.Created, want) || len(rep.Existing) != 0 {
				t.Fatalf("first Apply: created %v existing %v, want created %v", rep.Created, rep.Existing, want)
			}
			if topo == schema.TopologyAuto && rep.Topology != schema.TopologySingle {
				t.Errorf("auto resolved to %s on a single engine", rep.Topology)
			}
			start = time.Now()
			rep, err = schema.Apply(ctx, db.Conn, name, topo, "default")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("Apply: first %v, no-op %v", first.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			if len(rep.Created) != 0 || !slices.Equal(rep.Existing, want) {
				t.Fatalf("second Apply: created %v existing %v, want nothing created", rep.Created, rep.Existing)
			}
			// Mismatched must say exactly which tables lack the topology's engine. Through
			// chlocal's rewrite that is every table of the replicated topologies; on a real
			// replicated server, none.
			wantMismatch := 0
			for _, tb := range schema.TableNames() {
				var engine, sortingKey string
				if err := db.Conn.QueryRow(ctx, "SELECT engine, sorting_key FROM system.tables WHERE database = ? AND name = ?", name, tb).
					Scan(&engine, &sortingKey); err != nil {
					t.Fatalf("%s: %v", tb, err)
				}
				if !strings.HasSuffix(engine, "MergeTree") || sortingKey == "" {
					t.Errorf("%s: engine %q sorting key %q", tb, engine, sortingKey)
				}
				replicated := strings.HasPrefix(engine, "Replicated") || strings.HasPrefix(engine, "Shared")
				if replicated != (rep.Topology != schema.TopologySingle) {
					wantMismatch++
				}
			}
			if len(rep.Mismatched) != wantMismatch {
				t.Errorf("Mismatched = %q, want %d entries", rep.Mismatched, wantMismatch)
			}
			if rep.Topology == schema.TopologySingle && len(rep.Mismatched) != 0 {
				t.Errorf("single topology on a single engine reported mismatches: %q", rep.Mismatched)
			}
		})
	}
}

func TestDetectTopologySingleEngine(t *testing.T) {
	db := chtest.New(t)
	topo, err := schema.DetectTopology(context.Background(), db.Conn, db.Name, "default")
	if err != nil {
		t.Fatal(err)
	}
	if topo != schema.TopologySingle {
		t.Errorf("DetectTopology = %s on a single engine", topo)
	}
}

// sample returns a non-zero value of a schema column type, chosen to catch truncation
// (high bits, sub-second precision, NUL and quotes in strings).
func sample(t *testing.T, typ, col string, now time.Time) any {
	switch typ {
	case "String":
		return "v-" + col + "\x00'\"\n\tü"
	case "LowCardinality(String)":
		return "lc-" + col
	case "UInt8":
		return uint8(1)
	case "UInt32":
		return uint32(4_000_000_000)
	case "UInt64":
		return uint64(1<<63 + 12345)
	case "UUID":
		return uuid.New()
	case "DateTime('UTC')":
		return now.Truncate(time.Second)
	case "DateTime64(6, 'UTC')":
		return now.Truncate(time.Microsecond)
	case "DateTime64(3, 'UTC')":
		return now.Truncate(time.Millisecond)
	case "Map(String, String)":
		return map[string]string{"env": "prod", "quote": "it's"}
	case "Array(String)":
		return []string{"T1110.003", "it's\x00"}
	case "Map(String, UInt64)":
		return map[string]uint64{"corp-scanners#1": 1<<63 + 7, "it's": 1}
	}
	t.Fatalf("no sample for column type %s; add one", typ)
	return nil
}

// Every column round-trips through a batch insert that takes its types from the schema.
func TestEveryTableRoundTripsEveryColumnType(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, db.Conn, db.Name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	// Rows near now, so that no TTL considers them expired.
	now := time.Now().UTC().Add(time.Minute)
	for _, table := range schema.TableNames() {
		t.Run(table, func(t *testing.T) {
			cols := columns(t, db.Conn, db.Name, table)
			// Apply itself writes some tables (hunt_schema's version row): read back only ours.
			if err := db.Conn.Exec(ctx, fmt.Sprintf("TRUNCATE TABLE %s.%s", schema.QuoteIdent(db.Name), table)); err != nil {
				t.Fatal(err)
			}
			row := make([]any, len(cols))
			for i, c := range cols {
				row[i] = sample(t, c[1], c[0], now)
			}
			// The batch carries the schema's declared types (schema.Insert), not the server's:
			// they must be the server's exactly.
			names := make([]string, len(cols))
			for i, c := range cols {
				names[i] = c[0]
				if typ := schema.ColumnType(table, c[0]); typ != c[1] {
					t.Errorf("%s: declared %s, the server has %s", c[0], typ, c[1])
				}
			}
			ictx, insert := schema.Insert(ctx, db.Name, table, names...)
			batch, err := db.Conn.PrepareBatch(ictx, insert)
			if err != nil {
				t.Fatal(err)
			}
			if err := batch.Append(row...); err != nil {
				t.Fatal(err)
			}
			if err := batch.Send(); err != nil {
				t.Fatal(err)
			}
			dest := make([]any, len(cols))
			for i := range cols {
				dest[i] = reflect.New(reflect.TypeOf(row[i])).Interface()
			}
			query := fmt.Sprintf("SELECT %s FROM %s.%s", strings.Join(names, ", "), schema.QuoteIdent(db.Name), table)
			if err := db.Conn.QueryRow(ctx, query).Scan(dest...); err != nil {
				t.Fatal(err)
			}
			for i := range cols {
				got := reflect.ValueOf(dest[i]).Elem().Interface()
				if gt, ok := got.(time.Time); ok {
					if !gt.Equal(row[i].(time.Time)) {
						t.Errorf("%s %s: got %v, want %v", cols[i][0], cols[i][1], gt, row[i])
					}
					continue
				}
				if !reflect.DeepEqual(got, row[i]) {
					t.Errorf("%s %s: got %#v, want %#v", cols[i][0], cols[i][1], got, row[i])
				}
			}
		})
	}
}

// columns lists (name, type) of a table in order, as the server reports them.
func columns(t *testing.T, conn driver.Conn, database, table string) [][2]string {
	t.Helper()
	rows, err := conn.Query(context.Background(),
		"SELECT name, type FROM system.columns WHERE database = ? AND table = ? ORDER BY position", database, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var c [2]string
		if err := rows.Scan(&c[0], &c[1]); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("table %s has no columns", table)
	}
	return out
}
