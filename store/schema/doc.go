// Package schema is the one definition of hunt-runner's own tables: their names (TableLease,
// ViewRuns, … and the lists TableNames and ObjectNames), their columns and engines, the key
// encodings stored in them (BackfillKey), and which identity may read and write each (Grants,
// which provision turns into GRANTs). It sits beside store, which holds every statement on these
// tables; nothing outside store/ builds SQL on them (store/boundary_test.go).
//
// DDL renders every table of docs/contracts.md for a Topology — one node, a Replicated
// database, or ON CLUSTER with {shard}/{replica} macros (and ClickHouse Cloud); DetectTopology
// asks the server which. The rendered DDL is pinned in testdata/*.golden.sql. Apply creates what
// is missing and reports what it created, and upgrades an older layout in place (migrate.go:
// columns added, re-keyed tables moved aside and copied, never dropped); it records the layout
// Version in hunt_schema only once the upgrade is complete, and refuses a newer one. CheckLayout
// is how the commands that act on the coordination state refuse any other layout.
// ApplyRetention sets the TTLs of findings and commit rows (retention.go), refusing settings
// that would hide committed findings. Insert gives a batch insert the columns' declared types,
// so the driver does not ask the server for them.
//
// It imports nothing of hunt-runner's: store, chstore (whose consistency check reads the
// engines of TableNames) and the test helpers all build on it.
package schema
