package chtest

import (
	"context"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// NewWithSchema is New with hunt-runner's coordination tables created in the fresh database
// (single-node topology, replicated under EnvCluster), the starting point of every test of the coordination code.
func NewWithSchema(t testing.TB) *DB {
	t.Helper()
	db := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topo := schema.TopologySingle
	if cluster() != "" {
		topo = schema.TopologyReplicated // the database is Replicated (New)
	}
	if _, err := schema.Apply(ctx, db.Conn, db.Name, topo, ""); err != nil {
		t.Fatalf("chtest: apply schema: %v", err)
	}
	return db
}
