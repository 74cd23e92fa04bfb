package schema

import (
	"fmt"
	"strings"
)

// Version is the layout DDL creates and Apply upgrades to. Version 1 is the first
// release (hunt_watermark keyed by hunt_id and copied to hunt_run by a view; hunt_findings
// keyed without run_id). Version 2 keeps every commit in hunt_watermark and keys findings by
// run. Version 3 keeps commit rows as long as findings, rolls them up into the newest row
// whole, and records the interval with each commit. testdata/layouts holds the DDL of every
// past layout; CHANGELOG.md the upgrade notes.
const Version = 3

// Topology decides the engines of the coordination tables.
type Topology string

const (
	// TopologyAuto asks the server (DetectTopology).
	TopologyAuto Topology = "auto"
	// TopologySingle is one node: ReplacingMergeTree / MergeTree in an ordinary database.
	TopologySingle Topology = "single"
	// TopologyReplicated is a Replicated database; its tables are Replicated*MergeTree without
	// arguments, the database supplying the Keeper path and replica name.
	TopologyReplicated Topology = "replicated"
	// TopologyCluster is ON CLUSTER DDL with explicit Keeper paths using {shard}/{replica} macros.
	TopologyCluster Topology = "cluster"
	// TopologyCloud is ClickHouse Cloud: tables as in TopologyReplicated (Cloud turns them into
	// SharedMergeTree), the database created with the service's default engine.
	TopologyCloud Topology = "cloud"
)

// Topologies lists the values accepted by ParseTopology.
var Topologies = []Topology{TopologyAuto, TopologySingle, TopologyReplicated, TopologyCluster, TopologyCloud}

