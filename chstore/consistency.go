package chstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Consistency says what makes the coordination statements of several pods consistent when the
// coordination tables are replicated (docs/operations.md, "Deployment matrix"). The claim
// protocol and the commit's compare-and-set are only sound if every read sees every write that
// finished before it; on one server that is free, across replicas it has to be asked for.
type Consistency string

const (
	// ConsistencyAuto picks from the engines of the coordination tables (DetectConsistency).
	ConsistencyAuto Consistency = "auto"
	// ConsistencySingleEndpoint adds nothing: every pod must reach the same server (or the same
	// replica, failing over only after more than a lease). A multi-host URL is refused.
	ConsistencySingleEndpoint Consistency = "single-endpoint"
	// ConsistencyQuorum is for Replicated*MergeTree: inserts wait for a majority of replicas and
	// are linearised (insert_quorum_parallel=0), and reads see every quorum insert
	// (select_sequential_consistency=1) or fail on a replica that has not got it yet.
	ConsistencyQuorum Consistency = "quorum"
	// ConsistencySequential is for SharedMergeTree (ClickHouse Cloud), whose inserts are durable
	// in shared storage when acknowledged: reads only need select_sequential_consistency=1 to
	// see them on any replica.
	ConsistencySequential Consistency = "sequential"
)

// Consistencies lists the values ParseConsistency accepts.
var Consistencies = []Consistency{ConsistencyAuto, ConsistencySingleEndpoint, ConsistencyQuorum, ConsistencySequential}

// ErrConsistency marks a consistency mode that cannot be correct for the tables and endpoints
// found, or that could not be decided. Waiting does not fix it: Open never retries it.
var ErrConsistency = errors.New("ClickHouse consistency")

