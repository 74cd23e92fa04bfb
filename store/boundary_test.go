package store_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// The boundary: store (this directory and store/schema) is the only code that speaks SQL to
// hunt-runner's own tables. Our objects are schema.ObjectNames plus the objects store itself
// names with a Table/View constant (store.ViewBacklog). Outside store, in every non-test .go
// file of the module:
//
//   - a string literal that is SQL naming one of our objects (after a keyword that takes a
//     table, qualified by a database, or quoted as a value in a statement), or that is just
//     such a name, is an offence: the statement belongs in store, and the name has one
//     spelling, store's constant;
//   - a table-name constant of store (an exported string constant of store/... whose value is
//     one of those names, or any Table*/View* constant there) may appear only as an argument of
//     fmt.Errorf, to say which table an error is about. Any other use (concatenated, formatted,
//     quoted, bound, handed to a helper that builds a statement) is building SQL outside store;
//   - the name lists schema.TableNames and schema.ObjectNames, or an element of them (a range
//     variable, an index, a variable holding the list), used in SQL: concatenated or formatted
//     with a SQL fragment, or passed to a call that sends a statement (Query, QueryRow, Exec,
//     Select, PrepareBatch, AsyncInsert), even as a bound parameter. A statement about our
//     tables' metadata (their engines in system.tables) is a statement on them.
//
// The lists may still be used as data: the containment check refuses a hunt naming one
// (slices.Contains(schema.ObjectNames(), t)). schema.Grants is the privilege list: provision
// builds its GRANTs from it (a privilege is not a statement on the table's rows), and cmd's
// help renders it as prose. Comments are never offences: the parser drops them.

// modulePath is the import path of this module; store's packages are under it.
const modulePath = "github.com/hunt-runner/hunt-runner"

// sqlFragment is text that reads as (part of) a statement: a keyword SQL spells in capitals.
// Prose in this codebase writes keywords in capitals only when it quotes SQL, and then
// names no table in a place where SQL puts one (inSQL), so a fragment with a keyword joined
// to one of our names is SQL.
var sqlFragment = regexp.MustCompile(`\b(SELECT|INSERT|FROM|JOIN|INTO|TABLE|VIEW|ALTER|CREATE|DROP|TRUNCATE|OPTIMIZE|EXISTS|DESCRIBE|SHOW|WHERE|GRANT|UPDATE|DELETE)\b|^\s*\.\s*$|^\.|%[sqv]\.%[sqv]`)

// boundary checks files outside store against the rule above.
type boundary struct {
	// tableConsts are the names of store's table-name constants, by package import path.
	tableConsts map[string]map[string]bool
	// objectName finds one of our objects as a whole word (hunt_watermark, but not
	// hunt_watermark_v1, an upgrade's moved-aside table); inSQL finds one where SQL puts a
	// table: after a keyword that takes one (optionally qualified by a database), qualified by
	// a database (db.t, %s.t, or a fragment ".t …" that follows a concatenated database). Prose
	// that mentions a table ("SELECT, INSERT on hunt_lease", "stores its rows in
	// hunt_findings") is not SQL. quoted finds one as a string value ('hunt_lease'), which is
	// SQL when the literal also holds a statement keyword.
	objectName, inSQL, quoted *regexp.Regexp
}

// newBoundary compiles the patterns for names, our objects.
func newBoundary(names []string, tableConsts map[string]map[string]bool) boundary {
	alt := `(` + strings.Join(names, "|") + `)\b`
	return boundary{
		tableConsts: tableConsts,
		objectName:  regexp.MustCompile(`\b` + alt),
		inSQL:       regexp.MustCompile("(\\b(FROM|JOIN|INTO|TABLE|VIEW|EXISTS|UPDATE|ON)\\s+(\\S+\\.)?|^\\.|[\\w`%}]\\.)`?" + alt),
		quoted:      regexp.MustCompile(`'` + alt + `'`),
	}
}

