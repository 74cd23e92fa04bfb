package hunttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// fixture is one test's tables: a scratch database for unqualified names, the databases the
// fixtures name, and what was created, to drop afterwards.
type fixture struct {
	e         *Engine
	f         *File
	defaultDB string
	dropDBs   []string // created by this test: dropped whole
	dropTabs  []string // created in a database that was already there (private engine only)
}

// setUp creates the databases and tables of c and loads its rows. Nothing on a shared server
// is touched unless this test created it: a database that exists there is refused.
func (fx *fixture) setUp(ctx context.Context, c Case, r *Result) bool {
	e, f := fx.e, fx.f
	fx.defaultDB = "hr_test_" + randomSuffix()
	if err := fx.createDB(ctx, fx.defaultDB); err != nil {
		e.problem(r, f, c.Line, 1, "create the scratch database: %s", serverMessage(err))
		return false
	}
	ready := map[string]bool{}
	for _, t := range c.Tables {
		db := t.Database
		if db == "" {
			db = fx.defaultDB
		}
		if db != fx.defaultDB && !ready[db] {
			if !fx.prepareDB(ctx, db, t, r) {
				return false
			}
			ready[db] = true
		}
		if !fx.createTable(ctx, db, t, r) {
			return false
		}
	}
	return true
}

func (fx *fixture) createDB(ctx context.Context, db string) error {
	err := fx.e.Conn.Exec(ctx, "CREATE DATABASE "+quoteIdent(db)+" COMMENT "+quoteString(ScratchComment))
	if err == nil {
		fx.dropDBs = append(fx.dropDBs, db)
	}
	return err
}

// prepareDB makes the database a fixture names, as the hunt names it, without touching one
// that belongs to someone: on a shared server it must not exist.
func (fx *fixture) prepareDB(ctx context.Context, db string, t Table, r *Result) bool {
	e, f := fx.e, fx.f
	var n uint64
	var comment string
	row := e.Conn.QueryRow(ctx, "SELECT count(), any(comment) FROM system.databases WHERE name = {db:String}",
		clickhouse.Named("db", db))
	if err := row.Scan(&n, &comment); err != nil {
		// Older servers have no comment column; their databases count as not ours.
		if err = e.Conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = {db:String}",
			clickhouse.Named("db", db)).Scan(&n); err != nil {
			e.problem(r, f, t.Line, t.Col, "look up database %s: %s", db, serverMessage(err))
			return false
		}
	}
	switch {
	case n == 0:
		if err := fx.createDB(ctx, db); err != nil {
			e.problem(r, f, t.Line, t.Col, "create fixture database %s: %s", db, serverMessage(err))
			return false
		}
	case e.Private:
	case comment == ScratchComment:
		e.problem(r, f, t.Line, t.Col, "fixture database %s is a scratch database of another `hunt-runner test` on this server "+
			"(running now, or stopped before it could drop it); when no test runs there, drop it (DROP DATABASE %s)", db, db)
		return false
	default:
		e.problem(r, f, t.Line, t.Col, "fixture database %s exists on this server and is not a test's scratch database: a test "+
			"creates the databases its fixtures name and drops them afterwards, so it never writes into a real one; run the "+
			"tests on the embedded engine (no --clickhouse-url), or on a server without a database %s", db, db)
		return false
	}
	return true
}

