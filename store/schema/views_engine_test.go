package schema_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// Apply replaces the views of an earlier release, which would not show a backfill chunk's
// commit (keyed by schema.BackfillKey) under its hunt, and the current views do.
func TestApplyReplacesOldViewsAndShowsBackfillCommits(t *testing.T) {
	db := chtest.New(t)
	ctx := context.Background()
	if _, err := schema.Apply(ctx, db.Conn, db.Name, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	q := schema.QuoteIdent(db.Name)
	// The previous release's views matched commits by their own hunt_id.
	for _, stmt := range []string{
		"DROP VIEW " + q + ".hunt_runs",
		"CREATE VIEW " + q + ".hunt_runs AS SELECT hunt_id, watermark AS fire, run_id, kind, 'succeeded' AS status FROM " + q + ".hunt_watermark",
		"DROP VIEW " + q + ".hunt_findings_committed",
		"CREATE VIEW " + q + ".hunt_findings_committed AS SELECT hunt_id, run_id, finding FROM " + q + ".hunt_findings WHERE (hunt_id, run_id) IN (SELECT hunt_id, run_id FROM " + q + ".hunt_watermark)",
	} {
		if err := db.Conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	rep, err := schema.Apply(ctx, db.Conn, db.Name, schema.TopologySingle, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{schema.ViewRuns, schema.ViewFindingsCommitted} {
		if !slices.ContainsFunc(rep.Upgraded, func(s string) bool { return strings.HasPrefix(s, "replaced view "+v+" ") }) {
			t.Errorf("upgrade report %q does not replace %s", rep.Upgraded, v)
		}
	}
	if rep, err := schema.Apply(ctx, db.Conn, db.Name, schema.TopologySingle, ""); err != nil || len(rep.Upgraded) != 0 {
		t.Errorf("second apply: %v, upgraded %q; want nothing to do", err, rep.Upgraded)
	}
	key := schema.BackfillKey("h", "b1")
	for _, stmt := range []string{
		"INSERT INTO " + q + ".hunt_watermark (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, kind) VALUES " +
			"('" + key + "', 1200, generateUUIDv4(), now64(6), '00000000-0000-0000-0000-0000000000b1', 'pod', 600, 'backfill'), " +
			"('h', 3600, generateUUIDv4(), now64(6), '00000000-0000-0000-0000-0000000000a1', 'pod', 0, 'scheduled')",
		"INSERT INTO " + q + ".hunt_findings (hunt_id, fire, finding_id, finding, run_id, found) VALUES " +
			"('h', 1200, 1, 'backfilled', '00000000-0000-0000-0000-0000000000b1', now64(6)), " +
			"('h', 3600, 2, 'live', '00000000-0000-0000-0000-0000000000a1', now64(6)), " +
			"('h', 1200, 3, 'uncommitted', '00000000-0000-0000-0000-0000000000c1', now64(6))",
	} {
		if err := db.Conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	var kinds []string
	rows, err := db.Conn.Query(ctx, "SELECT concat(hunt_id, ':', kind, ':', toString(toUnixTimestamp(window_start)), '-', toString(toUnixTimestamp(window_end))) FROM "+q+".hunt_runs WHERE hunt_id = 'h' ORDER BY window_start")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, s)
	}
	rows.Close()
	if want := []string{"h:scheduled:0-3600", "h:backfill:600-1200"}; !slices.Equal(kinds, want) {
		t.Errorf("hunt_runs of h: %q, want %q", kinds, want)
	}
	var keyed uint64
	if err := db.Conn.QueryRow(ctx, "SELECT count() FROM "+q+".hunt_runs WHERE position(hunt_id, '#') > 0").Scan(&keyed); err != nil || keyed != 0 {
		t.Errorf("hunt_runs shows %d rows under a backfill key (%v), want every chunk under its hunt", keyed, err)
	}
	var found []string
	rows, err = db.Conn.Query(ctx, "SELECT finding FROM "+q+".hunt_findings_committed WHERE hunt_id = 'h' ORDER BY finding")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		found = append(found, s)
	}
	rows.Close()
	if want := []string{"backfilled", "live"}; !slices.Equal(found, want) {
		t.Errorf("committed findings of h: %q, want %q", found, want)
	}
}

func TestBackfillKey(t *testing.T) {
	k := schema.BackfillKey("brute-force.v2", "0123456789ab")
	if h, b, ok := schema.SplitBackfillKey(k); !ok || h != "brute-force.v2" || b != "0123456789ab" {
		t.Errorf("split %q: %q %q %v", k, h, b, ok)
	}
	if h, _, ok := schema.SplitBackfillKey("brute-force"); ok || h != "brute-force" {
		t.Errorf("a plain hunt id split as a key")
	}
}
