package hunttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/configsrc"
	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/attrib"
	"github.com/hunt-runner/hunt-runner/runner"
)

// ScratchComment marks the databases a test run creates on a server (--clickhouse-url), so
// that a run never drops, nor fills, a database it did not create.
const ScratchComment = "hunt-runner test scratch database: created and dropped by `hunt-runner test`"

// Engine is where tests run.
type Engine struct {
	// Conn creates and drops the fixture databases and tables, and has the server check each
	// hunt (configsrc.CheckWithServer), as a runner's loader does.
	Conn driver.Conn
	// Open connects as hunts run, with database as the connection's default database (where a
	// hunt's unqualified table names resolve).
	Open func(ctx context.Context, database string) (driver.Conn, error)
	// Private says the engine is this run's own (the embedded one): a database a fixture names
	// may already exist there (default) and is used; its fixture tables are dropped afterwards.
	// On a shared server a fixture database must not exist: it is created, marked with
	// ScratchComment, and dropped afterwards.
	Private bool
	// Policy is what hunt queries may use, as for the runner.
	Policy configsrc.Policy
	// Workload is the workload class hunt queries run in (--workload-preview); empty: none.
	Workload string
}

// Status is a test's outcome.
type Status string

const (
	Pass  Status = "pass"
	Fail  Status = "fail"
	Error Status = "error" // the test could not be run as written: Problem says why and where
)

// Result is one test's outcome.
type Result struct {
	File     string
	Line     int
	Hunt     string
	Name     string
	Status   Status
	Problem  *configsrc.Problem
	Missing  []string // expected rows not found (over the columns expect names)
	Extra    []string // rows found and not expected
	Found    int      // findings the hunt returned
	Positive bool     // the test expects findings
	Duration time.Duration
}

// RunFile runs every test of f against hunt h (the hunt f names).
func (e *Engine) RunFile(ctx context.Context, f *File, h hunt.Hunt) []Result {
	var out []Result
	// The containment check the runner's loader applies: a hunt it would not run is not tested.
	checkErr := configsrc.CheckWithServer(ctx, e.Conn, h, e.Policy)
	for _, c := range f.Tests {
		r := Result{File: f.Path, Line: c.Line, Hunt: h.ID, Name: c.Name, Positive: len(c.Expect) > 0}
		start := time.Now()
		if checkErr != nil {
			r.Status = Error
			r.Problem = &configsrc.Problem{File: f.Path, Line: f.HuntLine, Column: 1,
				Message: fmt.Sprintf("hunt %s (%s) is not run by the runner: %v", h.ID, h.File, checkErr)}
		} else {
			e.runCase(ctx, f, h, c, &r)
		}
		r.Duration = time.Since(start)
		out = append(out, r)
	}
	return out
}

func (e *Engine) problem(r *Result, f *File, line, col int, format string, args ...any) {
	r.Status = Error
	r.Problem = &configsrc.Problem{File: f.Path, Line: line, Column: max(col, 1), Message: fmt.Sprintf(format, args...)}
}

func (e *Engine) runCase(ctx context.Context, f *File, h hunt.Hunt, c Case, r *Result) {
	fx := &fixture{e: e, f: f}
	defer fx.tearDown(context.WithoutCancel(ctx))
	if !fx.setUp(ctx, c, r) {
		return
	}
	if !fx.covers(ctx, c, r) {
		return
	}
	conn, err := e.Open(ctx, fx.defaultDB)
	if err != nil {
		e.problem(r, f, c.Line, 1, "connect as the hunt: %v", err)
		return
	}
	defer conn.Close()
	got, err := runner.Preview(ctx, conn, h, c.Start, c.End, attrib.Test, e.Workload)
	if err != nil {
		e.problem(r, f, c.Line, 1, "hunt %s failed on the fixtures: %s", h.ID, serverMessage(err))
		return
	}
	r.Found = len(got.Docs)
	if len(c.Expect) == 0 {
		r.Extra = got.Docs
		r.Status = statusOf(len(r.Extra) == 0)
		return
	}
	cols, ok := e.expectColumns(ctx, conn, f, h, c, r)
	if !ok {
		return
	}
	want, ok := e.canonExpect(ctx, f, cols, c.Expect, r)
	if !ok {
		return
	}
	have, err := canon(ctx, e.Conn, cols, got.Docs, true)
	if err != nil {
		e.problem(r, f, c.ExpectLine, 1, "read the hunt's findings by the expected columns' types: %s", serverMessage(err))
		return
	}
	r.Missing, r.Extra = setDiff(want, have), setDiff(have, want)
	r.Status = statusOf(len(r.Missing) == 0 && len(r.Extra) == 0)
}

