package store

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// ViewBacklog is the view the scaler identity reads: one row, one column `value`, the number
// of due hunts capped at BacklogCap. The suffix versions that meaning. It lives here rather
// than in store/schema because its body is the due SQL (due.go), which schema cannot import.
const ViewBacklog = "hunt_backlog_v1"

// BacklogCap bounds the number the view returns, so that a runaway schedule cannot ask for an
// absurd replica count (KEDA's maxReplicaCount is the real bound).
const BacklogCap = 100000

// BacklogViewSelect is the body of the backlog view: the due count (the same SQL `hunt-runner
// due` runs), capped, as one non-negative integer named value.
func BacklogViewSelect(database string) string {
	return fmt.Sprintf("SELECT toUInt64(least(due, %d)) AS value FROM (\n%s\n)", BacklogCap, DueCountSQL(database, "now()"))
}

// BacklogViewSQL creates or refreshes the backlog view (cluster, when not empty, adds ON
// CLUSTER), so the shim and KEDA read the true backlog before any identity exists, and a later
// `hunt-runner schema` picks up a changed due query. The definer (whoever applies the schema)
// reads the coordination tables on the scaler's behalf: the scaler gets no table privilege.
func BacklogViewSQL(database, cluster string) string {
	on := ""
	if cluster != "" {
		on = " ON CLUSTER " + schema.QuoteIdent(cluster)
	}
	return fmt.Sprintf("CREATE OR REPLACE VIEW %s.%s%s\nDEFINER = CURRENT_USER SQL SECURITY DEFINER\nAS %s",
		schema.QuoteIdent(database), schema.QuoteIdent(ViewBacklog), on, BacklogViewSelect(database))
}

// BacklogViewStatement is BacklogViewSQL as one step of the schema script, on topology topo
// (ON CLUSTER only for TopologyCluster).
func BacklogViewStatement(database string, topo schema.Topology, cluster string) schema.Statement {
	if topo != schema.TopologyCluster {
		cluster = ""
	}
	return schema.Statement{Name: "view " + database + "." + ViewBacklog, SQL: BacklogViewSQL(database, cluster)}
}

// ApplyBacklogView creates or replaces the backlog view after schema.Apply, reporting whether
// it existed before. It is always replaced, never only created: a newer release's due query
// must reach the view.
func ApplyBacklogView(ctx context.Context, conn driver.Conn, database string, topo schema.Topology, cluster string) (st schema.Statement, existed bool, err error) {
	st = BacklogViewStatement(database, topo, cluster)
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", database, ViewBacklog).Scan(&n); err != nil {
		return st, false, fmt.Errorf("apply schema: read system.tables: %w", err)
	}
	if err := conn.Exec(ctx, st.SQL); err != nil {
		return st, false, fmt.Errorf("apply schema: create %s (needs CREATE VIEW, and a server with SQL SECURITY DEFINER views, "+
			"ClickHouse 24.3 or newer): %w", st.Name, err)
	}
	return st, n > 0, nil
}

// BacklogValueSQL is the scaler's read of the view: the one statement the scaler identity may
// run against the coordination database.
func BacklogValueSQL(database string) string {
	return "SELECT value FROM " + schema.QuoteIdent(database) + "." + schema.QuoteIdent(ViewBacklog)
}

// BacklogPrivilege is the scaler's privilege on the view, for provision's GRANT.
func BacklogPrivilege(database string) string {
	return "SELECT ON " + schema.QuoteIdent(database) + "." + schema.QuoteIdent(ViewBacklog)
}
