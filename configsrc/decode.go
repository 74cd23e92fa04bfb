package configsrc

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/yamlpos"
	"github.com/hunt-runner/hunt-runner/schedule"
	"go.yaml.in/yaml/v3"
)

// The defaults of the hunt fields are the hunt package's (hunt.WithDefaults); these are the
// decoder's own.
const (
	DefaultTimestampField = "_timestamp_load" // of the legacy {window} token, as the earlier runner
	maxFileSize           = 1 << 20
)

// Ceilings of what one hunt may ask for, in the unit that costs. Labels are copied into every
// finding row and notification and the description into notifications, so they are capped in
// bytes; a timeout is how long one run may hold a query slot.
const (
	MaxDescriptionBytes = 4 << 10
	MaxLabelNameBytes   = 63 // labelRe
	MaxLabelValueBytes  = 256
	MaxLabelsBytes      = 4 << 10 // every label's name and value together
	MaxTimeout          = time.Hour
)

var (
	idRe       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	labelRe    = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z_][A-Za-z0-9_.-]{0,%d}$`, MaxLabelNameBytes-1))
	fieldRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)
	severities = []string{"info", "low", "medium", "high", "critical"}
)

var knownKeys = []string{"id", "description", "interval", "cron", "schedule", "enabled", "query",
	"delay", "max_catchup", "timeout", "severity", "labels", "timestamp_field", "checkpoint_timestamp_field", "max_findings",
	"notify", "suppress", "sources", "max_rows_read", "max_bytes_read", "on_budget",
	"title", "dedup", "severity_from", "runbook", "mitre", "exceptions", "exceptions_from"}

// legacyKeys are keys of the earlier runner and its API that have no meaning here; each gets a
// message saying what to do instead of a bare "unknown key".
var legacyKeys = map[string]string{
	"rules":                    "rules: (compiled rule files) is not supported; write the detection as one SELECT in query:",
	"global_source_table_name": "global_source_table_name is not supported; name the source table in query:",
	"global_target_table_name": "global_target_table_name is not supported; hunt-runner stores findings in hunt_findings itself, remove it",
	"target":                   "target is not supported; hunt-runner stores findings in hunt_findings itself, remove it",
	"name":                     "name is not read; the hunt id is id: (default: the file name), and free text goes in description:",
	"hunt_id":                  "hunt_id is not read; write id: instead",
	"display_name":             "display_name is not read; use description:",
	"customers":                "customers is a field of the earlier runner's API and has no effect here; remove it",
	"customer_filters":         "customer_filters is a field of the earlier runner's API and has no effect here; remove it",
	"log_buffer":               "log_buffer is not supported; use delay: for late-arriving data",
	"scheduling_mode":          "scheduling_mode is not supported; hunts run at interval: or cron:",
	"min_interval_seconds":     "min_interval_seconds is not supported; remove it",
	"explain_queries":          "explain_queries is not supported; run `hunt-runner validate --clickhouse-url …` to have the server check the query",
}

// parsed is a decoded hunt with the position of its id, for duplicate reports.
type parsed struct {
	hunt          hunt.Hunt
	idLine, idCol int
	from          []fromRef // exceptions_from:, resolved by buildSet
	invalid       bool      // resolving its exceptions found a problem: not loaded
}

// decoder decodes one hunt file; it collects problems instead of stopping at the first.
type decoder struct {
	file     string
	policy   Policy
	lines    []string
	fraction float64
	problems []Problem
	// scheduleReported: the schedule: block already has a problem, so a missing schedule is
	// not reported a second time.
	scheduleReported bool
}

func (d *decoder) addf(line, col int, format string, args ...any) {
	d.problems = append(d.problems, Problem{File: d.file, Line: max(line, 1), Column: max(col, 1), Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) at(n *yaml.Node, format string, args ...any) {
	d.addf(n.Line, n.Column, format, args...)
}

// decodeHunt parses one hunt file. file is the path relative to the source root (forward
// slashes); fraction the spread fraction for phase offsets. It returns the hunt when the file
// is valid, and every problem found otherwise.
func decodeHunt(file string, data []byte, fraction float64) (parsed, []Problem) {
	return decodeHuntPolicy(file, data, fraction, Policy{})
}

// decodeHuntPolicy is decodeHunt with the operator's query policy.
func decodeHuntPolicy(file string, data []byte, fraction float64, policy Policy) (parsed, []Problem) {
	d := &decoder{file: file, fraction: fraction, policy: policy}
	p, ok := d.decode(data)
	if !ok || len(d.problems) > 0 {
		return parsed{}, d.problems
	}
	return p, nil
}

func (d *decoder) decode(data []byte) (parsed, bool) {
	if len(data) > maxFileSize {
		d.addf(1, 1, "file is %d bytes; a hunt file may be at most %d", len(data), maxFileSize)
		return parsed{}, false
	}
	if !utf8.Valid(data) {
		line, col := invalidUTF8Pos(data)
		d.addf(line, col, "file is not valid UTF-8")
		return parsed{}, false
	}
	d.lines = strings.Split(string(data), "\n")
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.addf(1, 1, "file is empty; a hunt needs at least query: and interval: (or cron:)")
		} else {
			d.yamlError(err)
		}
		return parsed{}, false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		d.addf(line, 1, "a second YAML document (after ---); put each hunt in its own file")
		return parsed{}, false
	} else if !errors.Is(err, io.EOF) {
		d.yamlError(err)
		return parsed{}, false
	}
	if len(doc.Content) == 0 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].ShortTag() == "!!null") {
		d.addf(1, 1, "file is empty; a hunt needs at least query: and interval: (or cron:)")
		return parsed{}, false
	}
	root := deref(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		d.at(root, "a hunt file must be a mapping of keys (id, interval, query, …), not %s", YAMLKind(root))
		return parsed{}, false
	}
	return d.hunt(root, strings.TrimSuffix(path.Base(d.file), path.Ext(d.file)))
}

// yamlError turns a yaml.v3 syntax error into a positioned problem. yaml.v3 reports lines but
// not columns; a tab in indentation, the most common cause, is located exactly.
func (d *decoder) yamlError(err error) {
	line, msg := yamlpos.SyntaxError(err)
	for i, l := range d.lines {
		if i+1 > line+1 {
			break
		}
		indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if j := strings.IndexByte(indent, '\t'); j >= 0 && strings.TrimSpace(l) != "" {
			d.addf(i+1, j+1, "tab character in indentation; YAML indents with spaces only")
			return
		}
	}
	if open, at := unclosedFlow(d.lines, line); open != 0 {
		d.addf(line, 1, "YAML syntax: %s (the %c on line %d is never closed)", msg, open, at)
		return
	}
	d.addf(line, 1, "YAML syntax: %s", msg)
}

// unclosedFlow finds a flow collection ({…} or […]) opened on a line before upTo and not
// closed on that line, the usual cause of a confusing error further down.
func unclosedFlow(lines []string, upTo int) (open rune, line int) {
	for i := 0; i < upTo-1 && i < len(lines); i++ {
		var stack []rune
		quote := rune(0)
	scan:
		for _, r := range lines[i] {
			switch {
			case quote != 0:
				if r == quote {
					quote = 0
				}
			case r == '\'' || r == '"':
				quote = r
			case r == '#':
				break scan
			case r == '{' || r == '[':
				stack = append(stack, r)
			case (r == '}' || r == ']') && len(stack) > 0:
				stack = stack[:len(stack)-1]
			}
		}
		if len(stack) > 0 {
			return stack[0], i + 1
		}
	}
	return 0, 0
}

func invalidUTF8Pos(data []byte) (line, col int) {
	line, col = 1, 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			return line, col
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		data = data[size:]
	}
	return line, col
}

func deref(n *yaml.Node) *yaml.Node { return yamlpos.Deref(n) }

// YAMLKind names what a YAML node is, for messages such as "tests must be a list, not a
// mapping" (yamlpos.Kind): every positioned reader of hunt-runner's YAML files words it the same way.
func YAMLKind(n *yaml.Node) string { return yamlpos.Kind(n) }

// fields collects the mapping's keys, reporting duplicates and non-string keys (yamlpos.Pairs).
func (d *decoder) fields(m *yaml.Node, where string) ([]string, map[string][2]*yaml.Node) {
	pairs := yamlpos.Pairs(m, where, func(k string) string { return where + safeKey(k[len(where):]) }, d.at)
	order := make([]string, 0, len(pairs))
	out := make(map[string][2]*yaml.Node, len(pairs))
	for _, p := range pairs {
		out[p.Key.Value] = [2]*yaml.Node{p.Key, p.Value}
		order = append(order, p.Key.Value)
	}
	return order, out
}

// schedSource is one way the file names a schedule (interval, cron, schedule.interval, …).
type schedSource struct {
	key  string
	node *yaml.Node
	cron bool
}

func (d *decoder) hunt(root *yaml.Node, stem string) (parsed, bool) {
	var p parsed
	h := &p.hunt
	h.File, h.Line, h.Enabled = d.file, 1, true
	order, f := d.fields(root, "")
	k := d.keys(&p, order, f)
	d.identity(&p, k.idSet, stem)
	d.scheduleOf(h, root, k.scheds)
	d.limits(h, k)
	d.queryOf(h, root, k, f["rules"][0] != nil)
	if len(d.problems) > 0 {
		return p, false
	}
	d.budgetDefaults(h)
	*h = h.WithDefaults()
	h.Hash = h.ComputeHash()
	return p, true
}

// huntKeys is what the top-level keys gave that is checked only once every key is read: the
// schedule, the limits that depend on the interval, and the query with its timestamp field.
type huntKeys struct {
	scheds                         []schedSource
	query, delay, catchup, timeout *yaml.Node
	ts                             *yaml.Node // timestamp_field or checkpoint_timestamp_field
	tsField, tsKey                 string
	idSet                          bool
	explain                        explainNodes // title, dedup, severity_from, runbook, mitre
}

// keys reads every top-level key: the ones that stand alone into p's hunt, the rest into
// the huntKeys returned.
func (d *decoder) keys(p *parsed, order []string, f map[string][2]*yaml.Node) huntKeys {
	h := &p.hunt
	var k huntKeys
	for _, key := range order {
		kn, v := f[key][0], f[key][1]
		switch key {
		case "id":
			if s, ok := d.str(v, "id"); ok {
				if !idRe.MatchString(s) {
					d.at(v, "id is not valid: use letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128 characters")
				}
				h.ID, h.Line, p.idLine, p.idCol, k.idSet = s, v.Line, v.Line, v.Column, true
			}
		case "description":
			if s, ok := d.optStr(v, "description"); ok {
				if len(s) > MaxDescriptionBytes {
					d.at(v, "description is %d bytes, more than %d; it is copied into notifications, so keep it short and link to a runbook", len(s), MaxDescriptionBytes)
				}
				h.Description = s
			}
		case "interval":
			k.scheds = append(k.scheds, schedSource{"interval", v, false})
		case "cron":
			k.scheds = append(k.scheds, schedSource{"cron", v, true})
		case "schedule":
			k.scheds = append(k.scheds, d.schedule(v)...)
		case "enabled":
			h.Enabled = d.boolean(v, "enabled")
		case "query":
			k.query = v
		case "delay":
			k.delay = v
		case "max_catchup":
			k.catchup = v
		case "timeout":
			k.timeout = v
		case "severity":
			if s, ok := d.str(v, "severity"); ok {
				if !slices.Contains(severities, s) {
					d.at(v, "severity is not one of %s", strings.Join(severities, ", "))
				}
				h.Severity = s
			}
		case "labels":
			h.Labels = d.labels(v)
		case "notify":
			h.Notify = d.notify(v)
		case "suppress":
			h.Suppress = d.suppress(v)
		case "exceptions":
			h.Exceptions = d.exceptions(v, ownExceptions)
		case "exceptions_from":
			p.from = d.exceptionsFrom(v)
			for _, r := range p.from {
				h.ExceptionsFrom = append(h.ExceptionsFrom, r.name)
			}
		case "max_findings":
			h.MaxFindings = d.maxFindings(v)
		case "sources", "max_rows_read", "max_bytes_read", "on_budget":
			d.sourceOrBudget(h, key, v)
		case "timestamp_field", "checkpoint_timestamp_field":
			if s, ok := d.str(v, key); ok {
				if k.ts != nil && s != k.tsField {
					d.at(v, "%s contradicts %s; keep one", key, k.tsKey)
					continue
				}
				if !fieldRe.MatchString(s) {
					d.at(v, "%s must be a bare column name, optionally table.column (letters, digits and '_'); alias an unusual column in the query instead", key)
				}
				k.tsField, k.tsKey, k.ts = s, key, v
			}
		default:
			if !d.explain(h, &k.explain, key, v) {
				d.unknownKey(kn, "", knownKeys)
			}
		}
	}
	return k
}

// identity gives a hunt without id: the file name's stem.
func (d *decoder) identity(p *parsed, idSet bool, stem string) {
	if !idSet {
		p.hunt.ID = stem
		if !idRe.MatchString(stem) {
			d.addf(1, 1, "the file name is not a valid hunt id (letters, digits, '_', '.', '-'); rename the file or add id:")
		}
	}
	if p.idLine == 0 {
		p.idLine, p.idCol = 1, 1
	}
}

// scheduleOf applies exactly one of interval / cron (top level or under schedule:).
func (d *decoder) scheduleOf(h *hunt.Hunt, root *yaml.Node, scheds []schedSource) {
	switch len(scheds) {
	case 0:
		if !d.scheduleReported {
			d.at(root, "no schedule: add interval: (e.g. interval: 5m) or cron: (e.g. cron: \"*/5 * * * *\")")
		}
	case 1:
		d.applySchedule(h, scheds[0])
	default:
		d.at(scheds[1].node, "both %s and %s are set; keep exactly one", scheds[0].key, scheds[1].key)
	}
}

// limits reads delay, max_catchup and timeout, which are checked against the interval; unset
// ones are left for WithDefaults.
func (d *decoder) limits(h *hunt.Hunt, k huntKeys) {
	if h.Interval <= 0 {
		return
	}
	if k.delay != nil {
		h.Delay = d.duration(k.delay, "delay", true)
	}
	if k.catchup != nil {
		if c := d.duration(k.catchup, "max_catchup", false); c > 0 {
			if c < h.Interval {
				d.at(k.catchup, "max_catchup %s is shorter than the interval %s; a run must be able to cover at least one interval", schedule.FormatInterval(c), schedule.FormatInterval(h.Interval))
			}
			h.MaxCatchup = c
		}
	}
	if k.timeout != nil {
		if t := d.duration(k.timeout, "timeout", false); t > MaxTimeout {
			d.at(k.timeout, "timeout %s is longer than %s, the most one run may hold a query slot; make the query cheaper or the interval shorter", schedule.FormatInterval(t), schedule.FormatInterval(MaxTimeout))
		} else if t > 0 {
			h.Timeout = t
		}
	}
}

// queryOf checks the query under the policy and expands the legacy {window} token over the
// timestamp field. hasRules: rules: is set and already has its own message.
func (d *decoder) queryOf(h *hunt.Hunt, root *yaml.Node, k huntKeys, hasRules bool) {
	if k.query == nil {
		if !hasRules {
			d.at(root, "no query: add query: with one SELECT over {window_start:DateTime64(3)} and {window_end:DateTime64(3)}")
		}
		return
	}
	q, ok := d.str(k.query, "query")
	if !ok {
		return
	}
	h.QueryLine, h.QueryColumn = d.queryPos(k.query, q, len(q)-len(strings.TrimLeft(q, " \t\r\n")))
	if strings.TrimSpace(q) == "" {
		d.at(k.query, "query is empty")
		return
	}
	info, issues := checkQueryPolicy(q, d.policy)
	for _, is := range issues {
		line, col := d.queryPos(k.query, q, is.pos)
		d.addf(line, col, "%s", is.msg)
	}
	if len(issues) > 0 {
		return
	}
	if len(info.windowTokens) == 0 && k.ts != nil {
		d.at(k.ts, "%s is set but the query has no {window} token to expand; remove it", k.tsKey)
	}
	h.Query = strings.TrimSpace(expandWindow(q[:info.end], info.windowTokens, cmp.Or(k.tsField, DefaultTimestampField)))
	d.explainColumns(h, &k.explain, h.Query)
	if len(info.windowTokens) > 0 {
		// The expansion pastes text in after the check: check the result too, so a field that
		// slipped past its own rule still cannot change the statement.
		if _, again := checkQueryPolicy(h.Query, d.policy); len(again) > 0 {
			d.at(k.ts, "%s: the query with {window} expanded is refused: %s", k.tsKey, again[0].msg)
		}
	}
}

// schedule reads the earlier runner's schedule: {mode: rate, interval|cron} mapping.
func (d *decoder) schedule(v *yaml.Node) []schedSource {
	before := len(d.problems)
	defer func() { d.scheduleReported = d.scheduleReported || len(d.problems) > before }()
	if v.Kind != yaml.MappingNode {
		d.at(v, "schedule must be a mapping such as {mode: rate, interval: 5m}, not %s; or write interval: 5m at the top level", YAMLKind(v))
		return nil
	}
	order, f := d.fields(v, "schedule.")
	var out []schedSource
	for _, key := range order {
		k, n := f[key][0], f[key][1]
		switch key {
		case "mode":
			s, ok := d.str(n, "schedule.mode")
			if !ok {
				continue
			}
			switch s {
			case "rate":
			case "anchored":
				d.at(n, "schedule.mode anchored is not supported: hunts run at a fixed interval with a phase offset; to fire at fixed clock times write a periodic cron instead (cron: \"0 * * * *\"), whose minute is kept exactly")
			default:
				d.at(n, "schedule.mode is not supported; the only mode is rate (or drop schedule: and write interval: or cron:)")
			}
		case "interval":
			out = append(out, schedSource{"schedule.interval", n, false})
		case "cron":
			out = append(out, schedSource{"schedule.cron", n, true})
		default:
			d.unknownKey(k, "schedule.", []string{"mode", "interval", "cron"})
		}
	}
	if len(out) == 0 && len(order) > 0 && len(d.problems) == before {
		d.at(v, "schedule has no interval or cron; add interval: 5m")
	}
	return out
}

func (d *decoder) applySchedule(h *hunt.Hunt, s schedSource) {
	if !s.cron {
		h.Interval = d.duration(s.node, s.key, false)
		if h.Interval > 0 {
			h.Offset = time.Duration(schedule.PhaseOffset(h.ID, h.IntervalSeconds(), d.fraction)) * time.Second
		}
		return
	}
	n := s.node
	if n.Kind == yaml.SequenceNode {
		if len(n.Content) != 1 {
			d.at(n, "%s lists %d schedules; hunt-runner runs one periodic schedule per hunt: keep one cron, or split the hunt into several files", s.key, len(n.Content))
			return
		}
		n = deref(n.Content[0])
	}
	expr, ok := d.str(n, s.key)
	if !ok {
		return
	}
	iv, off, err := schedule.ParseCron(expr)
	if err != nil {
		d.at(n, "%s: %s", s.key, withoutValue(err.Error(), expr))
		return
	}
	h.Interval, h.Offset, h.Pinned = iv, off, true
}
