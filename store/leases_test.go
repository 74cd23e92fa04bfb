package store

import (
	"context"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func TestReplicaDelayNotReplicated(t *testing.T) {
	db := chtest.NewWithSchema(t)
	d, err := New(db.Conn, db.Name).ReplicaDelay(context.Background())
	if err != nil || d != 0 {
		t.Fatalf("ReplicaDelay on single-node tables = %s, %v; want 0, nil", d, err)
	}
}
