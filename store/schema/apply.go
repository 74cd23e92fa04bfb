package schema

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ErrTopology means the server's shape is ambiguous; say --topology explicitly.
var ErrTopology = errors.New("cannot work out the ClickHouse topology")

// DetectTopology asks the server which engines the coordination tables need, first match wins:
//
//  1. ClickHouse Cloud (cloud_mode setting, SharedMergeTree available, or the database's engine
//     is Shared) → TopologyCloud;
//  2. database already exists with the Replicated engine → TopologyReplicated;
//  3. system.macros defines shard and replica, and system.clusters has cluster → TopologyCluster
//     (macros without that cluster is an ErrTopology: creating single-node tables on one
//     replica of a cluster would split the coordination state);
//  4. otherwise TopologySingle.
func DetectTopology(ctx context.Context, conn driver.Conn, database, cluster string) (Topology, error) {
	var cloud uint64
	// Cloud says so in a setting, and is the only build shipping SharedMergeTree.
	if err := conn.QueryRow(ctx,
		"SELECT (SELECT count() FROM system.settings WHERE name = 'cloud_mode' AND value IN ('1', 'true'))"+
			" + (SELECT count() FROM system.table_engines WHERE name = 'SharedMergeTree')").Scan(&cloud); err != nil {
		return "", fmt.Errorf("detect topology: read system.settings: %w", err)
	}
	if cloud > 0 {
		return TopologyCloud, nil
	}
	var engines []string
	if err := queryStrings(ctx, conn, &engines, "SELECT engine FROM system.databases WHERE name = ?", database); err != nil {
		return "", fmt.Errorf("detect topology: read system.databases: %w", err)
	}
	if len(engines) > 0 {
		switch engines[0] {
		case "Replicated":
			return TopologyReplicated, nil
		case "Shared":
			return TopologyCloud, nil
		}
	}
	var macros []string
	if err := queryStrings(ctx, conn, &macros, "SELECT macro FROM system.macros"); err != nil {
		return "", fmt.Errorf("detect topology: read system.macros: %w", err)
	}
	if slices.Contains(macros, "shard") && slices.Contains(macros, "replica") {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.clusters WHERE cluster = ?", cluster).Scan(&n); err != nil {
			return "", fmt.Errorf("detect topology: read system.clusters: %w", err)
		}
		if n == 0 {
			return "", fmt.Errorf("%w: the server defines {shard} and {replica} macros but has no cluster %q in system.clusters; pass --cluster NAME or --topology", ErrTopology, cluster)
		}
		return TopologyCluster, nil
	}
	return TopologySingle, nil
}

// Report says what Apply did.
type Report struct {
	Topology Topology
	Database string
	Created  []string // objects that did not exist before, in DDL order ("table hunt_runner.hunt_lease")
	Existing []string // objects that were already there
	// Mismatched lists tables whose engine is not what Topology asks for ("table db.t: engine
	// ReplacingMergeTree, want ReplicatedReplacingMergeTree"), e.g. tables created on one node
	// before the cluster was set up. Apply never alters them; an operator must migrate them.
	Mismatched []string
	// Upgraded lists what the upgrade of an older layout did ("added column …", "copied …").
	Upgraded []string
}

// Apply creates database and the coordination tables for topology t (TopologyAuto: asks
// DetectTopology), idempotently, and upgrades an older layout in place (migrate.go): missing
// columns are added, and a table whose key changed is moved aside and copied, never dropped.
// The report compares system.databases/system.tables before and after, so a second Apply
// reports nothing created.
func Apply(ctx context.Context, conn driver.Conn, database string, t Topology, cluster string) (Report, error) {
	rep := Report{Database: database, Topology: t}
	if t == TopologyAuto || t == "" {
		var err error
		if rep.Topology, err = DetectTopology(ctx, conn, database, cluster); err != nil {
			return rep, err
		}
	}
	stmts := DDL(database, rep.Topology, cluster)
	before, err := existing(ctx, conn, database)
	if err != nil {
		return rep, err
	}
	if before["table "+database+"."+TableSchema] {
		// A later release's layout may have moved or re-keyed tables this one would create
		// anew beside them: never downgrade.
		v, ok, err := RecordedLayout(ctx, conn, database)
		if err != nil {
			return rep, fmt.Errorf("apply schema: read %s: %w", TableSchema, err)
		}
		if ok && v > Version {
			return rep, fmt.Errorf("apply schema: %w: database %s has layout version %d, newer than this release's %d; "+
				"nothing changed: use a hunt-runner release of layout %d or later", ErrLayout, database, v, Version, v)
		}
	}
	onCluster := ""
	if rep.Topology == TopologyCluster {
		onCluster = " ON CLUSTER " + quoteString(cluster)
	}
	views := len(stmts) - 2 // the last two statements are the views, which read new columns
	for i, s := range stmts {
		if i == views {
			added, err := addMissingColumns(ctx, conn, database, onCluster)
			if err != nil {
				return rep, fmt.Errorf("apply schema: %w", err)
			}
			rep.Upgraded = append(rep.Upgraded, added...)
			replaced, err := refreshViews(ctx, conn, database, onCluster)
			if err != nil {
				return rep, fmt.Errorf("apply schema: %w", err)
			}
			rep.Upgraded = append(rep.Upgraded, replaced...)
		}
		if err := conn.Exec(ctx, s.SQL); err != nil {
			return rep, fmt.Errorf("apply schema: create %s: %w", s.Name, err)
		}
		if i == 0 { // the database exists now: move first-layout tables aside before creating
			moved, err := prepareUpgrade(ctx, conn, database, onCluster)
			if err != nil {
				return rep, fmt.Errorf("apply schema: %w", err)
			}
			for _, m := range moved {
				delete(before, "table "+database+"."+m)
				rep.Upgraded = append(rep.Upgraded, "moved "+m+" (version 1 layout) to "+legacyName(m))
			}
		}
	}
	did, err := finishUpgrade(ctx, conn, database, onCluster)
	if err != nil {
		return rep, fmt.Errorf("apply schema: %w", err)
	}
	rep.Upgraded = append(rep.Upgraded, did...)
	after, err := existing(ctx, conn, database)
	if err != nil {
		return rep, err
	}
	if rep.Mismatched, err = mismatched(ctx, conn, database, rep.Topology); err != nil {
		return rep, err
	}
	for _, s := range stmts {
		switch {
		case before[s.Name]:
			rep.Existing = append(rep.Existing, s.Name)
		case after[s.Name]:
			rep.Created = append(rep.Created, s.Name)
		default:
			// ON CLUSTER DDL may still be queued on this node; say so rather than claim success.
			return rep, fmt.Errorf("apply schema: %s still missing after CREATE", s.Name)
		}
	}
	return rep, nil
}

