package lease_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/lease"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

var intruder = uuid.UUID{} // the smallest claim id

// A tie on claimed is lost for both claims, although the claim_id tie-break would have
// picked ours, because a merge keeps the other row: a peer verifying after the merge would
// see it alone and win too.
func TestTieOnClaimedIsLost(t *testing.T) {
	db := engineDB(t)
	ctx := context.Background()
	st := leases(db)
	table := db.Name + "." + schema.TableLease
	// Right after our insert, a peer's row lands with exactly our claimed and the smallest
	// claim id: by (claimed, claim_id) ours stays newest, but a merge keeps the peer's row
	// (the last inserted of tied rows).
	c := newCoordOver(t, &hookStore{Store: st, after: func(ctx context.Context, claims []lease.Row) {
		for _, cl := range claims {
			err := db.Conn.Exec(ctx, `INSERT INTO `+table+` (hunt_id, fire, owner, claim_id, claimed, lease_until)
SELECT hunt_id, fire, 'intruder', {id:UUID}, claimed, lease_until FROM `+table+`
WHERE hunt_id = {h:String} AND claim_id = toUUID({cid:String})`,
				clickhouse.Named("id", intruder.String()), clickhouse.Named("h", cl.HuntID), clickhouse.Named("cid", cl.ClaimID.String()))
			if err != nil {
				t.Errorf("intruder insert: %v", err)
			}
		}
	}}, lease.Options{Owner: "pod-a", Lease: 10 * time.Minute, Settle: time.Second})
	f := lease.Fire{HuntID: "tied", Fire: serverNow(t, db)}
	res, err := c.Claim(ctx, []lease.Fire{f})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Won) != 0 || len(res.Lost) != 1 {
		t.Fatalf("claim tied with a peer's row: %+v, want lost", res)
	}

	v, err := st.Read(ctx, []string{f.HuntID})
	if err != nil {
		t.Fatal(err)
	}
	ours := v.Leases[f.HuntID]
	if ours.ClaimID == intruder || !v.Tied[f.HuntID] {
		t.Fatalf("before the merge: newest %+v tied=%v; want ours (greater claim id) and tied", ours, v.Tied[f.HuntID])
	}
	// The engine behaviour the rule guards against: the merge keeps the last inserted.
	if err := db.Conn.Exec(ctx, "OPTIMIZE TABLE "+table+" FINAL"); err != nil {
		t.Fatal(err)
	}
	v, err = st.Read(ctx, []string{f.HuntID})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Leases[f.HuntID]; got.ClaimID != intruder || v.Tied[f.HuntID] {
		t.Fatalf("after the merge: newest %+v tied=%v; want the intruder alone", got, v.Tied[f.HuntID])
	}
}

// Newer must order claim ids exactly as ClickHouse compares UUIDs, or the simulation (which
// uses Newer) would model another protocol than the one the engine runs.
func TestNewerMatchesEngineUUIDOrder(t *testing.T) {
	db := engineDB(t)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 300
	a, b := make([]string, n), make([]string, n)
	want := make([]bool, n)
	for i := range n {
		var x, y uuid.UUID
		for j := range x {
			x[j], y[j] = byte(rng.UintN(256)), byte(rng.UintN(256))
		}
		switch i % 3 {
		case 0:
			copy(y[:8], x[:8]) // equal first halves
		case 1:
			copy(y[8:], x[8:]) // equal second halves
		}
		a[i], b[i] = x.String(), y.String()
		want[i] = lease.Newer(lease.Row{ClaimID: y}, lease.Row{ClaimID: x}) // x < y: equal claimed, y newer
	}
	var got []uint8
	err := db.Conn.QueryRow(context.Background(),
		"SELECT arrayMap((x, y) -> toUInt8(toUUID(x) < toUUID(y)), {a:Array(String)}, {b:Array(String)})",
		clickhouse.Named("a", a), clickhouse.Named("b", b)).Scan(&got)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if (got[i] == 1) != want[i] {
			t.Fatalf("%s < %s: engine %v, Newer %v", a[i], b[i], got[i] == 1, want[i])
		}
	}
}
