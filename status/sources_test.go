package status

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// no_data and over_budget are states of the hunt (hunt_state), shown with why, ranked after
// failing and before the hunts that need nobody; a success clears them.
func TestNoDataAndOverBudgetStates(t *testing.T) {
	db := chtest.NewWithSchema(t)
	ctx := context.Background()
	s := store.New(db.Conn, db.Name)
	var now uint32
	if err := db.Conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	fire := int64(now) / 60 * 60
	for _, st := range []store.State{
		{HuntID: "blind", Status: hunt.RunNoData, LastError: "no data: source logs.events has no row", LastFire: fire},
		{HuntID: "costly", Status: hunt.RunOverBudget, LastError: "hunt query: TOO_MANY_ROWS", LastFire: fire, Hold: time.Minute},
		{HuntID: "cured", Status: hunt.RunNoData, LastError: "no data: x", LastFire: fire - 60},
	} {
		if err := s.SetState(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetState(ctx, store.State{HuntID: "cured", Status: hunt.RunSucceeded, LastFire: fire}); err != nil {
		t.Fatal(err)
	}
	entries := []hunt.Hunt{{ID: "blind", Interval: time.Minute, Enabled: true}, {ID: "costly", Interval: time.Minute, Enabled: true},
		{ID: "cured", Interval: time.Minute, Enabled: true}}
	rep, err := Read(ctx, pinnedClock{Reader: s, now: time.Unix(fire+1, 0)}, entries)
	if err != nil {
		t.Fatal(err)
	}
	if h := mustGet(t, rep, "blind"); h.State != StateNoData || !strings.Contains(h.StateDetail, "logs.events") {
		t.Errorf("blind = %s (%q), want no_data naming the source", h.State, h.StateDetail)
	}
	if h := mustGet(t, rep, "costly"); h.State != StateOverBudget || !strings.Contains(h.StateDetail, "TOO_MANY_ROWS") {
		t.Errorf("costly = %s (%q), want over_budget", h.State, h.StateDetail)
	}
	if h := mustGet(t, rep, "cured"); h.State == StateNoData || h.StateDetail != "" {
		t.Errorf("cured = %s (%q): a success clears no_data", h.State, h.StateDetail)
	}
	b, err := json.Marshal(mustGet(t, rep, "blind"))
	if err != nil || !strings.Contains(string(b), `"state":"no_data"`) {
		t.Errorf("JSON %s (%v), want state no_data", b, err)
	}
	if !(stateRank[StateFailing] < stateRank[StateOverBudget] && stateRank[StateNoData] < stateRank[StateOK]) {
		t.Error("the page does not rank the new states between failing and ok")
	}
}
