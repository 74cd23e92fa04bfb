package chtest_test

import (
	"context"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func TestNewGivesFreshDatabase(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	if err := db.Conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	var cur string
	if err := db.Conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&cur); err != nil {
		t.Fatal(err)
	}
	if cur != db.Name {
		t.Fatalf("currentDatabase() = %q, want %q", cur, db.Name)
	}
	if err := db.Conn.Exec(ctx, "CREATE TABLE x (a UInt32) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn.Exec(ctx, "INSERT INTO x VALUES (?), (?)", 1, 2); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM x").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
	v, err := db.Conn.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server %v", v)
}
