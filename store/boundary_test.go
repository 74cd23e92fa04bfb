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

	"github.com/hunt-runner/hunt-runner/store/schema"
)

// The boundary: store (this directory and store/schema) is the only code that speaks SQL to
// hunt-runner's own tables. Outside it, in every non-test .go file of the module:
//
//   - a string literal that is SQL (holds a statement keyword) naming one of our tables or views
//     (schema.ObjectNames) as a whole word, or that is just such a name, is an offence: the
//     statement belongs in store, and the name has one spelling, store's constant;
//   - a table-name constant of store (an exported string constant of store/... whose value is
//     one of those names) may appear only as an argument of fmt.Errorf, to say which table an
//     error is about. Any other use (concatenated, formatted, quoted, handed to a helper that
//     builds a statement) is building SQL outside the store.
//
// The name lists themselves (schema.TableNames, schema.ObjectNames, schema.Grants) are data and
// may be used anywhere: provision's GRANTs and chstore's engine check take their names from
// them. A statement built from those lists is not caught; review keeps that rare.

// modulePath is the import path of this module; store's packages are under it.
const modulePath = "github.com/hunt-runner/hunt-runner"

// objectNames matches any of our tables or views as a whole word (hunt_watermark, but not
// hunt_watermark_v1, an upgrade's moved-aside table).
var objectNames = `(` + strings.Join(schema.ObjectNames(), "|") + `)\b`

// objectName finds a name in any text; inSQL finds one where SQL puts a table: after a keyword
// that takes one (optionally qualified by a database), or qualified by a database (db.t,
// %s.t, or a fragment ".t …" that follows a concatenated database). Prose that mentions a
// table ("SELECT, INSERT on hunt_lease", "stores its rows in hunt_findings") is not SQL.
var (
	objectName = regexp.MustCompile(`\b` + objectNames)
	inSQL      = regexp.MustCompile("(\\b(FROM|JOIN|INTO|TABLE|VIEW|EXISTS|UPDATE|ON)\\s+(\\S+\\.)?|^\\.|[\\w`%}]\\.)`?" + objectNames)
)

// boundary checks files outside store against the rule above.
type boundary struct {
	// tableConsts are the names of store's table-name constants, by package import path.
	tableConsts map[string]map[string]bool
}

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
	// errorfArgs are the nodes passed to fmt.Errorf: a table name there is error text. called
	// are the functions called (schema.TableNames is not a constant).
	errorfArgs, called := map[ast.Node]bool{}, map[ast.Node]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			called[n.Fun] = true
			if isStdCall(n, f, "fmt", "Errorf") {
				for _, a := range n.Args[1:] {
					errorfArgs[a] = true
				}
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			if m := inSQL.FindStringSubmatch(s); m != nil {
				report(n, "SQL on %s outside store: %.60q", m[len(m)-1], s)
			} else if name := objectName.FindString(s); name != "" && strings.Trim(s, "`.") == name {
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

// storeBoundary collects store's table-name constants from the source of store/... under root.
func storeBoundary(t *testing.T, root string) boundary {
	t.Helper()
	b := boundary{tableConsts: map[string]map[string]bool{}}
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
		if b.tableConsts[imp] == nil {
			b.tableConsts[imp] = map[string]bool{}
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
					if v, _ := strconv.Unquote(lit.Value); slices.Contains(names, v) {
						b.tableConsts[imp][id.Name] = true
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !b.tableConsts[modulePath+"/store/schema"]["TableLease"] {
		t.Fatalf("found no table-name constants in store/schema (got %v): the check would be vacuous", b.tableConsts)
	}
	return b
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
