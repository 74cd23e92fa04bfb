package configsrc

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"go.yaml.in/yaml/v3"
)

// The scalar readers of a hunt file. Their messages name the key, the position and the kind of
// the offending value, never the value itself: a file can be anything a symlink or a mistake
// puts under the hunts directory, and messages reach CI logs and the runner's log.

// str reads a required string scalar. YAML turns unquoted numbers and booleans into other
// types; those are errors (quote the value), never silently converted.
func (d *decoder) str(v *yaml.Node, key string) (string, bool) {
	if v.Kind != yaml.ScalarNode {
		d.at(v, "%s must be a string, not %s", key, YAMLKind(v))
		return "", false
	}
	switch v.ShortTag() {
	case "!!str":
		return v.Value, true
	case "!!null":
		d.at(v, "%s is empty", key)
	default:
		d.at(v, "%s must be a string, not %s; quote the value", key, YAMLKind(v))
	}
	return "", false
}

func (d *decoder) optStr(v *yaml.Node, key string) (string, bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return "", true
	}
	return d.str(v, key)
}

func (d *decoder) boolean(v *yaml.Node, key string) bool {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!bool" {
		b, err := strconv.ParseBool(strings.ToLower(v.Value))
		if err == nil {
			return b
		}
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Style == 0 && isYAML11Bool(v.Value) {
		d.at(v, "%s: this value is a boolean only in YAML 1.1; write true or false", key)
		return true
	}
	d.at(v, "%s must be true or false, not %s", key, YAMLKind(v))
	return true
}

func isYAML11Bool(s string) bool {
	switch strings.ToLower(s) {
	case "yes", "no", "on", "off", "y", "n":
		return true
	}
	return false
}

// duration reads a duration (interval, delay, max_catchup, timeout) after the YAML-level
// checks; the text goes to schedule's parser so every duration reads the same way (only the
// wording of its errors differs between the interval and the others).
func (d *decoder) duration(v *yaml.Node, key string, zeroOK bool) time.Duration {
	if v.Kind != yaml.ScalarNode {
		d.at(v, "%s must be a duration such as 5m, not %s", key, YAMLKind(v))
		return 0
	}
	text := v.Value
	switch v.ShortTag() {
	case "!!str":
		if v.Style == 0 && isYAML11Bool(text) {
			d.at(v, "%s: the value is a boolean in YAML 1.1, not a duration; write a duration such as 5m", key)
			return 0
		}
		if v.Style == 0 && sexagesRe.MatchString(text) {
			d.at(v, "%s: the value is a base-60 number in YAML 1.1, not a duration; write it with units, such as 1h30m", key)
			return 0
		}
	case "!!int":
		if !allDigits(text) {
			d.at(v, "%s: the value is not a decimal number of seconds; write a duration such as 5m", key)
			return 0
		}
	case "!!float":
		d.at(v, "%s: the value is read by YAML as a floating-point number, not a duration; write whole units such as 1000s or 15m", key)
		return 0
	case "!!bool":
		d.at(v, "%s: the value is a boolean, not a duration; write a duration such as 5m", key)
		return 0
	case "!!null":
		d.at(v, "%s is empty; write a duration such as 5m", key)
		return 0
	default:
		d.at(v, "%s must be a duration such as 5m, not %s", key, YAMLKind(v))
		return 0
	}
	if zeroOK && isZero(text) {
		return 0
	}
	parse := schedule.ParseDuration
	if strings.HasSuffix(key, "interval") { // interval or schedule.interval
		parse = schedule.ParseInterval
	}
	dur, err := parse(text)
	if err != nil {
		d.at(v, "%s: %s", key, withoutValue(err.Error(), text))
		return 0
	}
	return dur
}

// allDigits tells a plain decimal from the other integers YAML reads (signed, 0x, 0o, with
// underscores), which a hunt author did not mean as a count or a number of seconds.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isZero(s string) bool {
	s = strings.TrimRight(strings.TrimSpace(s), "smhd")
	return s != "" && strings.Trim(s, "0") == ""
}

