package schema

import (
	"slices"
	"strings"
)

// Table names of the coordination tables (docs/contracts.md).
const (
	TableSchedule  = "hunt_schedule"
	TablePublish   = "hunt_publish"
	TableLease     = "hunt_lease"
	TableWatermark = "hunt_watermark"
	TableState     = "hunt_state"
	TableRun       = "hunt_run"
	TableFindings  = "hunt_findings"
	TableRequest   = "hunt_request"
	// TablePause holds pause and resume rows; the newest row per hunt decides.
	TablePause = "hunt_pause"
	// TableSnooze holds snooze and unsnooze rows of hunts' notifications; the newest row per
	// hunt decides (notify mutes the hunt's deliveries while it is live).
	TableSnooze = "hunt_snooze"
	// TableBackfill holds backfill requests and their cancellations; the newest row per id decides.
	TableBackfill = "hunt_backfill"
	// TableSchema records the schema layout versions applied (see Apply and migrate.go).
	TableSchema = "hunt_schema"
	// TableHeartbeat holds one row per runner (owner), rewritten as it ticks; status lists the
	// runners whose last_tick is recent (docs/operations.md, Heartbeat).
	TableHeartbeat = "hunt_runner_heartbeat"
	// TableCheck holds the hunt revisions the server's containment check accepted, per check
	// scope, so a restart skips them (store.Store.CheckedHunts).
	TableCheck = "hunt_check"

	// TableDelivery and TableSuppress are written only by notify (docs/findings.md).
	TableDelivery = "hunt_delivery"
	TableSuppress = "hunt_suppress"

	// ViewRuns is the run log as people and status read it: hunt_run's failed and lost rows,
	// and a succeeded row (plus a gap row when a range was skipped) for every commit in
	// hunt_watermark. A commit is one row of one table, so a run is never committed without
	// its audit row, nor recorded as succeeded without having committed.
	ViewRuns = "hunt_runs"
	// ViewFindingsCommitted is hunt_findings narrowed to runs that committed: findings of an
	// attempt that crashed, lost its lease or was fenced (including an insert that landed
	// late) are never seen through it.
	ViewFindingsCommitted = "hunt_findings_committed"
)

// TableNames lists every coordination table in creation order.
func TableNames() []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.name
	}
	return out
}

// ObjectNames lists every object DDL creates in the database, tables then views, in order.
func ObjectNames() []string { return append(TableNames(), ViewRuns, ViewFindingsCommitted) }

// BackfillInfix joins a hunt id and a backfill id into the coordination key a backfill's chunks
// are claimed and committed under (BackfillKey). Hunt ids cannot contain '#' (configsrc), so the
// key never collides with a hunt and its hunt id is everything before the first '#'.
const BackfillInfix = "#backfill-"

// BackfillKey is the hunt_lease / hunt_watermark key of one backfill of huntID.
func BackfillKey(huntID, backfillID string) string { return huntID + BackfillInfix + backfillID }

// SplitBackfillKey returns the hunt and backfill ids of a BackfillKey; ok is false for a plain
// hunt id.
func SplitBackfillKey(key string) (huntID, backfillID string, ok bool) {
	i := strings.Index(key, BackfillInfix)
	if i < 0 {
		return key, "", false
	}
	return key[:i], key[i+len(BackfillInfix):], true
}

// Identity is one of the least-privilege ClickHouse identities `hunt-runner provision` creates
// to act on these tables.
type Identity string

// The identities that read or write hunt-runner's tables. The hunts identity has no access to
// them at all: hunt queries can neither read nor forge hunt-runner's state.
const (
	IdentityRunner       Identity = "runner"
	IdentityMaterialiser Identity = "materialiser"
	IdentityScaler       Identity = "scaler"
)

var (
	runnerOnly       = []Identity{IdentityRunner}
	materialiserOnly = []Identity{IdentityMaterialiser}
	// Every identity reads hunt_schema: the commands refuse a database of another layout
	// (CheckLayout).
	everyIdentity = []Identity{IdentityRunner, IdentityMaterialiser, IdentityScaler}
)

// Access is what one identity may do on one table: read it, and insert into it when Insert.
type Access struct {
	Table  string
	Insert bool
}

// Grants lists, in creation order, the tables id may read, and whether it may insert into each.
func Grants(id Identity) []Access {
	var out []Access
	for _, t := range tables {
		switch {
		case slices.Contains(t.writers, id):
			out = append(out, Access{Table: t.name, Insert: true})
		case slices.Contains(t.readers, id):
			out = append(out, Access{Table: t.name})
		}
	}
	return out
}
