package yamlpos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// root parses doc and returns its top node.
func root(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	return n.Content[0]
}

// collect returns an At that records "line:col: message".
func collect(out *[]string) At {
	return func(n *yaml.Node, format string, args ...any) {
		*out = append(*out, fmt.Sprintf("%d:%d: ", n.Line, n.Column)+fmt.Sprintf(format, args...))
	}
}

func TestKind(t *testing.T) {
	m := root(t, "a: [1]\nb: {x: 1}\nc: ~\nd: true\ne: 3\nf: 1.5\ng: text\nh: &x 1\ni: *x\n")
	want := map[string]string{"a": "a list", "b": "a mapping", "c": "empty (null)", "d": "a boolean",
		"e": "a number", "f": "a number", "g": "a string", "h": "a number"}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i].Value, m.Content[i+1]
		if k == "i" {
			if got := Kind(v); got != "an alias" {
				t.Errorf("alias: %q", got)
			}
			if got := Kind(Deref(v)); got != "a number" {
				t.Errorf("deref alias: %q", got)
			}
			continue
		}
		if got := Kind(v); got != want[k] {
			t.Errorf("%s: Kind = %q, want %q", k, got, want[k])
		}
	}
}

func TestPairsDuplicatesAndKeyKinds(t *testing.T) {
	var got []string
	m := root(t, "a: 1\nb: 2\n? [x]\n: 3\na: 4\n")
	pairs := Pairs(m, "labels.", nil, collect(&got))
	if len(pairs) != 2 || pairs[0].Key.Value != "a" || pairs[0].Value.Value != "1" || pairs[1].Key.Value != "b" {
		t.Fatalf("pairs = %+v, want a=1 then b (first occurrence wins, in order)", pairs)
	}
	want := []string{`3:3: labels.keys must be plain names, not a list`, `5:1: duplicate key "labels.a" (first at line 1)`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = nil
	Pairs(root(t, "secret: 1\nsecret: 2\n"), "", func(string) string { return "(a key)" }, collect(&got))
	if len(got) != 1 || strings.Contains(got[0], "secret") {
		t.Fatalf("name hook not applied: %q", got)
	}
	if idx := Index(root(t, "a: 1\na: 2\n")); idx["a"].Value.Value != "2" {
		t.Fatalf("Index: last occurrence must win, got %q", idx["a"].Value.Value)
	}
}

func TestScalars(t *testing.T) {
	m := Index(root(t, "s: text\nn: 5\nq: '5'\nnull:\nb: true\ny11: yes\nqy: 'yes'\nd: 1d2h\nz: 0\nsx: 1:30\nf: 1.5\nneg: -5\n"))
	var got []string
	at := collect(&got)
	if s, ok := Str(m["s"].Value, "s", at); !ok || s != "text" {
		t.Errorf("Str(s) = %q %v", s, ok)
	}
	if s, ok := Str(m["q"].Value, "q", at); !ok || s != "5" {
		t.Errorf("Str(quoted number) = %q %v", s, ok)
	}
	if _, ok := Str(m["n"].Value, "n", at); ok {
		t.Error("Str accepted an unquoted number")
	}
	if s, ok := OptStr(m["null"].Value, "null", at); !ok || s != "" {
		t.Errorf("OptStr(null) = %q %v", s, ok)
	}
	if !Bool(m["b"].Value, "b", at) {
		t.Error("Bool(true) = false")
	}
	Bool(m["y11"].Value, "y11", at)
	if _, ok := BoolValue(m["qy"].Value); ok {
		t.Error("BoolValue read a quoted 'yes' as a boolean")
	}
	if n, ok := IntValue(m["neg"].Value); !ok || n != -5 || AllDigits(m["neg"].Value.Value) {
		t.Errorf("IntValue(-5) = %d %v", n, ok)
	}
	if d := Duration(m["d"].Value, "delay", false, at); d != 26*time.Hour {
		t.Errorf("Duration(1d2h) = %v, want 26h (days are in the grammar)", d)
	}
	if d := Duration(m["z"].Value, "delay", true, at); d != 0 {
		t.Errorf("Duration(0, zeroOK) = %v", d)
	}
	Duration(m["z"].Value, "timeout", false, at)
	Duration(m["sx"].Value, "delay", false, at)
	Duration(m["f"].Value, "delay", false, at)
	Duration(m["y11"].Value, "delay", false, at)
	want := []string{
		"2:4: n must be a string, not a number; quote the value",
		"6:6: y11: this value is a boolean only in YAML 1.1; write true or false",
		"9:4: timeout: ",
		"10:5: delay: the value is a base-60 number in YAML 1.1",
		"11:4: delay: the value is read by YAML as a floating-point number",
		"6:6: delay: the value is a boolean in YAML 1.1",
	}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

func TestDurationMessageHidesValue(t *testing.T) {
	var got []string
	Duration(root(t, "5minutes"), "delay", false, collect(&got))
	if len(got) != 1 || strings.Contains(got[0], "5minutes") {
		t.Fatalf("message must not carry the value: %q", got)
	}
}

func TestSuggestAndUnknownKey(t *testing.T) {
	known := []string{"interval", "query", "timeout"}
	for in, want := range map[string]string{"intervl": "interval", "QUERY": "query", "time-out": "timeout", "zzz": "", "q": ""} {
		if got := Suggest(in, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
	var got []string
	m := root(t, "quer: 1\nbogus: 2\n")
	UnknownKey(m.Content[0], "schedule.", known, collect(&got))
	UnknownKey(m.Content[2], "", known, collect(&got))
	want := "1:1: unknown key (did you mean \"schedule.query\"?)\n2:1: unknown key; known keys: interval, query, timeout"
	if strings.Join(got, "\n") != want {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}

func TestProblemsPositions(t *testing.T) {
	var ps Problems
	ps.At("f.yaml", nil, "empty")
	ps.At("f.yaml", root(t, "a:\n  b: 1\n").Content[1].Content[1], "b is %d", 1)
	ps.Addf("f.yaml", 0, -3, "clamped")
	want := "f.yaml:1:1: empty\nf.yaml:2:6: b is 1\nf.yaml:1:1: clamped"
	if ps.Error() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", ps.Error(), want)
	}
}

func TestUnknownNamedKey(t *testing.T) {
	var got []string
	m := root(t, "timout: 1\n"+strings.Repeat("k", 100)+": 2\n")
	UnknownNamedKey(m.Content[0], "sink.", []string{"url", "timeout"}, collect(&got))
	UnknownNamedKey(m.Content[2], "", []string{"url", "timeout"}, collect(&got))
	want := "1:1: unknown key \"sink.timout\" (did you mean \"sink.timeout\"?)\n2:1: unknown key \"" + strings.Repeat("k", 64) + "…\"; known keys: timeout, url"
	if strings.Join(got, "\n") != want {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}

func TestSyntaxError(t *testing.T) {
	for doc, wantLine := range map[string]int{"a: 1\nb: *s3cr3t\n": 1, "a: 1\nb: 's3cr3t\n": 2} {
		var n yaml.Node
		err := yaml.Unmarshal([]byte(doc), &n)
		if err == nil {
			t.Fatalf("%q parsed", doc)
		}
		line, msg := SyntaxError(err)
		if line != wantLine || strings.Contains(msg, "s3cr3t") || strings.HasPrefix(msg, "yaml:") || msg == "" {
			t.Errorf("SyntaxError(%q) = %d, %q; want line %d and no document text", err, line, msg, wantLine)
		}
	}
}