// statementCalls are the methods (of driver.Conn, driver.Batch and friends) that send a
// statement: a name list among their arguments is a statement on our tables.
var statementCalls = map[string]bool{"Query": true, "QueryRow": true, "Exec": true, "Select": true, "PrepareBatch": true, "AsyncInsert": true}

// nameLists are the functions of store/schema that list our objects.
var nameLists = map[string]bool{"TableNames": true, "ObjectNames": true}

// offences returns one line per offence in the parsed file f (named rel in messages).
func (b boundary) offences(fset *token.FileSet, rel string, f *ast.File) []string {
	imports := map[string]string{} // local name → import path, for store's packages
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if p != modulePath+"/store" && !strings.HasPrefix(p, modulePath+"/store/") {
			continue
		}
		name := path.Base(p)
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = p
	}
	var out []string
	report := func(n ast.Node, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s:%d: %s", rel, fset.Position(n.Pos()).Line, fmt.Sprintf(format, args...)))
	}
	// listed are the name-list calls (schema.TableNames()) and the identifiers that hold a list
	// or an element of one; isList reports whether e is one of them.
	listed := map[string]bool{}
	isListCall := func(e ast.Expr) bool {
		call, ok := e.(*ast.CallExpr)
		if !ok {
			return false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		return ok && imports[pkg.Name] == modulePath+"/store/schema" && nameLists[sel.Sel.Name]
	}
	var isList func(e ast.Expr) bool
	isList = func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return listed[e.Name]
		case *ast.IndexExpr:
			return isList(e.X)
		case *ast.SliceExpr:
			return isList(e.X)
		case *ast.ParenExpr:
			return isList(e.X)
		}
		return isListCall(e)
	}
	// First pass: which identifiers hold a list or an element (a := schema.TableNames(),
	// for _, t := range schema.TableNames(), t := names[0]). Scopes are ignored: a name reused
	// for something else in the same file errs on the side of an offence.
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Lhs) == len(n.Rhs) {
				for i, r := range n.Rhs {
					if id, ok := n.Lhs[i].(*ast.Ident); ok && isList(r) {
						listed[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for i, v := range n.Values {
				if i < len(n.Names) && isList(v) {
					listed[n.Names[i].Name] = true
				}
			}
		case *ast.RangeStmt:
			if isList(n.X) {
				if id, ok := n.Value.(*ast.Ident); ok {
					listed[id.Name] = true
				}
			}
		}
		return true
	})
	// usesList reports whether a name list, or an identifier holding one or its element,
	// occurs anywhere in e.
	usesList := func(e ast.Node) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			if x, ok := n.(ast.Expr); ok && isList(x) {
				found = true
			}
			return !found
		})
		return found
	}
	// sqlIn reports whether e holds a string literal that reads as SQL.
	sqlIn := func(e ast.Node) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && sqlFragment.MatchString(s) {
					found = true
				}
			}
			return !found
		})
		return found
	}
	// errorfArgs are the nodes passed to fmt.Errorf: a table name there is error text. called
	// are the functions called (schema.TableNames is not a constant). concatenated are the
	// nested + expressions already judged as a whole.
	errorfArgs, called, concatenated := map[ast.Node]bool{}, map[ast.Node]bool{}, map[ast.Node]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			called[n.Fun] = true
			if isStdCall(n, f, "fmt", "Errorf") {
				for _, a := range n.Args[1:] {
					errorfArgs[a] = true
				}
			}
			sel, _ := n.Fun.(*ast.SelectorExpr)
			switch {
			case sel != nil && statementCalls[sel.Sel.Name] && slices.ContainsFunc(n.Args, func(a ast.Expr) bool { return usesList(a) }):
				report(n, "%s sends a statement about our tables (schema's name list among its arguments): the statement belongs in store", sel.Sel.Name)
			case (isStdCall(n, f, "fmt", "Sprintf") || isStdCall(n, f, "fmt", "Fprintf") || isStdCall(n, f, "fmt", "Appendf")) &&
				sqlIn(n) && slices.ContainsFunc(n.Args, func(a ast.Expr) bool { return usesList(a) }):
				report(n, "SQL formatted with schema's name list outside store: the statement belongs in store")
			}
		case *ast.BinaryExpr:
			if n.Op != token.ADD || concatenated[n] {
				return true
			}
			ast.Inspect(n, func(m ast.Node) bool {
				if be, ok := m.(*ast.BinaryExpr); ok && be.Op == token.ADD {
					concatenated[be] = true
				}
				return true
			})
			if sqlIn(n) && usesList(n) {
				report(n, "SQL concatenated with schema's name list outside store: the statement belongs in store")
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			if m := b.inSQL.FindStringSubmatch(s); m != nil {
				report(n, "SQL on %s outside store: %.60q", m[len(m)-1], s)
			} else if m := b.quoted.FindStringSubmatch(s); m != nil && sqlFragment.MatchString(s) {
				report(n, "SQL on %s outside store: %.60q", m[1], s)
			} else if name := b.objectName.FindString(s); name != "" && strings.Trim(s, "`.") == name {
				report(n, "%s spelled out: use store's constant, in SQL built in store", name)
			}
		case *ast.SelectorExpr:
			pkg, ok := n.X.(*ast.Ident)
			if !ok || imports[pkg.Name] == "" || called[n] || errorfArgs[n] || !b.isTableConst(imports[pkg.Name], n.Sel.Name) {
				return true
			}
			report(n, "%s.%s used outside store (only fmt.Errorf may name a table here): the SQL it builds belongs in store", pkg.Name, n.Sel.Name)
		}
		return true
	})
	return out
}

