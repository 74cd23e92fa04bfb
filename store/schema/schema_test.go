package schema

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/golden"
)

func TestDDLGolden(t *testing.T) {
	for _, topo := range []Topology{TopologySingle, TopologyReplicated, TopologyCluster, TopologyCloud} {
		t.Run(string(topo), func(t *testing.T) {
			golden.Check(t, filepath.Join("testdata", "ddl_"+string(topo)+".golden.sql"), Script(DDL("hunt_runner", topo, "default")))
		})
	}
}

// The golden files pin the text; these pin the properties the contract asks of each topology,
// so an -update cannot quietly lose them.
func TestDDLTopologyProperties(t *testing.T) {
	engine := regexp.MustCompile(`ENGINE = (\w+)(\([^\n]*\))?`)
	tests := []struct {
		topo     Topology
		dbSuffix string
		engines  map[string]string // table → engine clause
	}{
		{TopologySingle, "", map[string]string{
			TableSchedule: "ReplacingMergeTree(updated)", TableLease: "ReplacingMergeTree(claimed)",
			TableRun: "MergeTree", TableFindings: "ReplacingMergeTree(found)", TablePublish: "MergeTree",
		}},
		{TopologyReplicated, "\nENGINE = Replicated('/clickhouse/databases/hunt_runner', '{shard}', '{replica}')", map[string]string{
			TableSchedule: "ReplicatedReplacingMergeTree(updated)", TableLease: "ReplicatedReplacingMergeTree(claimed)",
			TableRun: "ReplicatedMergeTree", TableRequest: "ReplicatedMergeTree",
		}},
		{TopologyCluster, " ON CLUSTER 'default'", map[string]string{
			TableSchedule: "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/hunt_runner/hunt_schedule', '{replica}', updated)",
			TableRun:      "ReplicatedMergeTree('/clickhouse/tables/{shard}/hunt_runner/hunt_run', '{replica}')",
		}},
		{TopologyCloud, "", map[string]string{
			TableWatermark: "ReplicatedMergeTree", TablePublish: "ReplicatedMergeTree",
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.topo), func(t *testing.T) {
			stmts := DDL("hunt_runner", tt.topo, "default")
			if len(stmts) != 1+len(ObjectNames()) {
				t.Fatalf("%d statements, want database + %d objects", len(stmts), len(ObjectNames()))
			}
			views := stmts[len(stmts)-2:]
			for i, name := range []string{ViewRuns, ViewFindingsCommitted} {
				if !strings.HasPrefix(views[i].SQL, "CREATE VIEW IF NOT EXISTS `hunt_runner`.`"+name+"`") ||
					tt.topo == TopologyCluster != strings.Contains(views[i].SQL, "ON CLUSTER 'default'") {
					t.Errorf("view %s: %s", name, views[i].SQL)
				}
			}
			if want := "CREATE DATABASE IF NOT EXISTS `hunt_runner`" + tt.dbSuffix; stmts[0].SQL != want {
				t.Errorf("database statement\n got %q\nwant %q", stmts[0].SQL, want)
			}
			for _, s := range stmts[1 : len(stmts)-2] {
				if !strings.Contains(s.SQL, "CREATE TABLE IF NOT EXISTS `hunt_runner`.") {
					t.Errorf("%s is not idempotent: %s", s.Name, s.SQL)
				}
				if tt.topo == TopologyCluster != strings.Contains(s.SQL, "ON CLUSTER 'default'") {
					t.Errorf("%s: ON CLUSTER wrong for %s", s.Name, tt.topo)
				}
				table := strings.TrimPrefix(s.Name, "table hunt_runner.")
				if want, ok := tt.engines[table]; ok {
					if got := engine.FindString(s.SQL); got != "ENGINE = "+want {
						t.Errorf("%s: %q, want %q", table, got, "ENGINE = "+want)
					}
				}
			}
		})
	}
}

func TestDDLQuotesNames(t *testing.T) {
	stmts := DDL("odd`name'x", TopologyCluster, "c'1")
	if !strings.Contains(stmts[0].SQL, "`odd\\`name'x` ON CLUSTER 'c\\'1'") {
		t.Errorf("database name not quoted: %s", stmts[0].SQL)
	}
	if !strings.Contains(stmts[1].SQL, "'/clickhouse/tables/{shard}/odd`name\\'x/hunt_schedule'") {
		t.Errorf("path literal not escaped: %s", stmts[1].SQL)
	}
}

func TestParseTopology(t *testing.T) {
	for _, s := range []string{"auto", "single", "Replicated", " cluster ", "cloud"} {
		if _, err := ParseTopology(s); err != nil {
			t.Errorf("ParseTopology(%q): %v", s, err)
		}
	}
	if _, err := ParseTopology("sharded"); err == nil {
		t.Error("ParseTopology(sharded) succeeded")
	}
}

// The runner reads every table (its snapshot, status and commands read them all), and writes
// none that another identity writes: one writer identity per table.
func TestGrants(t *testing.T) {
	reads := map[Identity]map[string]bool{}
	for _, id := range everyIdentity {
		reads[id] = map[string]bool{}
		for _, a := range Grants(id) {
			reads[id][a.Table] = a.Insert
		}
	}
	for _, name := range TableNames() {
		if _, ok := reads[IdentityRunner][name]; !ok {
			t.Errorf("the runner may not read %s", name)
		}
		var writers []Identity
		for _, id := range everyIdentity {
			if reads[id][name] {
				writers = append(writers, id)
			}
		}
		if len(writers) > 1 {
			t.Errorf("%s has writers %v, want at most one identity", name, writers)
		}
	}
	if got := reads[IdentityScaler]; len(got) != 1 || got[TableSchema] {
		t.Errorf("scaler grants %v, want SELECT on %s only", got, TableSchema)
	}
	if len(Grants("hunts")) != 0 {
		t.Errorf("the hunts identity has grants on hunt-runner's tables: %v", Grants("hunts"))
	}
}
