package configsrc

import (
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/yamlpos"
	"go.yaml.in/yaml/v3"
)

// The scalar readers of a hunt file are yamlpos's, reporting through d.at; these wrappers keep
// the decoder's method names for the key decoders of every file in the package. Their messages
// name the key, the position and the kind of the offending value, never the value itself: a
// file can be anything a symlink or a mistake puts under the hunts directory, and messages
// reach CI logs and the runner's log.

func (d *decoder) str(v *yaml.Node, key string) (string, bool) { return yamlpos.Str(v, key, d.at) }

func (d *decoder) optStr(v *yaml.Node, key string) (string, bool) {
	return yamlpos.OptStr(v, key, d.at)
}

func (d *decoder) boolean(v *yaml.Node, key string) bool { return yamlpos.Bool(v, key, d.at) }

// duration reads a duration (interval, delay, max_catchup, timeout): yamlpos.Duration, in
// schedule's grammar, so every duration reads the same way.
func (d *decoder) duration(v *yaml.Node, key string, zeroOK bool) time.Duration {
	return yamlpos.Duration(v, key, zeroOK, d.at)
}

func allDigits(s string) bool { return yamlpos.AllDigits(s) }

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
	yamlpos.UnknownKey(k, prefix, known, d.at)
}

// Suggest returns the known name closest to s if it looks like a typo of it, "" otherwise
// (yamlpos.Suggest). Every did-you-mean uses it.
func Suggest(s string, known []string) string { return yamlpos.Suggest(s, known) }

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

func withoutValue(msg, value string) string { return yamlpos.WithoutValue(msg, value) }