func statusOf(ok bool) Status {
	if ok {
		return Pass
	}
	return Fail
}

// typedColumn is a hunt output column that expect names, with its ClickHouse type.
type typedColumn struct{ name, typ string }

// expectColumns are the columns expect names (every row must name the same ones), typed by
// the hunt's output as the server describes it.
func (e *Engine) expectColumns(ctx context.Context, conn driver.Conn, f *File, h hunt.Hunt, c Case, r *Result) ([]typedColumn, bool) {
	types, order, err := describe(ctx, conn, h.Query, c.Start, c.End)
	if err != nil {
		e.problem(r, f, c.Line, 1, "describe the hunt's output: %s", serverMessage(err))
		return nil, false
	}
	first := c.Expect[0]
	var cols []typedColumn
	for _, cell := range first.Cells {
		t, ok := types[cell.Column]
		if !ok {
			e.problem(r, f, cell.Line, cell.Col-len(cell.Column)-2, "expect names column %q, which hunt %s does not return (its columns: %s)",
				cell.Column, h.ID, strings.Join(order, ", "))
			return nil, false
		}
		cols = append(cols, typedColumn{cell.Column, t})
	}
	names := columnSet(first)
	for _, row := range c.Expect[1:] {
		if columnSet(row) != names {
			e.problem(r, f, row.Line, row.Col, "this expect row names the columns {%s}, the first names {%s}: every row of expect names the same columns, which are compared",
				columnSet(row), names)
			return nil, false
		}
	}
	return cols, true
}

func columnSet(r Row) string {
	names := make([]string, len(r.Cells))
	for i, c := range r.Cells {
		names[i] = c.Column
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// canonExpect renders the expected rows by the columns' types; a value that does not parse
// is placed in the file.
func (e *Engine) canonExpect(ctx context.Context, f *File, cols []typedColumn, rows []Row, r *Result) ([]string, bool) {
	lines := make([]string, len(rows))
	for i, row := range rows {
		lines[i] = rowJSON(row)
	}
	out, err := canon(ctx, e.Conn, cols, lines, false)
	if err == nil {
		if cell, typ := outOfRange(cols, rows, out); cell != nil {
			e.problem(r, f, cell.Line, cell.Col, "expect: %s is out of range for %s, the type of the hunt's column %s", string(cell.JSON), typ, cell.Column)
			return nil, false
		}
		seen := map[string]int{}
		for i, s := range out {
			if j, dup := seen[s]; dup {
				e.problem(r, f, rows[i].Line, rows[i].Col, "this expect row is the row on line %d again (by the columns' types); expect is a set", rows[j].Line)
				return nil, false
			}
			seen[s] = i
		}
		return out, true
	}
	types := map[string]string{}
	for _, c := range cols {
		types[c.name] = c.typ
	}
	if cell, cerr := locate(ctx, e.Conn, types, rows); cell != nil {
		e.problem(r, f, cell.Line, cell.Col, "expect: %s does not parse as %s, the type of the hunt's column %s: %s",
			string(cell.JSON), types[cell.Column], cell.Column, serverMessage(cerr))
		return nil, false
	}
	e.problem(r, f, rows[0].Line, rows[0].Col, "expect rows do not parse by the hunt's column types: %s", serverMessage(err))
	return nil, false
}

// canon renders each JSON row over cols as ClickHouse formats the values of the columns'
// types, so values compare by type (2026-01-01T00:01:00Z and 2026-01-01 00:01:00.000 are one
// DateTime64; "5" and 5 one UInt64). Findings carry other columns too (lenient skips them).
// One row per input line, in order.
func canon(ctx context.Context, conn driver.Conn, cols []typedColumn, rows []string, lenient bool) ([]string, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	structure := make([]string, len(cols))
	names := make([]string, len(cols))
	for i, c := range cols {
		structure[i] = quoteIdent(c.name) + " " + c.typ
		names[i] = quoteIdent(c.name)
	}
	sql := "SELECT formatRowNoNewline('JSONEachRow', " + strings.Join(names, ", ") + ") FROM format(JSONEachRow, " +
		quoteString(strings.Join(structure, ", ")) + ", " + quoteString(strings.Join(rows, "\n")) + ")"
	skip := 0
	if lenient {
		skip = 1
	}
	qctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"date_time_input_format": "best_effort", "input_format_skip_unknown_fields": skip,
		"max_query_size": len(sql) + 1024, "input_format_parallel_parsing": 0, // one row per line, in order
	}))
	res, err := conn.Query(qctx, sql)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	var out []string
	for res.Next() {
		var s string
		if err := res.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(rows) {
		return nil, fmt.Errorf("%d rows read back from %d", len(out), len(rows))
	}
	return out, nil
}

