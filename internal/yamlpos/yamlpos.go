// Package yamlpos is the one positioned-YAML reader of hunt-runner's files: hunt files
// (configsrc), the notify config (notify) and the legacy report (legacy) walk yaml.v3 nodes with
// it. It names node kinds, follows aliases, reads mapping pairs in order with duplicate-key
// detection, reads typed scalars (string, whole number, boolean, duration in the project's
// grammar), refuses unknown keys with a did-you-mean, and collects problems at file:line:col.
//
// Its readers report through an At, so each caller keeps its own problem type; messages name
// the key, the position and the kind of the offending value, never the value itself, because
// they reach CI logs and the runner's log.
package yamlpos

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// At reports a problem at a node (at line 1, column 1 when the node is nil).
type At func(n *yaml.Node, format string, args ...any)

// Problem is one thing wrong with a file, positioned for an editor.
type Problem struct {
	File         string
	Line, Column int
	Message      string
}

func (p Problem) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
}

// Problems is every problem found in a file, in the order found; Error joins them one per line.
type Problems []Problem

func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Error()
	}
	return strings.Join(s, "\n")
}

// Addf adds a problem at line and col of file; positions below 1 become 1, so an editor can
// always jump to it.
func (ps *Problems) Addf(file string, line, col int, format string, args ...any) {
	*ps = append(*ps, Problem{File: file, Line: max(line, 1), Column: max(col, 1), Message: fmt.Sprintf(format, args...)})
}

// At adds a problem at n's position in file (line 1, column 1 when n is nil).
func (ps *Problems) At(file string, n *yaml.Node, format string, args ...any) {
	line, col := 1, 1
	if n != nil {
		line, col = n.Line, n.Column
	}
	ps.Addf(file, line, col, format, args...)
}

// Kind names what a YAML node is, for messages such as "tests must be a list, not a mapping":
// every positioned reader of hunt-runner's YAML files words it the same way.
func Kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "empty (null)"
		case "!!bool":
			return "a boolean"
		case "!!int", "!!float":
			return "a number"
		}
		return "a string"
	}
	return "an alias"
}

// maxAliasDepth bounds Deref: yaml.v3 refuses alias cycles, this keeps a bug from looping.
const maxAliasDepth = 16

// Deref follows aliases (*name) to the node they name.
func Deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < maxAliasDepth; i++ {
		n = n.Alias
	}
	return n
}

// IsNull tells an empty value (key:, ~, null).
func IsNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// Pair is one key and its value in a mapping, aliases followed.
type Pair struct{ Key, Value *yaml.Node }

// Pairs returns the mapping's pairs in file order. A key that is not a plain string, and a
// second occurrence of a key, are reported and left out: the first occurrence wins. where
// prefixes the key in messages ("labels."); name shows a key in a message (nil: quoted), so a
// caller can keep unknown key text out of messages.
func Pairs(m *yaml.Node, where string, name func(string) string, at At) []Pair {
	if name == nil {
		name = func(k string) string { return fmt.Sprintf("%q", k) }
	}
	var out []Pair
	first := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := Deref(m.Content[i]), Deref(m.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			at(k, "%skeys must be plain names, not %s", where, Kind(k))
			continue
		}
		if line, dup := first[k.Value]; dup {
			at(k, "duplicate key %s (first at line %d)", name(where+k.Value), line)
			continue
		}
		first[k.Value] = k.Line
		out = append(out, Pair{k, v})
	}
	return out
}

// Index maps a mapping's keys to their pairs without reporting anything, for a reader that
// only looks (the legacy report); the last occurrence of a key wins, as a plain YAML load
// reads it.
func Index(m *yaml.Node) map[string]Pair {
	out := map[string]Pair{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := Deref(m.Content[i])
		out[k.Value] = Pair{k, Deref(m.Content[i+1])}
	}
	return out
}

// UnknownKey refuses key k, naming the closest of known when it looks like a typo and every
// known key otherwise. prefix is the path of the mapping ("schedule.").
func UnknownKey(k *yaml.Node, prefix string, known []string, at At) {
	if s := Suggest(k.Value, known); s != "" {
		at(k, "unknown key (did you mean %q?)", prefix+s)
		return
	}
	at(k, "unknown key; known keys: %s", strings.Join(sorted(known), ", "))
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// Suggest returns the known name closest to s by edit distance, if it is close enough to be a
// typo (at most a third of the name, at least 1 and at most 3 edits), or if s is a case or
// separator variant; "" otherwise. Ties go to the earliest in known. Every did-you-mean uses it.
func Suggest(s string, known []string) string {
	norm := func(x string) string { return strings.ReplaceAll(strings.ToLower(x), "-", "_") }
	best, bestD := "", 1<<30
	for _, k := range known {
		if norm(s) == norm(k) {
			return k
		}
		if dist := levenshtein(norm(s), k); dist < bestD {
			best, bestD = k, dist
		}
	}
	if bestD <= min(3, max(1, len(best)/3)) {
		return best
	}
	return ""
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// UnknownNamedKey is UnknownKey for a file whose keys may be shown in messages (the notify
// config, written by the operator): the message names the key, quoted and cut to 64 bytes.
func UnknownNamedKey(k *yaml.Node, prefix string, known []string, at At) {
	if s := Suggest(k.Value, known); s != "" {
		at(k, "unknown key %s (did you mean %q?)", Printable(prefix+k.Value), prefix+s)
		return
	}
	at(k, "unknown key %s; known keys: %s", Printable(prefix+k.Value), strings.Join(sorted(known), ", "))
}

// maxShown is how much of a file's own text a message may quote.
const maxShown = 64

// Printable quotes s for a message, cut to maxShown bytes.
func Printable(s string) string {
	if len(s) > maxShown {
		s = strings.ToValidUTF8(s[:maxShown], "") + "…"
	}
	return strconv.Quote(s)
}

var (
	syntaxLineRe = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)
	// yaml.v3 quotes pieces of the document in some messages (anchors, tags, characters):
	// they are replaced, so a message never carries file content.
	syntaxQuotedRe = regexp.MustCompile("'[^']*'|\"[^\"]*\"|`[^`]*`")
)

// SyntaxError reads a yaml.v3 syntax error as the line it names (1 when it names none) and its
// message without the "yaml: line N:" prefix and without the pieces of the document it quotes.
func SyntaxError(err error) (line int, msg string) {
	msg, line = err.Error(), 1
	if m := syntaxLineRe.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return max(line, 1), syntaxQuotedRe.ReplaceAllString(msg, "…")
}