// ParseTopology reads a --topology value.
func ParseTopology(s string) (Topology, error) {
	for _, t := range Topologies {
		if string(t) == strings.ToLower(strings.TrimSpace(s)) {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown topology %q (want one of auto, single, replicated, cluster, cloud)", s)
}

// Statement is one DDL statement; Name is the object it creates ("database hunt_runner",
// "table hunt_runner.hunt_lease").
type Statement struct {
	Name string
	SQL  string
}

type column struct{ name, typ string }

type table struct {
	name        string
	comment     string
	columns     []column
	projections []string
	version     string // ReplacingMergeTree version column; empty for MergeTree
	orderBy     string
	ttl         string
	// writers may insert into the table and read it; readers may only read it (provision grants
	// exactly this). The operator's admin identity, which runs schema, pause, backfill and
	// import-legacy, is not listed: it holds every privilege.
	writers, readers []Identity
}

// watermarkColumns are hunt_watermark's; the roll-up (watermarkTTL) sets each of them.
var watermarkColumns = []column{
	{"hunt_id", "String"}, {"watermark", "DateTime('UTC')"}, {"claim_id", "UUID"},
	{"updated", "DateTime64(6, 'UTC')"}, {"run_id", "UUID"}, {"run_owner", "String"},
	{"run_start", "DateTime('UTC')"}, {"run_rows", "UInt64"}, {"run_started", "DateTime64(6, 'UTC')"},
	{"gap_start", "DateTime('UTC')"}, {"gap_end", "DateTime('UTC')"},
	{"findings_dropped", "UInt64"}, {"kind", "LowCardinality(String)"},
	// The hunt's interval when this run committed; the next run caps its catch-up with it, so
	// that shortening an interval does not turn the rest of the old one into a gap. 0 on rows
	// written before layout 3 (unknown).
	{"interval_seconds", "UInt32"},
	// The hunt's revision (hunt.Hunt.Revision: definition digest, @commit for git) this run
	// ran; "" on rows written before revisions were recorded.
	{"revision", "String"},
	// Result rows each live exception removed from the run's findings, by exception id
	// (hunt.Exception.ID); empty when none was live.
	{"exception_hits", "Map(String, UInt64)"},
	// 1 when the hunt's next fire was already due as this run's commit was sent (an overrun):
	// the fire's one row carries it, so each fire's overrun counts exactly once, and a
	// healthy hunt that falls behind writes no hunt_state row per fire. 0 on earlier rows.
	{"overran", "UInt8"},
}

// tables is the single source of the schema; docs/contracts.md is its prose form.
var tables = []table{
	{
		name: TableSchedule, comment: "published schedule; written only by materialise, tombstone = enabled 0",
		writers: materialiserOnly, readers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"interval_seconds", "UInt32"}, {"phase_offset", "UInt32"},
			{"enabled", "UInt8"}, {"config_hash", "String"}, {"updated", "DateTime64(6, 'UTC')"},
			// The DEFAULT makes rows written before hunt sets existed read as the default set,
			// both after `schema` adds the column and from writers that do not name it.
			{"hunt_set", "LowCardinality(String) DEFAULT 'default'"},
		},
		version: "updated", orderBy: "hunt_id",
	},
	{
		name: TablePublish, comment: "one row per materialise that published a hunt set",
		writers: materialiserOnly, readers: runnerOnly,
		columns: []column{
			{"set_hash", "String"}, {"hunt_count", "UInt32"}, {"source", "String"},
			{"published", "DateTime64(6, 'UTC')"},
			{"hunt_set", "LowCardinality(String) DEFAULT 'default'"},
		},
		orderBy: "published",
	},
	{
		// One row per hunt survives merges; the TTL drops leases a day after they ended, so the
		// table stays as small as the set of recently run hunts.
		name: TableLease, comment: "claims; newest row per hunt by (claimed, claim_id)",
		writers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"fire", "DateTime('UTC')"}, {"owner", "String"},
			{"claim_id", "UUID"}, {"claimed", "DateTime64(6, 'UTC')"}, {"lease_until", "DateTime64(3, 'UTC')"},
		},
		version: "claimed", orderBy: "hunt_id", ttl: "toDateTime(lease_until) + INTERVAL 1 DAY",
	},
	{
		// One row per commit: the run_* and gap_* columns describe the run that committed this
		// watermark, so the commit and its audit record are one row (hunt_runs reads them).
		// A commit is a compare-and-set on the newest row, so rows of a hunt have increasing
		// watermarks; the newest is the greatest (watermark, updated). Past the commits
		// retention (never shorter than the findings', retention.go) a merge rolls a hunt's old
		// rows up into its newest one, so an idle hunt keeps its progress and the table stays as
		// long as the run log. The projection serves the per-hunt maximum that the snapshot and
		// the due count read.
		name: TableWatermark, comment: "commits: one row per committed fire; newest by (watermark, updated)",
		writers: runnerOnly,
		columns: watermarkColumns, projections: []string{"latest (SELECT hunt_id, max(watermark) GROUP BY hunt_id)"},
		orderBy: "(hunt_id, watermark)", ttl: watermarkTTL(DefaultCommitsTTLDays),
	},
	{
		name: TableState, comment: "per-hunt health; newest row by updated",
		writers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"status", "LowCardinality(String)"}, {"consecutive_failures", "UInt32"},
			{"last_error", "String"}, {"last_fire", "DateTime('UTC')"}, {"updated", "DateTime64(6, 'UTC')"},
			{"retry_after", "DateTime64(3, 'UTC')"}, {"overrun_count", "UInt64"}, {"too_aggressive", "UInt8"},
		},
		version: "updated", orderBy: "hunt_id",
	},
	{
		name: TableRun, comment: "attempts that did not commit (failed, lost); commits are in hunt_watermark, both read through hunt_runs",
		writers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"fire", "DateTime('UTC')"}, {"run_id", "UUID"}, {"owner", "String"},
			{"status", "LowCardinality(String)"}, {"window_start", "DateTime('UTC')"}, {"window_end", "DateTime('UTC')"},
			{"rows_written", "UInt64"}, {"started", "DateTime64(6, 'UTC')"}, {"finished", "DateTime64(6, 'UTC')"},
			{"error", "String"}, {"findings_dropped", "UInt64"}, {"kind", "LowCardinality(String)"},
			{"revision", "String"}, {"exception_hits", "Map(String, UInt64)"},
		},
		orderBy: "(hunt_id, fire, finished)", ttl: "toDateTime(finished) + INTERVAL 90 DAY",
	},
	{
		// Keyed by run: attempts of one fire never mix, so the committed run's findings are
		// exactly its own (hunt_findings_committed), whatever an uncommitted attempt wrote or
		// how late its insert landed. A retried insert of one run collapses under the key.
		name: TableFindings, comment: "hunt output per attempt; read committed findings from hunt_findings_committed",
		writers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"fire", "DateTime('UTC')"}, {"finding_id", "UInt64"}, {"finding", "String"},
			{"severity", "LowCardinality(String)"}, {"labels", "Map(String, String)"}, {"run_id", "UUID"},
			{"found", "DateTime64(6, 'UTC')"},
			// What the hunt's explain keys made of the row (docs/findings.md; severity above is
			// the row's), and the revision that found it. "" and [] on older rows.
			{"title", "String"}, {"dedup_key", "String"}, {"runbook", "String"},
			{"mitre", "Array(String)"}, {"revision", "String"},
		},
		version: "found", orderBy: "(hunt_id, fire, run_id, finding_id)", ttl: findingsTTL(DefaultFindingsTTLDays),
	},
	{
		name: TableRequest, comment: "run-now requests; pending while requested_fire > watermark",
		writers: materialiserOnly, readers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"requested_fire", "DateTime('UTC')"}, {"request_id", "UUID"},
			{"requested_by", "String"}, {"requested", "DateTime64(6, 'UTC')"},
		},
		orderBy: "(hunt_id, requested_fire)", ttl: "toDateTime(requested) + INTERVAL 7 DAY",
	},
	{
		// Every state change of a (hunt, fire, sink) delivery is a new row; the newest by
		// (updated, claim_id) is its state, and claim_id/lease_until fence the one sender.
		name: TableDelivery, comment: "notification delivery per (hunt, fire, sink); newest row by updated",
		writers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"fire", "DateTime('UTC')"}, {"sink", "String"}, {"run_id", "UUID"},
			{"idempotency_key", "String"}, {"status", "LowCardinality(String)"}, {"attempts", "UInt32"},
			{"last_error", "String"}, {"next_attempt", "DateTime64(3, 'UTC')"}, {"created", "DateTime64(6, 'UTC')"},
			{"delivered", "DateTime64(6, 'UTC')"}, {"claim_id", "UUID"}, {"owner", "String"},
			{"lease_until", "DateTime64(3, 'UTC')"}, {"updated", "DateTime64(6, 'UTC')"},
		},
		version: "updated", orderBy: "(hunt_id, fire, sink)", ttl: "toDateTime(updated) + INTERVAL 30 DAY",
	},
	{
		// One row per (hunt, suppression key, fire that notified it); a later fire's finding
		// with that key within the hunt's suppress.for is not sent again.
		name: TableSuppress, comment: "notified suppression keys per hunt",
		writers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"suppress_key", "String"}, {"fire", "DateTime('UTC')"},
			{"recorded", "DateTime64(6, 'UTC')"},
		},
		version: "recorded", orderBy: "(hunt_id, suppress_key, fire)", ttl: "fire + INTERVAL 90 DAY",
	},
	{
		// paused = 0 is a resume row. paused_until 0 means until resumed; otherwise the pause
		// ends at paused_until (server clock) without a resume row. No TTL: an indefinite
		// pause must outlive any retention, and merges keep one row per hunt.
		name: TablePause, comment: "pause and resume; newest row per hunt by updated",
		readers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"paused", "UInt8"}, {"paused_until", "DateTime64(3, 'UTC')"},
			{"reason", "String"}, {"paused_by", "String"}, {"updated", "DateTime64(6, 'UTC')"},
		},
		version: "updated", orderBy: "hunt_id",
	},
	{
		// A snooze mutes one hunt's notifications; runs and findings go on. snoozed = 0 is an
		// unsnooze row; snoozed_until 0 means until unsnoozed. No TTL, as for pauses.
		name: TableSnooze, comment: "snooze and unsnooze of a hunt's notifications; newest row per hunt by updated",
		readers: runnerOnly,
		columns: []column{
			{"hunt_id", "String"}, {"snoozed", "UInt8"}, {"snoozed_until", "DateTime64(3, 'UTC')"},
			{"reason", "String"}, {"snoozed_by", "String"}, {"updated", "DateTime64(6, 'UTC')"},
		},
		version: "updated", orderBy: "hunt_id",
	},
	{
		// A backfill's progress is not here: its chunks are claimed and committed under the
		// coordination key BackfillKey(hunt_id, backfill_id) in hunt_lease and hunt_watermark,
		// so the live lease and watermark are never touched. A cancellation is a newer row with
		// state 'cancelled'.
		name: TableBackfill, comment: "backfill requests; newest row per backfill_id by updated",
		readers: runnerOnly,
		columns: []column{
			{"backfill_id", "String"}, {"hunt_id", "String"}, {"range_start", "DateTime('UTC')"},
			{"range_end", "DateTime('UTC')"}, {"chunk_seconds", "UInt32"}, {"state", "LowCardinality(String)"},
			{"requested_by", "String"}, {"requested", "DateTime64(6, 'UTC')"}, {"updated", "DateTime64(6, 'UTC')"},
		},
		version: "updated", orderBy: "backfill_id",
	},
	{
		name: TableSchema, comment: "schema layout versions applied by hunt-runner schema",
		readers: everyIdentity,
		columns: []column{
			{"version", "UInt32"}, {"applied", "DateTime64(6, 'UTC')"}, {"note", "String"},
		},
		orderBy: "version",
	},
	{
		// Written by runners at most every 30 s (store.Store.Heartbeat); merges keep the
		// newest row per owner, and a runner gone for a day drops out of the table.
		name: TableHeartbeat, comment: "runner heartbeats; newest row per owner by last_tick",
		writers: runnerOnly,
		columns: []column{
			{"owner", "String"}, {"version", "String"}, {"hunt_set", "String"}, {"set_hash", "String"},
			{"hunts", "UInt32"}, {"last_tick", "DateTime64(3, 'UTC')"}, {"started", "DateTime64(3, 'UTC')"},
			// The problems of the hunt files the runner holds, as JSON (status.HuntFiles, capped):
			// `status` without a hunt source shows them. '' from a runner that reports none.
			{"hunt_files", "String"},
		},
		version: "last_tick", orderBy: "owner", ttl: "toDateTime(last_tick) + INTERVAL 1 DAY",
	},
	{
		// Written by runners at start-up and on reloads (store.Store.RecordChecked): the hunt
		// revisions the server's check accepted under a scope (configsrc.CheckScope), so that a
		// restart does not parse unchanged hunts again. A revision not re-accepted for 30 days
		// drops out and is checked once more.
		name: TableCheck, comment: "hunt revisions the server-side containment check accepted, per check scope",
		writers: runnerOnly,
		columns: []column{
			{"scope", "String"}, {"hunt_hash", "String"}, {"checked", "DateTime64(3, 'UTC')"},
		},
		version: "checked", orderBy: "(scope, hunt_hash)", ttl: "toDateTime(checked) + INTERVAL 30 DAY",
	},
}

