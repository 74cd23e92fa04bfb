package store

import (
	"context"
	"slices"
	"sort"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

func TestReplicaDelayNotReplicated(t *testing.T) {
	db := chtest.NewWithSchema(t)
	d, err := New(db.Conn, db.Name).ReplicaDelay(context.Background())
	if err != nil || d != 0 {
		t.Fatalf("ReplicaDelay on single-node tables = %s, %v; want 0, nil", d, err)
	}
}

// Running is the cap's count: the live, unspent newest lease of each hunt of the scope and of
// its backfill keys; never a delivery key, an expired, released or spent lease, a lease whose
// newest row is a peer's release, or another hunt's.
func TestRunningCountsTheScopesLiveLeases(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	exec := func(q string) {
		t.Helper()
		if err := db.Conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	row := func(key, until string, claimed string) string {
		return "('" + key + "', toDateTime(4102444800 - 3600), 'pod', generateUUIDv4(), " + claimed + ", " + until + ")"
	}
	live, gone := "now64(3) + INTERVAL 1 MINUTE", "now64(3) - INTERVAL 1 SECOND"
	exec("INSERT INTO " + db.Name + ".hunt_lease (hunt_id, fire, owner, claim_id, claimed, lease_until) VALUES " +
		row("a", live, "now64(6)") + ", " +
		row("a"+schema.BackfillInfix+"b1", live, "now64(6)") + ", " +
		row("a"+DeliveryInfix+"slack", live, "now64(6)") + ", " +
		row("b", gone, "now64(6)") + ", " + // expired
		row("c", live, "now64(6) - INTERVAL 1 MINUTE") + ", " + row("c", gone, "now64(6)") + ", " + // released: its newest row ended
		row("d", live, "now64(6)") + ", " + // spent: its fire is committed (below)
		row("other", live, "now64(6)"))
	exec("INSERT INTO " + db.Name + ".hunt_watermark (hunt_id, watermark, claim_id, updated) VALUES ('d', toDateTime(4102444800 - 3600), generateUUIDv4(), now64(6))")
	rows, err := New(db.Conn, db.Name).Leases().Running(ctx, []string{"a", "b", "c", "d", "absent"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.HuntID)
	}
	sort.Strings(got)
	if want := []string{"a", "a" + schema.BackfillInfix + "b1"}; !slices.Equal(got, want) {
		t.Fatalf("Running = %v, want %v", got, want)
	}
}
