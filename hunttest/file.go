package hunttest

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/configsrc"
)

// File is one decoded *.test.yaml: the hunt under test and its cases.
type File struct {
	Path     string // as given, for messages
	Hunt     string
	HuntLine int
	Tests    []Case
}

// Case is one test of a file.
type Case struct {
	Name       string
	Line, Col  int
	Start, End time.Time // the values {window_start} and {window_end} receive
	WindowLine int
	WindowCol  int
	Tables     []Table
	Expect     []Row
	ExpectLine int
}

// Table is a fixture table, created as the hunt names it: "db.table", or "table" in the
// connection's default database.
type Table struct {
	Database string // "" for the default (scratch) database
	Name     string
	Line     int
	Col      int
	Columns  []Column
	Rows     []Row
}

// Column is a fixture column and its ClickHouse type.
type Column struct {
	Name, Type string
	Line, Col  int // of the type, where a type the server does not know is reported
}

// Row is a YAML mapping of column name to value, kept with positions.
type Row struct {
	Line, Col int
	Cells     []Cell
}

// Cell is one value of a row; JSON is its value as JSONEachRow input.
type Cell struct {
	Column    string
	JSON      json.RawMessage
	Line, Col int
}

// maxFileBytes matches the hunt files' limit: a test file is read whole.
const maxFileBytes = 1 << 20

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ReadFile reads and decodes one test file. Every problem names the file, line and column.
func ReadFile(path string) (*File, []configsrc.Problem) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []configsrc.Problem{{File: path, Line: 1, Column: 1, Message: "cannot read the test file: " + err.Error()}}
	}
	return Decode(path, data)
}

// Decode decodes a test file's content (see ReadFile).
func Decode(path string, data []byte) (*File, []configsrc.Problem) {
	d := &decoder{file: path}
	if len(data) > maxFileBytes {
		d.addf(1, 1, "test file is larger than 1 MiB")
		return nil, d.problems
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line := 1
		if m := yamlLineRe.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		d.addf(line, 1, "not valid YAML: %s", strings.TrimPrefix(yamlLineRe.ReplaceAllString(err.Error(), ""), "yaml: "))
		return nil, d.problems
	}
	if len(doc.Content) == 0 {
		d.addf(1, 1, "test file is empty; write hunt: ID and tests: [...]")
		return nil, d.problems
	}
	f := d.file1(doc.Content[0])
	if len(d.problems) > 0 {
		return nil, d.problems
	}
	f.Path = path
	return f, nil
}

var yamlLineRe = regexp.MustCompile(`line (\d+): `)

type decoder struct {
	file     string
	problems []configsrc.Problem
}

