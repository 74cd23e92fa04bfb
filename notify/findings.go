package notify

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// CommittedFindingsSQL selects the committed findings of fires since {since:Int64} (epoch
// seconds), optionally of one hunt ({hunt:String}, ” for all), newest fire first. A finding is
// committed when hunt_watermark holds its (hunt_id, fire, run_id): rows of attempts that never
// committed are left out, and a retried insert's duplicates are read once (LIMIT 1 BY). A
// backfill chunk commits under schema.BackfillKey; its findings are the hunt's.
// docs/findings.md shows the same statement for Grafana.
func CommittedFindingsSQL(database string) string {
	db := schema.QuoteIdent(database)
	return `SELECT f.hunt_id, f.fire, f.finding_id, f.finding, f.severity, f.labels, f.found,
    f.title, f.dedup_key, f.runbook, f.mitre, f.revision
FROM ` + db + `.` + schema.QuoteIdent(schema.TableFindings) + ` AS f
WHERE f.fire >= toDateTime({since:Int64}, 'UTC') AND ({hunt:String} = '' OR f.hunt_id = {hunt:String})
  AND (f.hunt_id, f.fire, f.run_id) IN (
        SELECT splitByChar('#', hunt_id)[1], watermark, run_id FROM ` + db + `.` + schema.QuoteIdent(schema.TableWatermark) + `
        WHERE watermark >= toDateTime({since:Int64}, 'UTC'))
ORDER BY f.fire DESC, f.hunt_id, f.finding_id
LIMIT 1 BY f.hunt_id, f.fire, f.finding_id
LIMIT {limit:UInt32}`
}

// Finding is one committed finding.
type Finding struct {
	HuntID    string            `json:"hunt_id"`
	Fire      time.Time         `json:"fire"`
	FindingID uint64            `json:"finding_id"`
	Finding   json.RawMessage   `json:"finding"`
	Severity  string            `json:"severity"`
	Labels    map[string]string `json:"labels"`
	Found     time.Time         `json:"found"`
	// What the hunt's explain keys made of the row ("" and [] when it sets none, and on rows
	// stored before they existed), and the hunt's revision that found it (hunt.Hunt.Revision).
	Title    string   `json:"title"`
	DedupKey string   `json:"dedup_key"`
	Runbook  string   `json:"runbook"`
	Mitre    []string `json:"mitre"`
	Revision string   `json:"revision"`
}

// Findings reads committed findings of fires at or after since, newest first, at most limit.
func Findings(ctx context.Context, conn driver.Conn, database, huntID string, since time.Time, limit int) ([]Finding, error) {
	rows, err := conn.Query(ctx, CommittedFindingsSQL(database), clickhouse.Named("since", since.Unix()),
		clickhouse.Named("hunt", huntID), clickhouse.Named("limit", uint32(limit)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Finding{}
	for rows.Next() {
		var f Finding
		var raw string
		if err := rows.Scan(&f.HuntID, &f.Fire, &f.FindingID, &raw, &f.Severity, &f.Labels, &f.Found,
			&f.Title, &f.DedupKey, &f.Runbook, &f.Mitre, &f.Revision); err != nil {
			return nil, err
		}
		if !json.Valid([]byte(raw)) {
			b, _ := json.Marshal(raw)
			raw = string(b)
		}
		f.Finding = json.RawMessage(raw)
		out = append(out, f)
	}
	return out, rows.Err()
}