// refreshViews drops the views of an earlier release (their definition lacks its viewMarkers entry), so
// that the CREATE that follows makes the current ones. Views hold no data.
func refreshViews(ctx context.Context, conn driver.Conn, database, onCluster string) ([]string, error) {
	var did []string
	for _, v := range []string{ViewRuns, ViewFindingsCommitted} {
		var defs []string
		if err := queryStrings(ctx, conn, &defs, "SELECT create_table_query FROM system.tables WHERE database = ? AND name = ?", database, v); err != nil {
			return nil, fmt.Errorf("read view %s: %w", v, err)
		}
		if len(defs) == 0 || strings.Contains(defs[0], viewMarkers[v]) {
			continue
		}
		if err := conn.Exec(ctx, "DROP VIEW IF EXISTS "+QuoteIdent(database)+"."+QuoteIdent(v)+onCluster); err != nil {
			return nil, fmt.Errorf("replace view %s: %w", v, err)
		}
		did = append(did, "replaced view "+v+" by the current definition")
	}
	return did, nil
}

// Engines reads the engine of each coordination table that exists in database, by table name
// (empty before a first Apply). chstore picks a connection's consistency mode from it.
func Engines(ctx context.Context, conn driver.Conn, database string) (map[string]string, error) {
	rows, err := conn.Query(ctx, "SELECT name, engine FROM system.tables WHERE database = ? AND has(?, name)", database, TableNames())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			return nil, err
		}
		out[name] = engine
	}
	return out, rows.Err()
}

// mismatched compares the engines in system.tables with the ones topology t asks for.
func mismatched(ctx context.Context, conn driver.Conn, database string, t Topology) ([]string, error) {
	rows, err := conn.Query(ctx, "SELECT name, engine FROM system.tables WHERE database = ?", database)
	if err != nil {
		return nil, fmt.Errorf("apply schema: read system.tables: %w", err)
	}
	defer rows.Close()
	engines := map[string]string{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			return nil, fmt.Errorf("apply schema: read system.tables: %w", err)
		}
		engines[name] = engine
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("apply schema: read system.tables: %w", err)
	}
	var out []string
	for _, tb := range tables {
		got, ok := engines[tb.name]
		if !ok {
			continue
		}
		want := tb.engineName(t)
		// Cloud turns Replicated*MergeTree into Shared*MergeTree.
		if got == want || (t == TopologyCloud && got == "Shared"+strings.TrimPrefix(want, "Replicated")) {
			continue
		}
		out = append(out, fmt.Sprintf("table %s.%s: engine %s, want %s", database, tb.name, got, want))
	}
	return out, nil
}

// existing returns the Statement names of the objects that exist now.
func existing(ctx context.Context, conn driver.Conn, database string) (map[string]bool, error) {
	out := map[string]bool{}
	var dbs, tbls []string
	if err := queryStrings(ctx, conn, &dbs, "SELECT name FROM system.databases WHERE name = ?", database); err != nil {
		return nil, fmt.Errorf("apply schema: read system.databases: %w", err)
	}
	if len(dbs) == 0 {
		return out, nil
	}
	out["database "+database] = true
	if err := queryStrings(ctx, conn, &tbls, "SELECT name FROM system.tables WHERE database = ?", database); err != nil {
		return nil, fmt.Errorf("apply schema: read system.tables: %w", err)
	}
	for _, t := range tbls {
		out["table "+database+"."+t] = true
	}
	return out, nil
}

func queryStrings(ctx context.Context, conn driver.Conn, dst *[]string, query string, args ...any) error {
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		*dst = append(*dst, s)
	}
	return rows.Err()
}
