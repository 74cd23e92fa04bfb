package schema

import (
	"context"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Upgrades of older layouts, run by Apply before and after it creates what is missing. Each
// step is idempotent and never drops data: a table whose key must change is renamed to
// <name>_v1 and copied into the new layout, and the copy skips rows already there, so an
// upgrade cut short is finished by the next `schema`. The old tables stay for the operator to
// drop once satisfied (CHANGELOG.md says how).

// legacyTables are the first layout's tables whose sorting key changed in version 2.
var legacyTables = []struct{ name, oldKey string }{
	{TableWatermark, "hunt_id"},
	{TableFindings, "hunt_id, fire, finding_id"},
}

// legacyView is the first layout's view from hunt_watermark to hunt_run; it holds no data.
const legacyView = "hunt_watermark_run"

func legacyName(table string) string { return table + "_v1" }

// prepareUpgrade moves first-layout tables aside so that DDL creates them anew. It returns
// the names of the moved tables.
func prepareUpgrade(ctx context.Context, conn driver.Conn, database, onCluster string) ([]string, error) {
	db := QuoteIdent(database)
	keys, err := sortingKeys(ctx, conn, database)
	if err != nil {
		return nil, err
	}
	var moved []string
	for _, lt := range legacyTables {
		key, ok := keys[lt.name]
		if !ok || key != lt.oldKey {
			continue
		}
		if _, done := keys[legacyName(lt.name)]; done {
			return nil, fmt.Errorf("upgrade: both %s (old layout) and %s exist; drop one by hand", lt.name, legacyName(lt.name))
		}
		if lt.name == TableWatermark {
			if err := conn.Exec(ctx, "DROP VIEW IF EXISTS "+db+"."+QuoteIdent(legacyView)+onCluster); err != nil {
				return nil, fmt.Errorf("upgrade: drop view %s: %w", legacyView, err)
			}
		}
		if err := conn.Exec(ctx, "RENAME TABLE "+db+"."+QuoteIdent(lt.name)+" TO "+db+"."+QuoteIdent(legacyName(lt.name))+onCluster); err != nil {
			return nil, fmt.Errorf("upgrade: move %s aside: %w", lt.name, err)
		}
		moved = append(moved, lt.name)
	}
	return moved, nil
}

// finishUpgrade copies moved-aside tables into the new layout and records the version. It
// returns what it did, one line each.
func finishUpgrade(ctx context.Context, conn driver.Conn, database, onCluster string) ([]string, error) {
	db := QuoteIdent(database)
	var v uint32
	if err := conn.QueryRow(ctx, "SELECT toUInt32(max(version)) FROM "+db+"."+QuoteIdent(TableSchema)).Scan(&v); err != nil {
		return nil, fmt.Errorf("upgrade: read %s: %w", TableSchema, err)
	}
	if v >= Version {
		return nil, nil // the copies completed before the version was recorded
	}
	var did []string
	keys, err := sortingKeys(ctx, conn, database)
	if err != nil {
		return nil, err
	}
	for _, lt := range legacyTables {
		if _, ok := keys[legacyName(lt.name)]; !ok {
			continue
		}
		for _, q := range copyStatements(db, lt.name) {
			if err := conn.Exec(ctx, q); err != nil {
				return nil, fmt.Errorf("upgrade: copy %s into the new layout: %w", legacyName(lt.name), err)
			}
		}
		did = append(did, fmt.Sprintf("copied %s into %s (version %d layout); drop %s once satisfied",
			legacyName(lt.name), lt.name, Version, legacyName(lt.name)))
	}
	rollup, err := upgradeRollup(ctx, conn, database, onCluster)
	if err != nil {
		return nil, err
	}
	did = append(did, rollup...)
	note := "created"
	if len(did) > 0 {
		note = "upgraded: " + strings.Join(did, "; ")
	}
	if err := conn.Exec(ctx, "INSERT INTO "+db+"."+QuoteIdent(TableSchema)+" (version, applied, note) SELECT ?, now64(6), ?",
		uint32(Version), note); err != nil {
		return nil, fmt.Errorf("upgrade: record version: %w", err)
	}
	return did, nil
}

// copyStatements copy a moved-aside table into its new layout, skipping rows already copied.
func copyStatements(db, table string) []string {
	old := db + "." + QuoteIdent(legacyName(table))
	cur := db + "." + QuoteIdent(table)
	switch table {
	case TableWatermark:
		run := db + "." + QuoteIdent(TableRun)
		// Every commit of the first layout is a succeeded row in hunt_run (with its gap row
		// under the same run_id); the old hunt_watermark adds seeded rows that have no run.
		return []string{
			`INSERT INTO ` + cur + ` (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows,
    run_started, gap_start, gap_end, findings_dropped, kind)
SELECT s.hunt_id, s.fire, toUUID('00000000-0000-0000-0000-000000000000'), s.finished, s.run_id, s.owner,
    s.window_start, s.rows_written, s.started, g.window_start, g.window_end, 0, 'scheduled'
FROM (SELECT * FROM ` + run + ` WHERE status = 'succeeded') AS s
LEFT JOIN (SELECT run_id, window_start, window_end FROM ` + run + ` WHERE status = 'gap') AS g ON g.run_id = s.run_id
WHERE (s.hunt_id, s.fire) NOT IN (SELECT hunt_id, watermark FROM ` + cur + `)
SETTINGS join_use_nulls = 0`,
			`INSERT INTO ` + cur + ` (hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows,
    run_started, gap_start, gap_end, findings_dropped, kind)
SELECT hunt_id, watermark, claim_id, updated, run_id, run_owner, run_start, run_rows, run_started, gap_start, gap_end,
    0, 'scheduled'
FROM ` + old + `
WHERE (hunt_id, watermark) NOT IN (SELECT hunt_id, watermark FROM ` + cur + `)`,
		}
	case TableFindings:
		cols := "hunt_id, fire, finding_id, finding, severity, labels, run_id, found"
		return []string{`INSERT INTO ` + cur + ` (` + cols + `)
SELECT ` + cols + ` FROM ` + old + `
WHERE (hunt_id, fire, run_id, finding_id) NOT IN (SELECT hunt_id, fire, run_id, finding_id FROM ` + cur + `)`}
	}
	return nil
}

// tableColumn is one declared column an existing table lacks.
type tableColumn struct {
	table string
	col   column
}

// missingColumns lists, for every coordination table that exists, the columns of its current
// layout it lacks, in declaration order. Columns added within a layout version (in place, by
// Apply) are what it finds on a database whose `schema` has not been re-run.
func missingColumns(ctx context.Context, conn driver.Conn, database string) ([]tableColumn, error) {
	rows, err := conn.Query(ctx, "SELECT table, name FROM system.columns WHERE database = ?", database)
	if err != nil {
		return nil, fmt.Errorf("read system.columns: %w", err)
	}
	have := map[string]map[string]bool{}
	for rows.Next() {
		var t, c string
		if err := rows.Scan(&t, &c); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read system.columns: %w", err)
		}
		if have[t] == nil {
			have[t] = map[string]bool{}
		}
		have[t][c] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read system.columns: %w", err)
	}
	var out []tableColumn
	for _, tb := range tables {
		cols, ok := have[tb.name]
		if !ok {
			continue
		}
		for _, c := range tb.columns {
			if !cols[c.name] {
				out = append(out, tableColumn{tb.name, c})
			}
		}
	}
	return out, nil
}

