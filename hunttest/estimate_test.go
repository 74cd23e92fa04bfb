package hunttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// EstimateHunt checks the hunt before anything of it reaches the server as an EXPLAIN, whoever
// built it: here a hunt that never went through a loader, naming the coordination database.
func TestEstimateChecksContainmentFirst(t *testing.T) {
	db := chtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.Conn.Exec(ctx, "CREATE TABLE hunt_lease (hunt_id String) ENGINE = MergeTree ORDER BY hunt_id"); err != nil {
		t.Fatal(err)
	}
	h := hunt.Hunt{ID: "nosy", File: "nosy.yaml", Interval: 10 * time.Minute,
		Query: "SELECT hunt_id FROM " + db.Name + ".hunt_lease WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	var err error
	sts := chtest.Trips(t, db, func() {
		_, err = EstimateHunt(ctx, db.Conn, db.Conn, configsrc.Policy{CoordinationDatabase: db.Name}, h, time.Now())
	})
	if err == nil || !strings.Contains(err.Error(), "not run by the runner") {
		t.Errorf("estimate of a hunt naming the coordination database: %v", err)
	}
	for _, st := range sts {
		if s := strings.ToUpper(strings.TrimSpace(st.SQL)); strings.HasPrefix(s, "EXPLAIN") && !strings.HasPrefix(s, "EXPLAIN AST") {
			t.Errorf("an unchecked hunt reached the server: %.120s", st.SQL)
		}
	}
}
