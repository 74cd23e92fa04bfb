package hunt

import (
	"strings"
	"testing"
)

func TestExplainer(t *testing.T) {
	h := Hunt{ID: "a", Severity: "low", Title: "login from {{ip}} for {{user}} ({{n}}, {{nothing}})", Dedup: "{{user}}", SeverityFrom: "sev", Hash: strings.Repeat("ab", 32)}
	e, err := h.Explainer()
	if err != nil {
		t.Fatal(err)
	}
	got := e.Explain(`{"ip":"10.0.0.1","user":"alice","n":3,"sev":"HIGH","nothing":null}`)
	if got != (Explained{Title: "login from 10.0.0.1 for alice (3, )", Severity: "high", DedupKey: "alice"}) {
		t.Fatalf("%+v", got)
	}
	// An unknown severity value, or a document that is not an object, falls back to the hunt's.
	if got := e.Explain(`{"sev":"urgent"}`); got.Severity != "low" || !got.SeverityFellBack {
		t.Fatalf("%+v", got)
	}
	if got := e.Explain(`"truncated"`); got.Severity != "low" || !got.SeverityFellBack || got.Title != "login from  for  (, )" {
		t.Fatalf("%+v", got)
	}
	// A rendered value is bounded in bytes and stays valid UTF-8.
	long := `{"user":"` + strings.Repeat("é", RenderedMaxBytes) + `"}`
	if k := e.Explain(long).DedupKey; len(k) > RenderedMaxBytes || !strings.HasPrefix(k, "é") || strings.ContainsRune(k, '\uFFFD') {
		t.Fatalf("dedup key %d bytes", len(k))
	}
	if h.Revision() != strings.Repeat("ab", 8) {
		t.Fatal(h.Revision())
	}
	h.Commit = "c0ffee"
	if d, c := SplitRevision(h.Revision()); d != strings.Repeat("ab", 8) || c != "c0ffee" {
		t.Fatal(h.Revision())
	}
}
