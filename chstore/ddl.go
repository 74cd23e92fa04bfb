package chstore

import (
	"fmt"
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

	// TableDelivery and TableSuppress are written only by notify (docs/findings.md).
	TableDelivery = "hunt_delivery"
	TableSuppress = "hunt_suppress"

	// ViewWatermarkRun turns every committed watermark row into its hunt_run rows (succeeded,
	// and gap when the run skipped a range), so progress and its audit row are one insert: a
	// pod killed between two separate writes can no longer leave a watermark without its row.
	ViewWatermarkRun = "hunt_watermark_run"
)

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
	name    string
	comment string
	columns []column
	version string // ReplacingMergeTree version column; empty for MergeTree
	orderBy string
	ttl     string
}

// tables is the single source of the schema; docs/contracts.md is its prose form.
var tables = []table{
	{
		name: TableSchedule, comment: "published schedule; written only by materialise, tombstone = enabled 0",
		columns: []column{
			{"hunt_id", "String"}, {"interval_seconds", "UInt32"}, {"phase_offset", "UInt32"},
			{"enabled", "UInt8"}, {"config_hash", "String"}, {"updated", "DateTime64(6, 'UTC')"},
		},
		version: "updated", orderBy: "hunt_id",
	},
	{
		name: TablePublish, comment: "one row per materialise that published a hunt set",
		columns: []column{
			{"set_hash", "String"}, {"hunt_count", "UInt32"}, {"source", "String"},
			{"published", "DateTime64(6, 'UTC')"},
		},
		orderBy: "published",
	},
	{
		// One row per hunt survives merges; the TTL drops leases a day after they ended, so the
		// table stays as small as the set of recently run hunts.
		name: TableLease, comment: "claims; newest row per hunt by (claimed, claim_id)",
		columns: []column{
			{"hunt_id", "String"}, {"fire", "DateTime('UTC')"}, {"owner", "String"},
			{"claim_id", "UUID"}, {"claimed", "DateTime64(6, 'UTC')"}, {"lease_until", "DateTime64(3, 'UTC')"},
		},
		version: "claimed", orderBy: "hunt_id", ttl: "toDateTime(lease_until) + INTERVAL 1 DAY",
	},
	{
		// The run_* and gap_* columns describe the run that committed this watermark; the
		// hunt_watermark_run view copies them into hunt_run.
		name: TableWatermark, comment: "fenced progress per hunt; newest row by updated",
		columns: []column{
			{"hunt_id", "String"}, {"watermark", "DateTime('UTC')"}, {"claim_id", "UUID"},
			{"updated", "DateTime64(6, 'UTC')"}, {"run_id", "UUID"}, {"run_owner", "String"},
			{"run_start", "DateTime('UTC')"}, {"run_rows", "UInt64"}, {"run_started", "DateTime64(6, 'UTC')"},
			{"gap_start", "DateTime('UTC')"}, {"gap_end", "DateTime('UTC')"},
		},
		version: "updated", orderBy: "hunt_id",
	},
	{
		name: TableState, comment: "per-hunt health; newest row by updated",
		columns: []column{
			{"hunt_id", "String"}, {"status", "LowCardinality(String)"}, {"consecutive_failures", "UInt32"},
			{"last_error", "String"}, {"last_fire", "DateTime('UTC')"}, {"updated", "DateTime64(6, 'UTC')"},
		},
		version: "updated", orderBy: "hunt_id",
	},
	{
		name: TableRun, comment: "audit log, one row per finished attempt",
		columns: []column{
			{"hunt_id", "String"}, {"fire", "DateTime('UTC')"}, {"run_id", "UUID"}, {"owner", "String"},
			{"status", "LowCardinality(String)"}, {"window_start", "DateTime('UTC')"}, {"window_end", "DateTime('UTC')"},
			{"rows_written", "UInt64"}, {"started", "DateTime64(6, 'UTC')"}, {"finished", "DateTime64(6, 'UTC')"},
			{"error", "String"},
		},
		orderBy: "(hunt_id, fire, finished)", ttl: "toDateTime(finished) + INTERVAL 90 DAY",
	},
	{
		// run_id is not in the key, so a re-run of the same fire collapses instead of duplicating.
		name: TableFindings, comment: "hunt output; finding_id = cityHash64(finding)",
		columns: []column{
			{"hunt_id", "String"}, {"fire", "DateTime('UTC')"}, {"finding_id", "UInt64"}, {"finding", "String"},
			{"severity", "LowCardinality(String)"}, {"labels", "Map(String, String)"}, {"run_id", "UUID"},
			{"found", "DateTime64(6, 'UTC')"},
		},
		version: "found", orderBy: "(hunt_id, fire, finding_id)",
	},
	{
		name: TableRequest, comment: "run-now requests; pending while requested_fire > watermark",
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
		columns: []column{
			{"hunt_id", "String"}, {"suppress_key", "String"}, {"fire", "DateTime('UTC')"},
			{"recorded", "DateTime64(6, 'UTC')"},
		},
		version: "recorded", orderBy: "(hunt_id, suppress_key, fire)", ttl: "fire + INTERVAL 90 DAY",
	},
}

// TableNames lists every coordination table in creation order.
func TableNames() []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.name
	}
	return out
}

// ObjectNames lists every object DDL creates in the database, tables then views, in order.
func ObjectNames() []string { return append(TableNames(), ViewWatermarkRun) }

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
	return append(out, Statement{Name: "table " + database + "." + ViewWatermarkRun, SQL: watermarkRunView(db, onCluster)})
}

// watermarkRunView is the materialized view from hunt_watermark to hunt_run: one succeeded row
// per committed watermark, plus a gap row when gap_end > gap_start. A watermark row without a
// run (set by hand, or seeded) is not a run and writes nothing.
func watermarkRunView(db, onCluster string) string {
	return "CREATE MATERIALIZED VIEW IF NOT EXISTS " + db + "." + QuoteIdent(ViewWatermarkRun) + onCluster +
		" TO " + db + "." + QuoteIdent(TableRun) + `
AS SELECT
    hunt_id,
    watermark AS fire,
    run_id,
    run_owner AS owner,
    status,
    if(status = 'gap', gap_start, run_start) AS window_start,
    if(status = 'gap', gap_end, watermark) AS window_end,
    if(status = 'gap', 0, run_rows) AS rows_written,
    run_started AS started,
    updated AS finished,
    if(status = 'gap', concat('outage longer than max_catchup: [', toString(toUnixTimestamp(gap_start)), ', ',
        toString(toUnixTimestamp(gap_end)), ') skipped'), '') AS error
FROM ` + db + "." + QuoteIdent(TableWatermark) + `
ARRAY JOIN if(gap_end > gap_start, ['succeeded', 'gap'], ['succeeded']) AS status
WHERE run_id != toUUID('00000000-0000-0000-0000-000000000000')`
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
		if i == len(tb.columns)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %-*s %s%s\n", width, c.name, c.typ, sep)
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
