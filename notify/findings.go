package notify

import (
	"context"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/store"
)

// CommittedFindingsSQL is store.CommittedFindingsSQL: the statement behind Findings, which
// docs/findings.md shows for Grafana.
func CommittedFindingsSQL(database string) string { return store.CommittedFindingsSQL(database) }

// Finding is one committed finding.
type Finding = store.CommittedFinding

// Findings reads committed findings of fires at or after since, newest first, at most limit.
func Findings(ctx context.Context, conn driver.Conn, database, huntID string, since time.Time, limit int) ([]Finding, error) {
	return store.New(conn, database).CommittedFindings(ctx, huntID, since, limit)
}
