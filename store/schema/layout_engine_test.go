package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// CheckLayout accepts only the layout this release records, and names `hunt-runner schema` for
// every other; Apply never downgrades a newer layout.
func TestCheckLayout(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	name := freshDatabase(t, db)
	exec := func(sql string) {
		t.Helper()
		if err := db.Conn.Exec(ctx, strings.ReplaceAll(sql, "DB", schema.QuoteIdent(name))); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(what, want string) {
		t.Helper()
		err := schema.CheckLayout(ctx, db.Conn, name)
		if !errors.Is(err, schema.ErrLayout) || !strings.Contains(err.Error(), want) {
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
	if _, err := schema.Apply(ctx, db.Conn, name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	if err := schema.CheckLayout(ctx, db.Conn, name); err != nil {
		t.Fatalf("after Apply: %v", err)
	}
	// A column this release adds within the layout version, not added yet: writes naming it
	// would fail, so the check refuses, and Apply adds it.
	exec("ALTER TABLE DB.hunt_state DROP COLUMN too_aggressive")
	refused("a column of this release missing", "lacks the column(s) hunt_state.too_aggressive")
	if _, err := schema.Apply(ctx, db.Conn, name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	if err := schema.CheckLayout(ctx, db.Conn, name); err != nil {
		t.Fatalf("after Apply added the column: %v", err)
	}
	exec("INSERT INTO DB.hunt_schema VALUES (999, now64(6), 'from the future')")
	refused("a newer version", "newer than this release's")
	_, err := schema.Apply(ctx, db.Conn, name, schema.TopologySingle, "")
	if !errors.Is(err, schema.ErrLayout) || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("Apply on a newer layout: %v, want a refusal", err)
	}
}

// The upgrade from layout 2 cut short on its roll-up change: the version stays 2, so the layout
// check refuses the database, and the next Apply finishes the upgrade with the commits intact.
func TestInterruptedRollupUpgradeResumes(t *testing.T) {
	srv := chtest.Start(t)
	db := srv.NewDB(t)
	ctx := context.Background()
	name := freshDatabase(t, db)
	createLayout(t, db, "testdata/layouts/v2/single.sql", name)
	q := func(sql string) string { return strings.ReplaceAll(sql, "DB", schema.QuoteIdent(name)) }
	if err := db.Conn.Exec(ctx, q("INSERT INTO DB.hunt_schema VALUES (2, now64(6), 'layout 2')")); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn.Exec(ctx, q(`INSERT INTO DB.hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, kind)
	    SELECT 'a', 1000, generateUUIDv4(), now64(6), generateUUIDv4(), 'scheduled'`)); err != nil {
		t.Fatal(err)
	}
	srv.SetFaults(t, ctl.FaultRule{Name: "rollup", Match: `hunt_watermark.* MODIFY TTL`, Effect: ctl.FailBefore, Times: 1})
	if _, err := schema.Apply(ctx, db.Conn, name, schema.TopologySingle, ""); err == nil {
		t.Fatal("Apply succeeded with its roll-up change failing")
	}
	if err := schema.CheckLayout(ctx, db.Conn, name); !errors.Is(err, schema.ErrLayout) || !strings.Contains(err.Error(), "layout version 2") {
		t.Fatalf("layout check after the cut-short upgrade: %v", err)
	}
	srv.ClearFaults(t)
	rep, err := schema.Apply(ctx, db.Conn, name, schema.TopologySingle, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.CheckLayout(ctx, db.Conn, name); err != nil {
		t.Fatalf("after the resumed upgrade: %v (report %q)", err, rep.Upgraded)
	}
	var n, wm uint64
	if err := db.Conn.QueryRow(ctx, q("SELECT count(), toUInt64(max(watermark)) FROM DB.hunt_watermark")).Scan(&n, &wm); err != nil || n != 1 || wm != 1000 {
		t.Fatalf("commits after the resumed upgrade: %d rows, watermark %d, %v", n, wm, err)
	}
}