// QuoteIdent quotes a ClickHouse identifier with backticks.
func QuoteIdent(s string) string {
	return "`" + strings.NewReplacer(`\`, `\\`, "`", "\\`").Replace(s) + "`"
}

// quoteString quotes a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// DDL returns the statements that create database and every coordination table for topology
// t, each idempotent (IF NOT EXISTS). cluster is used only by TopologyCluster. TopologyAuto is
// rendered as TopologySingle; resolve it with DetectTopology first.
func DDL(database string, t Topology, cluster string) []Statement {
	db := QuoteIdent(database)
	onCluster := ""
	if t == TopologyCluster {
		onCluster = " ON CLUSTER " + quoteString(cluster)
	}
	dbSQL := "CREATE DATABASE IF NOT EXISTS " + db + onCluster
	if t == TopologyReplicated {
		dbSQL += "\nENGINE = Replicated(" + quoteString("/clickhouse/databases/"+database) + ", '{shard}', '{replica}')"
	}
	out := []Statement{{Name: "database " + database, SQL: dbSQL}}
	for _, tb := range tables {
		out = append(out, Statement{Name: "table " + database + "." + tb.name, SQL: tb.create(database, t, onCluster)})
	}
	return append(out,
		Statement{Name: "table " + database + "." + ViewRuns, SQL: runsView(db, onCluster)},
		Statement{Name: "table " + database + "." + ViewFindingsCommitted, SQL: findingsCommittedView(db, onCluster)})
}

// huntOfKey is SplitBackfillKey's hunt id in SQL. The views use it so that a backfill chunk's
// commit shows under its hunt; viewMarkers find views created before it (refreshViews).
const huntOfKey = "splitByChar('#', hunt_id)[1]"

// viewMarkers are, per view, a fragment of its current definition that the views of earlier
// releases lack: Apply replaces a view without it (views hold no data). Each is the view's
// newest column.
var viewMarkers = map[string]string{ViewRuns: "exception_hits", ViewFindingsCommitted: "revision"}

// runsView is the run log: hunt_run's rows of attempts that did not commit, and for every
// commit row of hunt_watermark a succeeded row plus a gap row when gap_end > gap_start. A
// watermark row without a run (seeded by hand) is not a run. A row that import-legacy carried
// over from the earlier runner (kind imported) ran nothing here: it is one imported row. Rows
// of the first layout's hunt_run copies of commits (status succeeded or gap) are left out: the
// upgrade moved them into hunt_watermark. Commits of backfill chunks are keyed by BackfillKey
// and shown under their hunt; they get a branch of their own so that a filter on hunt_id still
// reaches the table's key for the live commits (a filter on the mapped id cannot). The branches
// split on kind, not on hunt_id: in the second, hunt_id names the mapped alias.
func runsView(db, onCluster string) string {
	return "CREATE VIEW IF NOT EXISTS " + db + "." + QuoteIdent(ViewRuns) + onCluster + ` AS
SELECT hunt_id, fire, run_id, owner, status, window_start, window_end, rows_written, findings_dropped,
    kind, started, finished, error, revision, exception_hits
FROM ` + db + "." + QuoteIdent(TableRun) + `
WHERE status NOT IN ('succeeded', 'gap')
UNION ALL
` + commitRuns(db, "hunt_id", "kind != 'backfill'") + `
UNION ALL
` + commitRuns(db, huntOfKey+" AS hunt_id", "kind = 'backfill'")
}

// commitRuns is runsView's branch over hunt_watermark for the rows where holds.
func commitRuns(db, huntID, where string) string {
	return `SELECT
    ` + huntID + `,
    watermark AS fire,
    run_id,
    run_owner AS owner,
    status,
    if(status = 'gap', gap_start, run_start) AS window_start,
    if(status = 'gap', gap_end, watermark) AS window_end,
    if(status = 'gap', 0, run_rows) AS rows_written,
    if(status = 'gap', 0, findings_dropped) AS findings_dropped,
    kind,
    run_started AS started,
    updated AS finished,
    if(status = 'gap', concat('outage longer than max_catchup: [', toString(gap_start), ', ',
        toString(gap_end), ') skipped'), '') AS error,
    revision,
    if(status = 'gap', CAST(map(), 'Map(String, UInt64)'), exception_hits) AS exception_hits
FROM ` + db + "." + QuoteIdent(TableWatermark) + `
ARRAY JOIN if(kind = 'imported', ['imported'], if(gap_end > gap_start, ['succeeded', 'gap'], ['succeeded'])) AS status
WHERE run_id != toUUID('00000000-0000-0000-0000-000000000000') AND ` + where
}

// findingsCommittedView narrows hunt_findings to the runs that committed. A commit row in
// hunt_watermark names its run_id, and only a run that passed the compare-and-set commit has
// one. A backfill chunk's findings are stored under its hunt and commit under BackfillKey,
// hence the mapping.
func findingsCommittedView(db, onCluster string) string {
	return "CREATE VIEW IF NOT EXISTS " + db + "." + QuoteIdent(ViewFindingsCommitted) + onCluster + ` AS
SELECT hunt_id, fire, finding_id, finding, severity, labels, run_id, found, title, dedup_key, runbook,
    mitre, revision
FROM ` + db + "." + QuoteIdent(TableFindings) + `
WHERE (hunt_id, run_id) IN (SELECT ` + huntOfKey + `, run_id FROM ` + db + "." + QuoteIdent(TableWatermark) + `)`
}

func (tb table) create(database string, t Topology, onCluster string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s.%s%s\n(\n", QuoteIdent(database), QuoteIdent(tb.name), onCluster)
	width := 0
	for _, c := range tb.columns {
		width = max(width, len(c.name))
	}
	for i, c := range tb.columns {
		sep := ","
		if i == len(tb.columns)-1 && len(tb.projections) == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %-*s %s%s\n", width, c.name, c.typ, sep)
	}
	for i, p := range tb.projections {
		sep := ","
		if i == len(tb.projections)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    PROJECTION %s%s\n", p, sep)
	}
	fmt.Fprintf(&b, ")\nENGINE = %s\nORDER BY %s", tb.engine(database, t), tb.orderBy)
	if tb.ttl != "" {
		fmt.Fprintf(&b, "\nTTL %s", tb.ttl)
	}
	fmt.Fprintf(&b, "\nCOMMENT %s", quoteString(tb.comment))
	return b.String()
}

// engineName is the engine as system.tables reports it.
func (tb table) engineName(t Topology) string {
	family := "MergeTree"
	if tb.version != "" {
		family = "ReplacingMergeTree"
	}
	if t == TopologySingle || t == TopologyAuto {
		return family
	}
	return "Replicated" + family
}

func (tb table) engine(database string, t Topology) string {
	family := tb.engineName(t)
	var args []string
	if t == TopologyCluster {
		args = append(args, quoteString("/clickhouse/tables/{shard}/"+database+"/"+tb.name), "'{replica}'")
	}
	if tb.version != "" {
		args = append(args, tb.version)
	}
	if len(args) == 0 {
		return family
	}
	return family + "(" + strings.Join(args, ", ") + ")"
}

// Script renders statements as one SQL script, each terminated by ";".
func Script(stmts []Statement) string {
	var b strings.Builder
	for i, s := range stmts {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "-- %s\n%s;\n", s.Name, s.SQL)
	}
	return b.String()
}
