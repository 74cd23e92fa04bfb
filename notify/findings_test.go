package notify

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestFindingsCommittedOnlyNewestFirst(t *testing.T) {
	db := testDB(t)
	base := baseFire()
	commit(t, db, "brute", base, `{"host":"old"}`)
	commit(t, db, "brute", base.Add(5*time.Minute), `{"host":"new"}`)
	commit(t, db, "dns", base.Add(time.Minute), `{"q":"x"}`)
	attempt(t, db, "brute", base.Add(10*time.Minute), uuid.New(), `{"host":"uncommitted"}`)
	attempt(t, db, "brute", base, uuid.New(), `{"host":"orphan"}`)
	commit(t, db, "brute", base.Add(-48*time.Hour), `{"host":"too-old"}`)

	ctx := context.Background()
	got, err := Findings(ctx, db.Conn, db.Name, "", base.Add(-time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, f := range got {
		order = append(order, f.HuntID+":"+string(f.Finding))
	}
	want := []string{`brute:{"host":"new"}`, `dns:{"q":"x"}`, `brute:{"host":"old"}`}
	if len(order) != len(want) {
		t.Fatalf("findings %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Errorf("findings %v, want %v", order, want)
			break
		}
	}
	one, err := Findings(ctx, db.Conn, db.Name, "dns", base.Add(-time.Hour), 100)
	if err != nil || len(one) != 1 || one[0].HuntID != "dns" {
		t.Errorf("one hunt: %v %v", one, err)
	}
}
