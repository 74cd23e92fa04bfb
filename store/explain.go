package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// LatestFinding is one committed finding as the status page lists it.
type LatestFinding struct {
	Fire     time.Time
	Found    time.Time
	Title    string
	Severity string
	Revision string
	Finding  string // the JSON document, as stored
}

// latestFindingsSQL is the newest committed findings of one hunt ({h:String}), at most
// {n:UInt32}; LIMIT 1 BY reads a retried insert's duplicate once.
func latestFindingsSQL(db, huntID, limit string) string {
	return `SELECT fire, found, title, severity, revision, finding
FROM ` + schema.QuoteIdent(db) + `.` + schema.ViewFindingsCommitted + `
WHERE hunt_id = ` + huntID + `
ORDER BY fire DESC, finding_id
LIMIT 1 BY fire, finding_id
LIMIT ` + limit
}

// LatestFindings reads the newest limit committed findings of huntID, newest fire first.
func (s *Store) LatestFindings(ctx context.Context, huntID string, limit int) ([]LatestFinding, error) {
	rows, err := s.conn.Query(ctx, latestFindingsSQL(s.database, "{h:String}", "{n:UInt32}"),
		clickhouse.Named("h", huntID), clickhouse.Named("n", uint32(limit)))
	if err != nil {
		return nil, fmt.Errorf("read hunt_findings_committed: %w", err)
	}
	defer rows.Close()
	var out []LatestFinding
	for rows.Next() {
		var f LatestFinding
		if err := rows.Scan(&f.Fire, &f.Found, &f.Title, &f.Severity, &f.Revision, &f.Finding); err != nil {
			return nil, fmt.Errorf("read hunt_findings_committed: %w", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// LatestFindingsQuery is LatestFindings' statement with its values written in, for a person
// to run in a ClickHouse client (the status page's link): it names only the database, the
// hunt id and the limit, nothing secret.
func LatestFindingsQuery(database, huntID string, limit int) string {
	return latestFindingsSQL(database, quoteString(huntID), strconv.Itoa(limit))
}

// quoteString is s as a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