func (d *decoder) labels(v *yaml.Node) map[string]string {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		d.at(v, "labels must be a mapping such as {team: secops}, not %s", YAMLKind(v))
		return nil
	}
	order, f := d.fields(v, "labels.")
	out := make(map[string]string, len(order))
	total := 0
	for _, key := range order {
		k, n := f[key][0], f[key][1]
		if !labelRe.MatchString(key) {
			d.at(k, "label name is not valid: start with a letter or '_', then letters, digits, '_', '.', '-', at most %d bytes", MaxLabelNameBytes)
			continue
		}
		if s, ok := d.str(n, "labels."+key); ok {
			if len(s) > MaxLabelValueBytes {
				d.at(n, "labels.%s is %d bytes, more than %d; labels are copied into every finding", key, len(s), MaxLabelValueBytes)
				continue
			}
			if total += len(key) + len(s); total > MaxLabelsBytes {
				d.at(n, "labels add up to more than %d bytes (names and values); labels are copied into every finding", MaxLabelsBytes)
				return out
			}
			out[key] = s
		}
	}
	return out
}

func (d *decoder) unknownKey(k *yaml.Node, prefix string, known []string) {
	if msg, ok := legacyKeys[k.Value]; ok && prefix == "" {
		d.at(k, "%s", msg)
		return
	}
	if s := Suggest(k.Value, known); s != "" {
		d.at(k, "unknown key (did you mean %q?)", prefix+s)
		return
	}
	d.at(k, "unknown key; known keys: %s", strings.Join(sorted(known), ", "))
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

// queryPos maps a byte offset in the query's value to a file position. Block scalars (| and >)
// map line by line (exact for |, for > while lines are plain); single-line scalars map by
// column; anything else points at the value.
func (d *decoder) queryPos(n *yaml.Node, q string, off int) (line, col int) {
	if n.Style == yaml.LiteralStyle || n.Style == yaml.FoldedStyle {
		indent := -1
		valueOff := 0
		for i := n.Line; i < len(d.lines); i++ { // d.lines[n.Line] is the line after the indicator
			l := d.lines[i]
			if indent < 0 {
				if strings.TrimSpace(l) == "" {
					valueOff++
					continue
				}
				indent = len(l) - len(strings.TrimLeft(l, " "))
			}
			content := ""
			if len(l) >= indent {
				content = l[indent:]
			}
			if off <= valueOff+len(content) {
				return i + 1, indent + utf8.RuneCountInString(content[:max(0, off-valueOff)]) + 1
			}
			valueOff += len(content) + 1
		}
		return n.Line, n.Column
	}
	if !strings.Contains(q, "\n") && n.Line-1 < len(d.lines) {
		quote := 0
		if n.Style == yaml.DoubleQuotedStyle || n.Style == yaml.SingleQuotedStyle {
			quote = 1
		}
		return n.Line, n.Column + quote + utf8.RuneCountInString(q[:min(off, len(q))])
	}
	return n.Line, n.Column
}

// maxFindings reads max_findings: a whole number from 1 to hunt.MaxFindingsCeiling.
func (d *decoder) maxFindings(v *yaml.Node) int {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || !allDigits(v.Value) {
		d.at(v, "max_findings must be a whole number from 1 to %d, not %s", hunt.MaxFindingsCeiling, YAMLKind(v))
		return 0
	}
	n, err := strconv.Atoi(v.Value)
	if err != nil || n > hunt.MaxFindingsCeiling {
		d.at(v, "max_findings is above the ceiling of %d findings per run; a hunt that finds more is too broad to triage, narrow the query", hunt.MaxFindingsCeiling)
		return 0
	}
	if n < 1 {
		d.at(v, "max_findings must be at least 1")
		return 0
	}
	return n
}

// safeKey shows a key in a message only when it is one of the known keys (so its text is
// ours, not the file's).
func safeKey(k string) string {
	if slices.Contains(knownKeys, k) || k == "mode" || k == "interval" || k == "cron" {
		return strconv.Quote(k)
	}
	return "(a key)"
}

// withoutValue removes a value the schedule package quoted in its message. A unit it quotes
// ("min" of 5min) stays when it is a short word: the author cannot fix what is not named, and a
// few letters are no secret.
func withoutValue(msg, value string) string {
	if value == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, " "+strconv.Quote(value), "")
	msg = quotedRe.ReplaceAllStringFunc(msg, func(q string) string {
		if inner := q[1 : len(q)-1]; inner != "" && strings.Contains(value, inner) && !unitWordRe.MatchString(q) {
			return "…"
		}
		return q
	})
	msg = strings.ReplaceAll(msg, value, "the value")
	for _, f := range strings.Fields(value) {
		if len(f) >= 3 {
			msg = strings.ReplaceAll(msg, f, "…")
		}
	}
	return msg
}

var quotedRe = regexp.MustCompile(`"[^"]*"`)

// unitWordRe is a quoted unit short enough to name (min, secs, hours, weeks).
var unitWordRe = regexp.MustCompile(`^"[A-Za-z]{1,7}"$`)
