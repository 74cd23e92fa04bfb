package hunttest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/runner"
)

// Estimate is what the server expects one window of a hunt to read (`cost --estimate`).
type Estimate struct {
	Hunt   string      `json:"hunt"`
	Window Window      `json:"window"` // the last whole window before now; Findings is empty
	Tables []TableRead `json:"tables"`
	// Plan is EXPLAIN indexes = 1 of the statement, for people: which index pruned what.
	Plan string `json:"plan"`
}

// TableRead is one MergeTree table the statement reads.
type TableRead struct {
	Database string `json:"database"`
	Table    string `json:"table"`
	// Parts, Rows and Granules are EXPLAIN ESTIMATE's: what the window would read.
	Parts    uint64 `json:"parts"`
	Rows     uint64 `json:"rows"`
	Granules uint64 `json:"granules"`
	// TotalGranules is every granule of the parts the indexes looked at (EXPLAIN indexes = 1,
	// the first index's initial granules); Selected what the last index kept.
	TotalGranules uint64 `json:"total_granules"`
	Selected      uint64 `json:"selected_granules"`
	// FullScan: no index or partition key pruned a single granule of a non-empty table, so
	// every window reads all of it and the hunt costs more as the table grows.
	FullScan bool `json:"full_scan"`
}

// EstimateHunt asks the server what the last whole window of h before now would read. The hunt
// passes the runner's containment check on check first, so no statement of an unchecked hunt
// reaches the server; the EXPLAINs then run on hunts (the identity fires run as) with the
// exact statement, parameters and settings of a fire (runner.Statement).
func EstimateHunt(ctx context.Context, check, hunts driver.Conn, policy configsrc.Policy, h hunt.Hunt, now time.Time) (Estimate, error) {
	h = h.WithDefaults()
	if err := configsrc.CheckWithServer(ctx, check, h, policy); err != nil {
		return Estimate{}, fmt.Errorf("hunt %s (%s) is not run by the runner: %w", h.ID, h.File, err)
	}
	ws := Windows(h, now.Add(-2*h.Interval), now)
	if len(ws) == 0 {
		return Estimate{}, fmt.Errorf("hunt %s has no whole window before %s", h.ID, rfc(now))
	}
	w := ws[len(ws)-1]
	w.Findings = []string{}
	query, params, settings, err := runner.Statement(h, w.Start, w.End, attrib.Estimate)
	if err != nil {
		return Estimate{}, err
	}
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(params), clickhouse.WithSettings(settings))
	est := Estimate{Hunt: h.ID, Window: w}
	byTable := map[[2]string]*TableRead{}
	rows, err := hunts.Query(qctx, "EXPLAIN ESTIMATE "+query)
	if err != nil {
		return Estimate{}, fmt.Errorf("EXPLAIN ESTIMATE of hunt %s: %s", h.ID, serverMessage(err))
	}
	for rows.Next() {
		var t TableRead
		if err := rows.Scan(&t.Database, &t.Table, &t.Parts, &t.Rows, &t.Granules); err != nil {
			rows.Close()
			return Estimate{}, err
		}
		byTable[[2]string{t.Database, t.Table}] = &t
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Estimate{}, fmt.Errorf("EXPLAIN ESTIMATE of hunt %s: %s", h.ID, serverMessage(err))
	}
	var plan string
	if err := hunts.QueryRow(qctx, "EXPLAIN json = 1, indexes = 1 "+query).Scan(&plan); err != nil {
		return Estimate{}, fmt.Errorf("EXPLAIN indexes = 1 of hunt %s: %s", h.ID, serverMessage(err))
	}
	reads, err := mergeTreeReads(plan)
	if err != nil {
		return Estimate{}, fmt.Errorf("EXPLAIN indexes = 1 of hunt %s: %w", h.ID, err)
	}
	for _, r := range reads {
		t := byTable[[2]string{r.database, r.table}]
		if t == nil {
			t = &TableRead{Database: r.database, Table: r.table}
			byTable[[2]string{r.database, r.table}] = t
		}
		t.TotalGranules += r.initial
		t.Selected += r.selected
		if r.indexed {
			t.FullScan = t.FullScan || (r.initial > 0 && r.selected == r.initial)
		} else {
			t.FullScan = t.FullScan || t.Granules > 0 // nothing to prune with
		}
	}
	for _, t := range byTable {
		est.Tables = append(est.Tables, *t)
	}
	sort.Slice(est.Tables, func(i, j int) bool {
		a, b := est.Tables[i], est.Tables[j]
		return a.Database < b.Database || a.Database == b.Database && a.Table < b.Table
	})
	text, err := hunts.Query(qctx, "EXPLAIN indexes = 1 "+query)
	if err != nil {
		return Estimate{}, fmt.Errorf("EXPLAIN indexes = 1 of hunt %s: %s", h.ID, serverMessage(err))
	}
	defer text.Close()
	for text.Next() {
		var line string
		if err := text.Scan(&line); err != nil {
			return Estimate{}, err
		}
		est.Plan += line + "\n"
	}
	return est, text.Err()
}

// mergeTreeRead is one ReadFromMergeTree step of a plan: its table and granules before the
// first index and after the last.
type mergeTreeRead struct {
	database, table   string
	initial, selected uint64
	indexed           bool // the plan lists indexes for it
}

// planNode is the part of EXPLAIN json = 1, indexes = 1 that says what a read prunes.
type planNode struct {
	Type        string     `json:"Node Type"`
	Description string     `json:"Description"`
	Plans       []planNode `json:"Plans"`
	Indexes     []struct {
		Initial  uint64 `json:"Initial Granules"`
		Selected uint64 `json:"Selected Granules"`
	} `json:"Indexes"`
}

// mergeTreeReads finds every ReadFromMergeTree of a JSON plan. A read the plan lists no indexes
// for keeps every granule: its counts are left zero and EXPLAIN ESTIMATE's stand.
func mergeTreeReads(plan string) ([]mergeTreeRead, error) {
	var doc []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		return nil, fmt.Errorf("the server's plan is not the JSON expected: %w", err)
	}
	var out []mergeTreeRead
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Type == "ReadFromMergeTree" {
			r := mergeTreeRead{}
			r.database, r.table, _ = strings.Cut(n.Description, ".") // the plan does not quote names
			if r.indexed = len(n.Indexes) > 0; r.indexed {
				r.initial, r.selected = n.Indexes[0].Initial, n.Indexes[len(n.Indexes)-1].Selected
			}
			out = append(out, r)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	for _, d := range doc {
		walk(d.Plan)
	}
	return out, nil
}
