package chstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// DefaultFindingsTTLDays is how long findings are kept unless `schema --findings-ttl` says
// otherwise; the DDL creates hunt_findings with it (as hunt_run keeps its rows).
const DefaultFindingsTTLDays = 90

// findingsTTL is hunt_findings' TTL expression for days, as the DDL writes it.
func findingsTTL(days int) string { return fmt.Sprintf("toDateTime(found) + INTERVAL %d DAY", days) }

// findingsTTLShown is the same expression as the server shows it in system.tables.engine_full.
func findingsTTLShown(days int) string {
	return fmt.Sprintf("toDateTime(found) + toIntervalDay(%d)", days)
}

// ApplyFindingsTTL sets hunt_findings' TTL to days when the table's differs, and returns what
// it did ("" when the TTL already was days). The change is metadata only
// (materialize_ttl_after_modify = 0): existing parts are not rewritten, their rows expire as
// merges reach them, so a shorter TTL on a large table costs no immediate mutation.
func ApplyFindingsTTL(ctx context.Context, conn driver.Conn, database string, t Topology, cluster string, days int) (string, error) {
	if days < 1 {
		return "", fmt.Errorf("findings TTL: %d day(s), want at least 1", days)
	}
	var engine string
	if err := conn.QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?",
		database, TableFindings).Scan(&engine); err != nil {
		return "", fmt.Errorf("findings TTL: read %s from system.tables: %w", TableFindings, err)
	}
	current := ttlClause(engine)
	if current == findingsTTLShown(days) {
		return "", nil
	}
	if err := conn.Exec(ctx, FindingsTTLStatement(database, t, cluster, days).SQL); err != nil {
		return "", fmt.Errorf("findings TTL: modify %s: %w", TableFindings, err)
	}
	if current == "" {
		current = "none"
	}
	return fmt.Sprintf("changed %s TTL from %s to %s (existing parts expire as they merge)", TableFindings, current, findingsTTLShown(days)), nil
}

// FindingsTTLStatement is the ALTER that ApplyFindingsTTL runs, for `schema --print`.
func FindingsTTLStatement(database string, t Topology, cluster string, days int) Statement {
	onCluster := ""
	if t == TopologyCluster {
		onCluster = " ON CLUSTER " + quoteString(cluster)
	}
	return Statement{
		Name: "findings retention " + database + "." + TableFindings,
		SQL: "ALTER TABLE " + QuoteIdent(database) + "." + QuoteIdent(TableFindings) + onCluster +
			" MODIFY TTL " + findingsTTL(days) + " SETTINGS materialize_ttl_after_modify = 0",
	}
}

// ttlClause is the table TTL in an engine_full text, "" when there is none.
func ttlClause(engine string) string {
	_, rest, ok := strings.Cut(engine, " TTL ")
	if !ok {
		return ""
	}
	ttl, _, _ := strings.Cut(rest, " SETTINGS ")
	return strings.TrimSpace(ttl)
}