// tableConstName is how store names its table constants (TableLease, ViewRuns), so that a
// constant a later change adds, or moves between store's packages, is caught before it exists.
var tableConstName = regexp.MustCompile(`^(Table|View)[A-Z]`)

// isTableConst reports whether name, in store's package pkg, is a table-name constant.
func (b boundary) isTableConst(pkg, name string) bool {
	return b.tableConsts[pkg][name] || tableConstName.MatchString(name)
}

// isStdCall reports whether call is pkg.fn(...) with pkg imported from the standard library.
func isStdCall(call *ast.CallExpr, f *ast.File, pkg, fn string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != fn || len(call.Args) == 0 {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && slices.ContainsFunc(f.Imports, func(im *ast.ImportSpec) bool { return im.Path.Value == strconv.Quote(pkg) })
}

// storeBoundary collects store's table-name constants, and the objects they name, from the
// source of store/... under root.
func storeBoundary(t *testing.T, root string) boundary {
	t.Helper()
	consts := map[string]map[string]bool{}
	names := schema.ObjectNames()
	err := filepath.WalkDir(filepath.Join(root, "store"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		imp := modulePath + "/" + filepath.ToSlash(rel)
		if consts[imp] == nil {
			consts[imp] = map[string]bool{}
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i >= len(vs.Values) || !id.IsExported() {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					switch {
					case slices.Contains(names, v):
						consts[imp][id.Name] = true
					case tableConstName.MatchString(id.Name) && regexp.MustCompile(`^hunt_\w+$`).MatchString(v):
						// An object store names beside schema's (store.ViewBacklog).
						consts[imp][id.Name] = true
						names = append(names, v)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !consts[modulePath+"/store/schema"]["TableLease"] {
		t.Fatalf("found no table-name constants in store/schema (got %v): the check would be vacuous", consts)
	}
	if !slices.Contains(names, store.ViewBacklog) {
		t.Fatalf("store's own objects (%s) are not in the names checked (%v)", store.ViewBacklog, names)
	}
	return newBoundary(names, consts)
}

// TestNoSQLOnOurTablesOutsideStore parses every non-test .go file of the module outside store
// (nested modules and testdata excluded) and fails on SQL naming our tables, or on a table-name
// constant building SQL.
func TestNoSQLOnOurTablesOutsideStore(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	b := storeBoundary(t, root)
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "store" || d.Name() == "testdata" || (rel != "." && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir // a nested module: not this module's code
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		found := b.offences(fset, rel, f)
		if len(found) == 0 {
			return nil
		}
		t.Errorf("%s builds SQL on hunt-runner's tables outside store; move it into store:\n  %s", rel, strings.Join(found, "\n  "))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("parsed only %d files under %s: the walk missed the module", files, root)
	}
}

// The check catches what it is for, on planted sources, and lets error text through.
func TestBoundaryCatchesPlantedOffenders(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	b := storeBoundary(t, root)
	cases := []struct {
		name, src string
		want      bool
	}{
		{"concatenated constant", `package runner
import "github.com/hunt-runner/hunt-runner/store"
var q = "SELECT hunt_id FROM " + store.TableLease`, true},
		{"schema constant", `package runner
import "github.com/hunt-runner/hunt-runner/store/schema"
var q = "SELECT hunt_id FROM " + schema.TableLease`, true},
		{"renamed import", `package runner
import s "github.com/hunt-runner/hunt-runner/store/schema"
var q = "SELECT hunt_id FROM " + s.TableWatermark`, true},
		{"private table helper", `package notify
import "github.com/hunt-runner/hunt-runner/store/schema"
func (st *deliveryStore) f() string { return st.table(schema.TableDelivery) }`, true},
		{"formatted", `package status
import ("fmt"; "github.com/hunt-runner/hunt-runner/store/schema")
var q = fmt.Sprintf("SELECT * FROM %s", schema.ViewRuns)`, true},
		{"literal", "package status\nvar q = `SELECT count() FROM db.hunt_findings_committed WHERE hunt_id = ?`", true},
		{"fragment after a database", `package status
var q = "SELECT count() FROM " + db + ".hunt_state WHERE hunt_id = ?"`, true},
		{"qualified", "package status\nvar q = `SELECT max(version) FROM %s.hunt_schema`", true},
		{"created", "package cmd\nvar q = `CREATE TABLE IF NOT EXISTS hunt_pause (x UInt8) ENGINE = Memory`", true},
		{"help text", `package cmd
var usage = "runner  SELECT, INSERT on hunt_lease and hunt_state; SELECT on hunt_schedule"`, false},
		{"prose with a keyword", `package legacy
var msg = "hunt-runner runs a read-only SELECT and stores its rows in hunt_findings"`, false},
		{"name spelled out", `package runner
var table = "hunt_state"`, true},
		{"error text", `package legacy
import ("fmt"; "github.com/hunt-runner/hunt-runner/store/schema")
func f(err error) error { return fmt.Errorf("read %s: %w", schema.TableLease, err) }`, false},
		{"message naming a table", `package runner
var msg = "hunt_lease is missing: run hunt-runner schema"`, false},
		{"moved-aside table", `package runner
var q = "SELECT count() FROM hunt_watermark_v1"`, false},
		{"name lists", `package configsrc
import ("slices"; "github.com/hunt-runner/hunt-runner/store/schema")
func ours(t string) bool { return slices.Contains(schema.ObjectNames(), t) }`, false},

		// What the outside scan found, one case each (docs/architecture.md, The boundary).
		{"metadata read bound to the name list (chstore's engines)", `package chstore
import "github.com/hunt-runner/hunt-runner/store/schema"
func engines(ctx context.Context, conn driver.Conn, db string) {
	conn.Query(ctx, "SELECT name, engine FROM system.tables WHERE database = ? AND has(?, name)", db, schema.TableNames())
}`, true},
		{"name list bound through clickhouse.Named", `package chstore
import "github.com/hunt-runner/hunt-runner/store/schema"
func engines(ctx context.Context, conn driver.Conn) {
	conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE has({t:Array(String)}, name)", clickhouse.Named("t", schema.TableNames()))
}`, true},
		{"our view named by a constant outside store (provision's backlog view)", `package provision
const BacklogView = "hunt_backlog_v1"`, true},
		{"our view's name bound in a metadata read (cmd's schema)", `package main
import "github.com/hunt-runner/hunt-runner/store"
func f(ctx context.Context, conn driver.Conn, db string) {
	conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", db, store.ViewBacklog)
}`, true},
		{"our view formatted into a read (shim's backlog query)", `package shim
import ("fmt"; "github.com/hunt-runner/hunt-runner/store"; "github.com/hunt-runner/hunt-runner/store/schema")
func q(db string) string { return fmt.Sprintf("SELECT value FROM %s.%s", schema.QuoteIdent(db), schema.QuoteIdent(store.ViewBacklog)) }`, true},
		{"our view in a literal", "package shim\nvar q = `SELECT value FROM hunt_runner.hunt_backlog_v1`", true},
		{"our table quoted as a value in a statement", `package cmd
var q = "SELECT engine FROM system.tables WHERE name = 'hunt_lease'"`, true},
		{"concatenated with a ranged name", `package cmd
import "github.com/hunt-runner/hunt-runner/store/schema"
func f(ctx context.Context, conn driver.Conn) {
	for _, t := range schema.TableNames() {
		q := "OPTIMIZE TABLE " + t + " FINAL"
		_ = conn.Exec(ctx, q)
	}
}`, true},
		{"formatted with a ranged name held in a variable", `package cmd
import ("fmt"; "github.com/hunt-runner/hunt-runner/store/schema")
func f(db string) (out []string) {
	names := schema.ObjectNames()
	for _, t := range names {
		out = append(out, fmt.Sprintf("SELECT count() FROM %s.%s", db, t))
	}
	return out
}`, true},
		{"qualified with an indexed name", `package cmd
import "github.com/hunt-runner/hunt-runner/store/schema"
func f(db string) string { return db + "." + schema.TableNames()[0] }`, true},
		{"joined list in a statement", `package cmd
import ("strings"; "github.com/hunt-runner/hunt-runner/store/schema")
var q = "SELECT name FROM system.tables WHERE name IN ('" + strings.Join(schema.TableNames(), "', '") + "')"`, true},
		{"statement in a comment", `package runner
// storeFindings writes the findings: INSERT INTO hunt_findings (hunt_id, run_id) VALUES (?, ?),
// read back with SELECT count() FROM db.hunt_findings_committed.
func storeFindings() {}`, false},
		{"message naming a table (configsrc's decoder)", `package configsrc
var msg = "target is not supported; hunt-runner stores findings in hunt_findings itself, remove it"`, false},
		{"message with a column of a view (runner's error record)", `package runner
import "fmt"
func f(code int32) error { return fmt.Errorf("ClickHouse error code %d (it is in the run's record, hunt_runs.error)", code) }`, false},
		{"grants rendered from schema.Grants (provision, cmd's help)", `package provision
import ("fmt"; "github.com/hunt-runner/hunt-runner/store/schema")
func privs(db string, id schema.Identity) (out []string) {
	for _, a := range schema.Grants(id) {
		out = append(out, fmt.Sprintf("SELECT ON %s.%s", schema.QuoteIdent(db), schema.QuoteIdent(a.Table)))
	}
	return out
}`, false},
		{"name list used as data beside a statement", `package configsrc
import ("slices"; "github.com/hunt-runner/hunt-runner/store/schema")
func check(ctx context.Context, conn driver.Conn, t string) error {
	if slices.Contains(schema.ObjectNames(), t) {
		return errRefused
	}
	return conn.QueryRow(ctx, "SELECT version()").Scan(new(string))
}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "planted.go", tc.src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			got := b.offences(fset, "planted.go", f)
			if (len(got) > 0) != tc.want {
				t.Errorf("offences = %q, want an offence: %v", got, tc.want)
			}
		})
	}
}
