package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// newEngineDB gives a test a fresh database on the real engine with the coordination tables.
func newEngineDB(t testing.TB) *chtest.DB {
	t.Helper()
	db := chtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := chstore.Apply(ctx, db.Conn, db.Name, chstore.TopologySingle, ""); err != nil {
		t.Fatalf("apply schema: %v", err)
	}
	return db
}