// addMissingColumns adds, to every coordination table that exists, the columns of its current
// layout it lacks (at the end, with their type's default for existing rows).
func addMissingColumns(ctx context.Context, conn driver.Conn, database, onCluster string) ([]string, error) {
	missing, err := missingColumns(ctx, conn, database)
	if err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	var did []string
	for _, m := range missing {
		q := "ALTER TABLE " + QuoteIdent(database) + "." + QuoteIdent(m.table) + onCluster +
			" ADD COLUMN IF NOT EXISTS " + QuoteIdent(m.col.name) + " " + m.col.typ
		if err := conn.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("upgrade: add column %s.%s: %w", m.table, m.col.name, err)
		}
		did = append(did, "added column "+m.table+"."+m.col.name)
	}
	return did, nil
}

func sortingKeys(ctx context.Context, conn driver.Conn, database string) (map[string]string, error) {
	rows, err := conn.Query(ctx, "SELECT name, sorting_key FROM system.tables WHERE database = ?", database)
	if err != nil {
		return nil, fmt.Errorf("upgrade: read system.tables: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, k string
		if err := rows.Scan(&n, &k); err != nil {
			return nil, fmt.Errorf("upgrade: read system.tables: %w", err)
		}
		out[n] = k
	}
	return out, rows.Err()
}
