package schedule

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// dueTerms are the phrases of the package comment's due predicate, by the method of State or
// Row (or the function) that DueOn calls to decide that term.
var dueTerms = map[string][]string{
	"Live":         {"live (enabled, interval > 0)"},
	"LeaseFreeAt":  {"no lease", "newest lease_until <= now", "spent: its fire <= watermark"},
	"BackingOffAt": {"retry_after <= now"},
	"PausedAt":     {"not paused", "hunt_pause", "paused_until is set and <= now"},
	"Owed":         {"watermark < LatestFire(now)", "watermark < requested_fire <= now"},
}

// The package comment states the due predicate once, and every term DueOn decides on is in it:
// a term added to the code without the statement, or dropped from the statement, fails here.
func TestDocStatesDuePredicate(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// The statement wraps lines; compare with runs of spaces, tabs, newlines and "//" folded.
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(doc), "//", " ")), " ")
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "due.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var called []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "DueOn" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				switch e := c.Fun.(type) {
				case *ast.SelectorExpr:
					called = append(called, e.Sel.Name)
				case *ast.Ident:
					called = append(called, e.Name)
				}
			}
			return true
		})
	}
	if len(called) == 0 {
		t.Fatal("DueOn not found in due.go, or it calls nothing")
	}
	for _, name := range called {
		phrases, ok := dueTerms[name]
		if !ok {
			t.Errorf("DueOn decides on %s, which the package comment's due predicate does not state (add it there and to dueTerms)", name)
			continue
		}
		for _, p := range phrases {
			if !strings.Contains(text, p) {
				t.Errorf("the package comment's due predicate lacks %q (the %s term of DueOn)", p, name)
			}
		}
	}
}