// ParseConsistency reads a --consistency value; the empty string is auto.
func ParseConsistency(s string) (Consistency, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == "" {
		return ConsistencyAuto, nil
	}
	for _, c := range Consistencies {
		if string(c) == v {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: unknown consistency %q (want one of auto, single-endpoint, quorum, sequential)", ErrConfig, s)
}

// Settings returns the connection-level settings of a resolved mode (nil for auto and
// single-endpoint). They go into clickhouse.Options.Settings, so every statement of the
// connection carries them: claims, verify reads, commits, snapshots, due counts and the SELECT
// inside conditional inserts alike, with nothing to remember per statement. ClickHouse ignores
// them on tables that are not replicated.
func (c Consistency) Settings() clickhouse.Settings {
	switch c {
	case ConsistencyQuorum:
		return clickhouse.Settings{
			// 'auto' is the majority of the table's replicas, as Keeper counts them.
			"insert_quorum": "auto",
			// Parallel quorum inserts are not linearised, and sequential reads need them to be.
			"insert_quorum_parallel":        0,
			"select_sequential_consistency": 1,
		}
	case ConsistencySequential:
		return clickhouse.Settings{"select_sequential_consistency": 1}
	}
	return nil
}

// TableKind is what the engines of the coordination tables say about replication.
type TableKind string

const (
	// TablesMissing: none of the coordination tables exists (yet) in the database.
	TablesMissing TableKind = "missing"
	// TablesUnknown: system.tables could not be read.
	TablesUnknown TableKind = "unknown"
	// TablesPlain: MergeTree-family engines without replication (one server).
	TablesPlain TableKind = "plain"
	// TablesReplicated: Replicated*MergeTree (Keeper replication).
	TablesReplicated TableKind = "replicated"
	// TablesShared: Shared*MergeTree (ClickHouse Cloud).
	TablesShared TableKind = "shared"
)

// ConsistencyReport is how the mode was chosen and checked.
type ConsistencyReport struct {
	Requested Consistency // as configured (auto when unset)
	Mode      Consistency // what the connection uses; never auto
	Tables    TableKind
	// Engines maps each coordination table found to its engine.
	Engines   map[string]string
	Endpoints int    // hosts in the URL
	Reason    string // why this mode, for the start-up log line
	// Warnings are configurations that may be correct but usually are not (logged, not fatal).
	Warnings []string
}

// tableKind classifies the engines found; replicated wins over shared over plain, so that a
// half-migrated database gets the strongest mode any of its tables needs.
func tableKind(engines map[string]string) TableKind {
	kind := TablesMissing
	for _, e := range engines {
		switch {
		case strings.HasPrefix(e, "Replicated"):
			return TablesReplicated
		case strings.HasPrefix(e, "Shared"):
			kind = TablesShared
		case kind == TablesMissing:
			kind = TablesPlain
		}
	}
	return kind
}

// DetectConsistency reads the engines of database's coordination tables from system.tables and
// picks the mode they need: Replicated* → quorum, Shared* → sequential, plain → single-endpoint.
// Before the tables exist (a first `schema`) it goes by the topology schema.DetectTopology sees: the
// mode the tables `schema` would create need.
func DetectConsistency(ctx context.Context, conn driver.Conn, database string) (ConsistencyReport, error) {
	rep := ConsistencyReport{Requested: ConsistencyAuto}
	engines, err := schema.Engines(ctx, conn, database)
	if err != nil {
		return rep, fmt.Errorf("%w: read the coordination tables' engines from system.tables: %w (pass --consistency explicitly)", ErrConsistency, err)
	}
	rep.Engines, rep.Tables = engines, tableKind(engines)
	switch rep.Tables {
	case TablesReplicated:
		rep.Mode, rep.Reason = ConsistencyQuorum, "coordination tables are Replicated*MergeTree"
	case TablesShared:
		rep.Mode, rep.Reason = ConsistencySequential, "coordination tables are Shared*MergeTree (ClickHouse Cloud)"
	case TablesPlain:
		rep.Mode, rep.Reason = ConsistencySingleEndpoint, "coordination tables are not replicated"
	default:
		topo, err := schema.DetectTopology(ctx, conn, database, "")
		switch {
		case errors.Is(err, schema.ErrTopology): // replica macros without a cluster name: replicated
			topo = schema.TopologyCluster
		case err != nil:
			return rep, fmt.Errorf("%w: no coordination tables in %q and %w (pass --consistency explicitly)", ErrConsistency, database, err)
		}
		switch topo {
		case schema.TopologyCloud:
			rep.Mode = ConsistencySequential
		case schema.TopologyReplicated, schema.TopologyCluster:
			rep.Mode = ConsistencyQuorum
		default:
			rep.Mode = ConsistencySingleEndpoint
		}
		rep.Reason = fmt.Sprintf("no coordination tables yet; the server's topology is %s", topo)
	}
	return rep, nil
}

// ResolveConsistency decides the mode for requested on conn's server and checks it against the
// tables found and the number of endpoints in the URL. A configuration that cannot be correct
// is an ErrConsistency naming the fix: replicated tables reached through several endpoints
// without quorum, or single-endpoint with several endpoints. An explicit mode whose check
// cannot read system.tables is trusted, with a warning.
func ResolveConsistency(ctx context.Context, conn driver.Conn, database string, requested Consistency, endpoints int) (ConsistencyReport, error) {
	if requested == "" {
		requested = ConsistencyAuto
	}
	rep, err := DetectConsistency(ctx, conn, database)
	switch {
	case err != nil && requested == ConsistencyAuto:
		rep.Endpoints = endpoints
		return rep, err
	case err != nil:
		rep = ConsistencyReport{Tables: TablesUnknown, Reason: "set explicitly",
			Warnings: []string{"cannot read the coordination tables' engines to check --consistency " + string(requested) + ": " + err.Error()}}
		rep.Mode = requested
	case requested != ConsistencyAuto:
		rep.Mode, rep.Reason = requested, "set explicitly"
	}
	rep.Requested, rep.Endpoints = requested, endpoints
	if err := rep.check(); err != nil {
		return rep, err
	}
	return rep, nil
}

// check refuses what cannot be correct and collects warnings for what is suspicious.
func (r *ConsistencyReport) check() error {
	if r.Requested == ConsistencyAuto && r.Mode == ConsistencySingleEndpoint && r.Endpoints > 1 {
		return fmt.Errorf("%w: --consistency auto found coordination tables that are not replicated (%s), so it needs "+
			"one endpoint, but the URL lists %d hosts: servers that do not replicate these tables cannot agree; "+
			"list one host, or create replicated tables (hunt-runner schema --topology replicated) and use quorum",
			ErrConsistency, r.Reason, r.Endpoints)
	}
	if err := checkEndpoints(r.Mode, r.Endpoints); err != nil {
		return err
	}
	switch {
	case r.Tables == TablesReplicated && r.Endpoints > 1 && r.Mode != ConsistencyQuorum:
		return fmt.Errorf("%w: the coordination tables are replicated (%s) and the URL lists %d hosts, "+
			"but --consistency is %s: pods would read and write different replicas with nothing making them agree; "+
			"use --consistency quorum (or auto)", ErrConsistency, r.engineList(), r.Endpoints, r.Mode)
	case r.Tables == TablesReplicated && r.Mode == ConsistencySingleEndpoint:
		r.Warnings = append(r.Warnings, "the coordination tables are replicated and --consistency is single-endpoint: "+
			"correct only if every pod reaches the same replica and fails over only after more than a lease; "+
			"behind a Service that balances replicas use --consistency quorum")
	case r.Tables == TablesReplicated && r.Mode == ConsistencySequential:
		r.Warnings = append(r.Warnings, "the coordination tables are Replicated*MergeTree and --consistency is sequential: "+
			"sequential reads only see inserts made with a quorum; use --consistency quorum")
	case r.Tables == TablesPlain && r.Mode != ConsistencySingleEndpoint:
		r.Warnings = append(r.Warnings, "--consistency "+string(r.Mode)+" on coordination tables that are not replicated: "+
			"the settings are sent but change nothing")
	case r.Tables == TablesShared && r.Mode == ConsistencySingleEndpoint:
		r.Warnings = append(r.Warnings, "the coordination tables are Shared*MergeTree and --consistency is single-endpoint: "+
			"a Cloud endpoint balances replicas; use --consistency sequential (or auto)")
	}
	return nil
}

// checkEndpoints is the part of the check that needs no server: single-endpoint means one host.
func checkEndpoints(mode Consistency, endpoints int) error {
	if mode == ConsistencySingleEndpoint && endpoints > 1 {
		return fmt.Errorf("%w: --consistency single-endpoint with %d hosts in the URL: pods would spread over servers "+
			"that do not agree; list one host, or use --consistency quorum on replicated tables", ErrConsistency, endpoints)
	}
	return nil
}

func (r ConsistencyReport) engineList() string {
	var parts []string
	for name, e := range r.Engines {
		parts = append(parts, name+"="+e)
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// LogAttrs are the key-value pairs of the start-up log line.
func (r ConsistencyReport) LogAttrs() []any {
	return []any{"consistency", string(r.Mode), "requested", string(r.Requested), "tables", string(r.Tables),
		"endpoints", r.Endpoints, "reason", r.Reason}
}
