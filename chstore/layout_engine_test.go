package chstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// CheckLayout accepts only the layout this release records, and names `hunt-runner schema` for
// every other; Apply never downgrades a newer layout.
func TestCheckLayout(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	name := freshDatabase(t, db)
	exec := func(sql string) {
		t.Helper()
		if err := db.Conn.Exec(ctx, strings.ReplaceAll(sql, "DB", chstore.QuoteIdent(name))); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(what, want string) {
		t.Helper()
		err := chstore.CheckLayout(ctx, db.Conn, name)
		if !errors.Is(err, chstore.ErrLayout) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want an ErrLayout saying %q", what, err, want)
		}
	}
	exec("CREATE DATABASE DB")
	refused("no hunt_schema table (first release)", "run `hunt-runner schema`")
	exec("CREATE TABLE DB.hunt_schema (version UInt32, applied DateTime64(6, 'UTC'), note String) ENGINE = MergeTree ORDER BY version")
	refused("no version recorded (interrupted)", "run `hunt-runner schema`")
	exec("INSERT INTO DB.hunt_schema VALUES (1, now64(6), 'old')")
	refused("an older version", "run `hunt-runner schema` of this release")

	exec("DROP TABLE DB.hunt_schema")
	if _, err := chstore.Apply(ctx, db.Conn, name, chstore.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	if err := chstore.CheckLayout(ctx, db.Conn, name); err != nil {
		t.Fatalf("after Apply: %v", err)
	}
	exec("INSERT INTO DB.hunt_schema VALUES (999, now64(6), 'from the future')")
	refused("a newer version", "newer than this release's")
	_, err := chstore.Apply(ctx, db.Conn, name, chstore.TopologySingle, "")
	if !errors.Is(err, chstore.ErrLayout) || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("Apply on a newer layout: %v, want a refusal", err)
	}
}