func (d *decoder) addf(line, col int, format string, args ...any) {
	d.problems = append(d.problems, configsrc.Problem{File: d.file, Line: line, Column: col, Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) at(n *yaml.Node, format string, args ...any) {
	d.addf(n.Line, n.Column, format, args...)
}

// mapping returns the keys and values of a mapping node in order, reporting duplicate keys
// and keys not in known (when known is non-nil).
func (d *decoder) mapping(n *yaml.Node, what string, known []string) ([]*yaml.Node, []*yaml.Node, bool) {
	if n.Kind != yaml.MappingNode {
		d.at(n, "%s must be a mapping, not %s", what, configsrc.YAMLKind(n))
		return nil, nil, false
	}
	var keys, vals []*yaml.Node
	seen := map[string]bool{}
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.at(k, "%s: a key must be a plain name", what)
			ok = false
			continue
		}
		if seen[k.Value] {
			d.at(k, "%s: duplicate key %q", what, k.Value)
			ok = false
			continue
		}
		seen[k.Value] = true
		if known != nil && !slices.Contains(known, k.Value) {
			d.at(k, "%s: unknown key %q (known: %s)", what, k.Value, strings.Join(known, ", "))
			ok = false
			continue
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals, ok
}

func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Value == "" {
		d.at(n, "%s must be a non-empty string, not %s", what, configsrc.YAMLKind(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) file1(root *yaml.Node) *File {
	f := &File{}
	keys, vals, _ := d.mapping(root, "test file", []string{"hunt", "tests"})
	var tests *yaml.Node
	for i, k := range keys {
		switch k.Value {
		case "hunt":
			f.Hunt, _ = d.str(vals[i], "hunt")
			f.HuntLine = k.Line
		case "tests":
			tests = vals[i]
		}
	}
	if f.HuntLine == 0 && root.Kind == yaml.MappingNode {
		d.at(root, "test file has no hunt: key naming the id of the hunt under test")
	}
	if tests == nil {
		if root.Kind == yaml.MappingNode {
			d.at(root, "test file has no tests: list")
		}
		return f
	}
	if tests.Kind != yaml.SequenceNode {
		d.at(tests, "tests must be a list, not %s", configsrc.YAMLKind(tests))
		return f
	}
	names := map[string]int{}
	for _, t := range tests.Content {
		c, ok := d.testCase(t)
		if !ok {
			continue
		}
		if prev, dup := names[c.Name]; dup {
			d.addf(c.Line, c.Col, "test %q is also defined on line %d; test names must be unique in a file", c.Name, prev)
			continue
		}
		names[c.Name] = c.Line
		f.Tests = append(f.Tests, c)
	}
	return f
}

func (d *decoder) testCase(n *yaml.Node) (Case, bool) {
	c := Case{Line: n.Line, Col: n.Column}
	before := len(d.problems)
	keys, vals, _ := d.mapping(n, "test", []string{"name", "window", "tables", "expect"})
	var have = map[string]bool{}
	for i, k := range keys {
		have[k.Value] = true
		v := vals[i]
		switch k.Value {
		case "name":
			c.Name, _ = d.str(v, "name")
		case "window":
			c.WindowLine, c.WindowCol = v.Line, v.Column
			c.Start, c.End = d.window(v)
		case "tables":
			c.Tables = d.tables(v)
		case "expect":
			c.ExpectLine = k.Line
			if v.Kind != yaml.SequenceNode {
				d.at(v, "expect must be a list of rows (expect: [] for a test that expects no findings), not %s", configsrc.YAMLKind(v))
				break
			}
			for _, r := range v.Content {
				if row, ok := d.row(r, "expect row", nil); ok {
					c.Expect = append(c.Expect, row)
				}
			}
		}
	}
	for _, key := range []string{"name", "window", "expect"} {
		if n.Kind == yaml.MappingNode && !have[key] {
			hint := ""
			if key == "expect" {
				hint = " (expect: [] for a test that expects no findings)"
			}
			d.at(n, "test has no %s:%s", key, hint)
		}
	}
	return c, len(d.problems) == before
}

func (d *decoder) window(n *yaml.Node) (start, end time.Time) {
	keys, vals, _ := d.mapping(n, "window", []string{"start", "end"})
	for i, k := range keys {
		t, err := time.Parse(time.RFC3339Nano, vals[i].Value)
		if vals[i].Kind != yaml.ScalarNode || err != nil {
			d.at(vals[i], "window %s must be an RFC 3339 time such as 2026-01-01T00:00:00Z", k.Value)
			continue
		}
		if k.Value == "start" {
			start = t.UTC()
		} else {
			end = t.UTC()
		}
	}
	switch {
	case len(keys) == 2 && !start.IsZero() && !end.IsZero() && !end.After(start):
		d.at(n, "window end must be after its start")
	case n.Kind == yaml.MappingNode && len(keys) < 2 && len(d.problems) == 0:
		d.at(n, "window needs both start and end")
	}
	return start, end
}

func (d *decoder) tables(n *yaml.Node) []Table {
	keys, vals, _ := d.mapping(n, "tables", nil)
	var out []Table
	for i, k := range keys {
		t := Table{Line: k.Line, Col: k.Column}
		parts := strings.Split(k.Value, ".")
		switch {
		case len(parts) == 1 && identRe.MatchString(parts[0]):
			t.Name = parts[0]
		case len(parts) == 2 && identRe.MatchString(parts[0]) && identRe.MatchString(parts[1]):
			t.Database, t.Name = parts[0], parts[1]
		default:
			d.at(k, "fixture table %q: write it as the hunt names it, database.table or table (letters, digits and _)", k.Value)
			continue
		}
		if reserved[strings.ToLower(t.Database)] {
			d.at(k, "fixture table %q: the %s database belongs to the server; a fixture cannot replace it", k.Value, t.Database)
			continue
		}
		tk, tv, _ := d.mapping(vals[i], "table "+k.Value, []string{"columns", "rows"})
		var rows *yaml.Node
		for j, key := range tk {
			if key.Value == "rows" {
				rows = tv[j]
				continue
			}
			ck, cv, _ := d.mapping(tv[j], "columns", nil)
			for m, name := range ck {
				if !identRe.MatchString(name.Value) {
					d.at(name, "column %q: a fixture column name is letters, digits and _", name.Value)
					continue
				}
				typ, ok := d.str(cv[m], "column "+name.Value+"'s type")
				if ok {
					t.Columns = append(t.Columns, Column{Name: name.Value, Type: typ, Line: cv[m].Line, Col: cv[m].Column})
				}
			}
		}
		if len(t.Columns) == 0 {
			d.at(k, "fixture table %q has no columns: (name: ClickHouse type)", k.Value)
			continue
		}
		if rows != nil {
			if rows.Kind != yaml.SequenceNode {
				d.at(rows, "rows must be a list of mappings, not %s", configsrc.YAMLKind(rows))
			} else {
				for _, r := range rows.Content {
					if row, ok := d.row(r, "row of "+k.Value, t.Columns); ok {
						t.Rows = append(t.Rows, row)
					}
				}
			}
		}
		out = append(out, t)
	}
	return out
}

// reserved databases are the server's own: a fixture never creates or replaces them.
var reserved = map[string]bool{"system": true, "information_schema": true}

// row decodes a mapping of column to value. With columns, every key must be one of them.
func (d *decoder) row(n *yaml.Node, what string, columns []Column) (Row, bool) {
	r := Row{Line: n.Line, Col: n.Column}
	keys, vals, ok := d.mapping(n, what, nil)
	for i, k := range keys {
		if columns != nil && !hasColumn(columns, k.Value) {
			d.at(k, "%s: no column %q in the table's columns: (%s)", what, k.Value, columnNames(columns))
			ok = false
			continue
		}
		v, err := jsonValue(vals[i])
		if err != nil {
			d.at(vals[i], "%s: %s: %v", what, k.Value, err)
			ok = false
			continue
		}
		r.Cells = append(r.Cells, Cell{Column: k.Value, JSON: v, Line: vals[i].Line, Col: vals[i].Column})
	}
	return r, ok
}

func hasColumn(cols []Column, name string) bool {
	for _, c := range cols {
		if c.Name == name {
			return true
		}
	}
	return false
}

func columnNames(cols []Column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// jsonValue renders a YAML value as JSONEachRow input. Scalars keep what YAML says they are
// (numbers, booleans, null); the server then parses each by its column's type, so a time
// written 2026-01-01T00:01:00Z reaches a DateTime64 column as that instant.
func jsonValue(n *yaml.Node) (json.RawMessage, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return json.RawMessage("null"), nil
		case "!!bool":
			b, err := strconv.ParseBool(n.Value)
			if err != nil {
				return nil, fmt.Errorf("not a boolean")
			}
			return json.Marshal(b)
		case "!!int", "!!float":
			if json.Valid([]byte(n.Value)) {
				return json.RawMessage(n.Value), nil
			}
			if i, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
				return json.Marshal(i)
			}
		}
		return json.Marshal(n.Value)
	case yaml.SequenceNode:
		parts := make([]json.RawMessage, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := jsonValue(c)
			if err != nil {
				return nil, err
			}
			parts = append(parts, v)
		}
		return json.Marshal(parts)
	case yaml.MappingNode:
		var b strings.Builder
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			v, err := jsonValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			b.Write(k)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteByte('}')
		return json.RawMessage(b.String()), nil
	}
	return nil, fmt.Errorf("anchors and aliases are not supported in a row")
}

// rowJSON is the row as one JSONEachRow line.
func rowJSON(r Row) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, c := range r.Cells {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(c.Column)
		b.Write(k)
		b.WriteByte(':')
		b.Write(c.JSON)
	}
	b.WriteByte('}')
	return b.String()
}
