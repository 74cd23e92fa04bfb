package store

import (
	"fmt"
	"strings"

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// argMaxRows is the earlier runner's shape, kept for the benchmark and the agreement test:
// argMax of a tuple by the version, grouped by hunt_id.
func argMaxRows(database, table string, cols []string, version string) string {
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = fmt.Sprintf("t.%d AS %s", i+1, c)
	}
	v := strings.NewReplacer(" DESC", "").Replace(version)
	return "SELECT hunt_id, " + strings.Join(sel, ", ") + " FROM (SELECT hunt_id, argMax((" + strings.Join(cols, ", ") +
		"), (" + v + ")) AS t FROM " + schema.QuoteIdent(database) + "." + table + " GROUP BY hunt_id)"
}

// snapshotForms are the ways of reading the newest rows that must agree, production's among them.
var snapshotForms = []struct {
	name string
	form snapshotForm
}{
	{"argMax", snapshotForm{lease: argMaxRows, other: argMaxRows}},
	{"FINAL", snapshotForm{lease: finalRows, other: finalRows}},
	{"LIMIT_1_BY", snapshotForm{lease: limitByRows, other: limitByRows}},
	{"FINAL+lease_LIMIT_1_BY", snapshotNewest},
}