func (fx *fixture) createTable(ctx context.Context, db string, t Table, r *Result) bool {
	e, f := fx.e, fx.f
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = quoteIdent(c.Name) + " " + c.Type
	}
	name := quoteIdent(db) + "." + quoteIdent(t.Name)
	if err := e.Conn.Exec(ctx, "CREATE TABLE "+name+" ("+strings.Join(cols, ", ")+") ENGINE = Memory"); err != nil {
		for _, c := range t.Columns { // place the error at the type the server does not know
			if terr := e.Conn.Exec(ctx, "SELECT defaultValueOfTypeName("+quoteString(c.Type)+")"); terr != nil {
				e.problem(r, f, c.Line, c.Col, "column %s: the type %s does not parse: %s", c.Name, c.Type, serverMessage(terr))
				return false
			}
		}
		e.problem(r, f, t.Line, t.Col, "create fixture table %s.%s: %s", db, t.Name, serverMessage(err))
		return false
	}
	if !slices.Contains(fx.dropDBs, db) {
		fx.dropTabs = append(fx.dropTabs, name)
	}
	if len(t.Rows) == 0 {
		return true
	}
	lines := make([]string, len(t.Rows))
	for i, row := range t.Rows {
		lines[i] = rowJSON(row)
	}
	typed := make([]typedColumn, len(t.Columns))
	for i, c := range t.Columns {
		typed[i] = typedColumn{c.Name, c.Type}
	}
	if read, err := canon(ctx, e.Conn, typed, lines, false); err == nil {
		if cell, typ := outOfRange(typed, t.Rows, read); cell != nil {
			e.problem(r, f, cell.Line, cell.Col, "row of %s: %s is out of range for %s, the type of column %s", tableName(t), string(cell.JSON), typ, cell.Column)
			return false
		}
	}
	structure := strings.Join(cols, ", ")
	sql := "INSERT INTO " + name + " SELECT * FROM format(JSONEachRow, " + quoteString(structure) + ", " +
		quoteString(strings.Join(lines, "\n")) + ")"
	qctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"date_time_input_format": "best_effort", "input_format_skip_unknown_fields": 0, "max_query_size": len(sql) + 1024}))
	if err := e.Conn.Exec(qctx, sql); err != nil {
		types := map[string]string{}
		for _, c := range t.Columns {
			types[c.Name] = c.Type
		}
		if cell, cerr := locate(ctx, e.Conn, types, t.Rows); cell != nil {
			e.problem(r, f, cell.Line, cell.Col, "row of %s: %s does not parse as %s, the type of column %s: %s",
				tableName(t), string(cell.JSON), types[cell.Column], cell.Column, serverMessage(cerr))
			return false
		}
		e.problem(r, f, t.Line, t.Col, "load the rows of %s: %s", tableName(t), serverMessage(err))
		return false
	}
	return true
}

func tableName(t Table) string {
	if t.Database == "" {
		return t.Name
	}
	return t.Database + "." + t.Name
}

// covers refuses a window that lies wholly outside the times of the fixture rows: the hunt
// could read none of them, and a test expecting nothing would pass for that reason alone.
func (fx *fixture) covers(ctx context.Context, c Case, r *Result) bool {
	var lo, hi time.Time
	for _, t := range c.Tables {
		if len(t.Rows) == 0 {
			continue
		}
		db := t.Database
		if db == "" {
			db = fx.defaultDB
		}
		for _, col := range t.Columns {
			if !timeTypeRe.MatchString(col.Type) {
				continue
			}
			var n uint64
			var mn, mx time.Time
			q := fmt.Sprintf("SELECT count(%[1]s), min(toDateTime64(%[1]s, 3, 'UTC')), max(toDateTime64(%[1]s, 3, 'UTC')) FROM %s.%s",
				quoteIdent(col.Name), quoteIdent(db), quoteIdent(t.Name))
			if err := fx.e.Conn.QueryRow(ctx, q).Scan(&n, &mn, &mx); err != nil {
				fx.e.problem(r, fx.f, col.Line, col.Col, "read the time range of %s.%s: %s", tableName(t), col.Name, serverMessage(err))
				return false
			}
			if n == 0 {
				continue
			}
			if lo.IsZero() || mn.Before(lo) {
				lo = mn
			}
			if mx.After(hi) {
				hi = mx
			}
		}
	}
	if lo.IsZero() || (c.End.After(lo) && !c.Start.After(hi)) {
		return true
	}
	fx.e.problem(r, fx.f, c.WindowLine, c.WindowCol, "window [%s, %s) lies outside the fixture rows' times (%s to %s): the hunt could read none of them; move the window or the rows",
		rfc(c.Start), rfc(c.End), rfc(lo), rfc(hi))
	return false
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// tearDown drops what setUp created, whatever happened in between.
func (fx *fixture) tearDown(ctx context.Context) {
	for _, t := range fx.dropTabs {
		_ = fx.e.Conn.Exec(ctx, "DROP TABLE IF EXISTS "+t+" SYNC")
	}
	for _, db := range fx.dropDBs {
		_ = fx.e.Conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(db)+" SYNC")
	}
}
