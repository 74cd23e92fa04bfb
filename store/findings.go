package store

import (
	"context"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/go-faster/city"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Findings is what one attempt of a hunt found, as hunt_findings stores it: one row per
// document, keyed by the attempt's run id. They are visible through hunt_findings_committed
// only once the run commits.
type Findings struct {
	HuntID   string
	Fire     int64 // epoch seconds
	RunID    uuid.UUID
	Severity string
	Labels   map[string]string // nil: none
	Docs     []string          // the findings' JSON documents, distinct, within the caps the runner applied
	Found    time.Time         // when the run found them (the runner's clock)
	// LogComment and QueryID attribute the insert to its run (internal/attrib); empty: the
	// connection's comment and the driver's random id.
	LogComment, QueryID string
	// Workload is the run's workload class (the workload setting); empty: none.
	Workload string
	// Explained is what the hunt's explain keys made of each document (hunt.Explainer), one
	// per Docs entry; nil stores each with the hunt's Severity and no title or dedup key.
	Explained []hunt.Explained
	Runbook   string
	Mitre     []string
	Revision  string // hunt.Hunt.Revision of the definition that ran
}

// InsertFindings writes f's documents into hunt_findings in one insert (none when f has no
// documents). finding_id is cityHash64 of the document. The deduplication token is the run id,
// so a retry of the same insert is a no-op on replicated tables, and the table's key collapses
// it on any other. The error is the driver's, unwrapped: whether it is safe to send again is
// the caller's decision (lease.Refused: the server executed nothing).
func (s *Store) InsertFindings(ctx context.Context, f Findings) error {
	if len(f.Docs) == 0 {
		return nil
	}
	labels := f.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	settings := clickhouse.Settings{"async_insert": 0, "insert_deduplication_token": "findings:" + f.RunID.String()}
	if f.LogComment != "" {
		settings["log_comment"] = f.LogComment
	}
	if f.Workload != "" {
		settings["workload"] = f.Workload
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(settings), clickhouse.WithQueryID(f.QueryID))
	ctx, insert := schema.Insert(ctx, s.database, schema.TableFindings,
		"hunt_id", "fire", "finding_id", "finding", "severity", "labels", "run_id", "found",
		"title", "dedup_key", "runbook", "mitre", "revision")
	batch, err := s.conn.PrepareBatch(ctx, insert)
	if err != nil {
		return err
	}
	defer func() { _ = batch.Abort() }()
	when := time.Unix(f.Fire, 0).UTC()
	found := f.Found.UTC()
	mitre := f.Mitre
	if mitre == nil {
		mitre = []string{}
	}
	for i, d := range f.Docs {
		e := hunt.Explained{Severity: f.Severity}
		if i < len(f.Explained) {
			e = f.Explained[i]
		}
		// city.CH64 is ClickHouse's cityHash64, so finding_id = cityHash64(finding).
		if err := batch.Append(f.HuntID, when, city.CH64([]byte(d)), d, e.Severity, labels, f.RunID, found,
			e.Title, e.DedupKey, f.Runbook, mitre, f.Revision); err != nil {
			return err
		}
	}
	return batch.Send()
}

// CommittedFindingsOfRun reads at most limit findings of one committed run
// (hunt_findings_committed), ordered by document.
func (s *Store) CommittedFindingsOfRun(ctx context.Context, huntID string, runID uuid.UUID, limit int) ([]string, error) {
	rows, err := s.conn.Query(ctx, "SELECT finding FROM "+schema.QuoteIdent(s.database)+"."+schema.ViewFindingsCommitted+
		" WHERE hunt_id = ? AND run_id = ? ORDER BY finding LIMIT ?", huntID, runID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var f string
		if rows.Scan(&f) == nil {
			out = append(out, f)
		}
	}
	return out, rows.Err()
}

// RecentFindingsSQL is a statement that reads the newest committed findings of database: what
// `dev` prints for a newcomer to paste into a ClickHouse client.
func RecentFindingsSQL(database string) string {
	return "SELECT fire, hunt_id, finding FROM " + schema.QuoteIdent(database) + "." + schema.ViewFindingsCommitted +
		" ORDER BY fire DESC, hunt_id LIMIT 20"
}

// FindingsTables names database's findings table and its committed view as a person writes
// them in a query (dev's how-to prints them).
func FindingsTables(database string) (all, committed string) {
	return database + "." + schema.TableFindings, database + "." + schema.ViewFindingsCommitted
}