// locate finds the first cell of rows whose value does not parse as its column's type.
func locate(ctx context.Context, conn driver.Conn, types map[string]string, rows []Row) (*Cell, error) {
	for _, row := range rows {
		for i := range row.Cells {
			cell := &row.Cells[i]
			line := fmt.Sprintf("{%s:%s}", quoteJSONKey(cell.Column), cell.JSON)
			if _, err := canon(ctx, conn, []typedColumn{{cell.Column, types[cell.Column]}}, []string{line}, false); err != nil {
				return cell, err
			}
		}
	}
	return nil, nil
}

func quoteJSONKey(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// describe returns the hunt's output columns and their types (DESCRIBE of the query, with the
// window bound; nothing runs).
func describe(ctx context.Context, conn driver.Conn, query string, start, end time.Time) (map[string]string, []string, error) {
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
		"window_start": runner.EpochParam(start), "window_end": runner.EpochParam(end)}))
	rows, err := conn.Query(qctx, "DESCRIBE TABLE (\n"+configsrc.TrimQuery(query)+"\n)")
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	types := map[string]string{}
	var order []string
	for rows.Next() {
		var name, typ, dt, de, comment, codec, ttl string
		if err := rows.Scan(&name, &typ, &dt, &de, &comment, &codec, &ttl); err != nil {
			return nil, nil, err
		}
		types[name] = typ
		order = append(order, name)
	}
	return types, order, rows.Err()
}

func setDiff(a, b []string) []string {
	in := map[string]bool{}
	for _, s := range b {
		in[s] = true
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range a {
		if !in[s] && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// serverMessage is the first line of a ClickHouse error: what the server says, without the
// stack or the client's framing.
func serverMessage(err error) string {
	var ex *clickhouse.Exception
	msg := err.Error()
	if errors.As(err, &ex) {
		msg = fmt.Sprintf("code %d: %s", ex.Code, ex.Message)
	}
	if i := strings.Index(msg, "message: "); i >= 0 {
		msg = msg[i+len("message: "):]
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(msg), ":"))
}

func quoteIdent(s string) string {
	return "`" + strings.NewReplacer(`\`, `\\`, "`", "\\`").Replace(s) + "`"
}

func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var timeTypeRe = regexp.MustCompile(`^(Nullable\(|LowCardinality\()*(DateTime64|DateTime|Date32|Date)\b`)

var intTypeRe = regexp.MustCompile(`^(Nullable\(|LowCardinality\()*U?Int(8|16|32|64|128|256)\b`)

// outOfRange finds an integer written in rows that the server read as another value: its JSON
// input wraps an integer too large for its type (300 in a UInt8 reads as 44), which would make
// a wrong expectation pass. canonical holds the rows as the server read them, in order.
func outOfRange(cols []typedColumn, rows []Row, canonical []string) (*Cell, string) {
	types := map[string]string{}
	for _, c := range cols {
		if intTypeRe.MatchString(c.typ) {
			types[c.name] = c.typ
		}
	}
	if len(types) == 0 {
		return nil, ""
	}
	for i, row := range rows {
		if i >= len(canonical) {
			break
		}
		var read map[string]json.RawMessage
		if err := json.Unmarshal([]byte(canonical[i]), &read); err != nil {
			continue
		}
		for j := range row.Cells {
			cell := &row.Cells[j]
			typ, ok := types[cell.Column]
			if !ok {
				continue
			}
			in, isInt := integerText(cell.JSON)
			if !isInt {
				continue
			}
			if out, _ := integerText(read[cell.Column]); out != in {
				return cell, typ
			}
		}
	}
	return nil, ""
}

// integerText is an integer JSON value (a number, or a string holding one, as ClickHouse
// quotes 64-bit integers) as its decimal digits.
func integerText(v json.RawMessage) (string, bool) {
	s := strings.Trim(string(v), `"`)
	if !integerRe.MatchString(s) {
		return "", false
	}
	return s, true
}

var integerRe = regexp.MustCompile(`^-?[0-9]+$`)
