package configsrc

import (
	"cmp"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// Source and budget keys of a hunt file: sources: (declared sources with their freshness) and
// the read budget (max_rows_read, max_bytes_read, on_budget). docs/hunts.md describes them.
const (
	// MaxSources bounds sources: each is one extra read before every run.
	MaxSources = 16
	// MaxRowsReadDefault and MaxBytesReadDefault are the budgets of a hunt that sets none when
	// the operator gives no --max-rows-read-default / --max-bytes-read-default: no budget.
	MaxRowsReadDefault  = 0
	MaxBytesReadDefault = 0
	// MaxRowsReadCeiling and MaxBytesReadCeiling are the most a hunt may ask for when the
	// operator gives no --max-rows-read-ceiling / --max-bytes-read-ceiling: no ceiling.
	MaxRowsReadCeiling  = 0
	MaxBytesReadCeiling = 0
)

var sourceKeys = []string{"table", "time_column", "max_silence"}

// tableNameRe is a source table as a hunt names it: table or db.table, plain identifiers.
var tableNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63})?$`)

// Budget is the operator's read budget rule: the budget of a hunt that sets none, and the most
// a hunt may ask for (0: none). It is part of the Policy, so every command that loads hunts
// judges them alike.
type Budget struct {
	MaxRowsReadDefault, MaxRowsReadCeiling   uint64
	MaxBytesReadDefault, MaxBytesReadCeiling uint64
}

// Check reports a default above its ceiling.
func (b Budget) Check() error {
	if b.MaxRowsReadCeiling > 0 && b.MaxRowsReadDefault > b.MaxRowsReadCeiling {
		return fmt.Errorf("the rows-read default %d is above the ceiling %d", b.MaxRowsReadDefault, b.MaxRowsReadCeiling)
	}
	if b.MaxBytesReadCeiling > 0 && b.MaxBytesReadDefault > b.MaxBytesReadCeiling {
		return fmt.Errorf("the bytes-read default %d is above the ceiling %d", b.MaxBytesReadDefault, b.MaxBytesReadCeiling)
	}
	return nil
}

// sourceOrBudget decodes one of the keys sources, max_rows_read, max_bytes_read, on_budget.
func (d *decoder) sourceOrBudget(h *hunt.Hunt, key string, v *yaml.Node) {
	switch key {
	case "sources":
		h.Sources = d.sources(v)
	case "max_rows_read":
		h.MaxRowsRead = d.budget(v, key, d.policy.Budget.MaxRowsReadCeiling, false)
	case "max_bytes_read":
		h.MaxBytesRead = d.budget(v, key, d.policy.Budget.MaxBytesReadCeiling, true)
	case "on_budget":
		if s, ok := d.str(v, key); ok {
			if s != hunt.OnBudgetFail && s != hunt.OnBudgetSkip {
				d.at(v, "on_budget must be %s (keep the window owed) or %s (commit it as a recorded gap)", hunt.OnBudgetFail, hunt.OnBudgetSkip)
			}
			h.OnBudget = s
		}
	}
}

// budgetDefaults gives a hunt that sets no budget the operator's default.
func (d *decoder) budgetDefaults(h *hunt.Hunt) {
	h.MaxRowsRead = cmp.Or(h.MaxRowsRead, d.policy.Budget.MaxRowsReadDefault)
	h.MaxBytesRead = cmp.Or(h.MaxBytesRead, d.policy.Budget.MaxBytesReadDefault)
}

// budget reads a positive whole number (of bytes with a unit when bytes) at most ceiling.
func (d *decoder) budget(v *yaml.Node, key string, ceiling uint64, bytes bool) uint64 {
	what := "a whole number of rows such as 100000000"
	if bytes {
		what = "a size such as 2GiB or 500MB (or a whole number of bytes)"
	}
	if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!str") {
		d.at(v, "%s must be %s, not %s", key, what, YAMLKind(v))
		return 0
	}
	var n uint64
	var err error
	if bytes {
		n, err = ParseBytes(v.Value)
	} else if !allDigits(v.Value) {
		err = fmt.Errorf("not a whole number")
	} else {
		n, err = strconv.ParseUint(v.Value, 10, 64)
	}
	switch {
	case err != nil || n == 0:
		d.at(v, "%s must be %s, above 0", key, what)
		return 0
	case ceiling > 0 && n > ceiling:
		d.at(v, "%s %s is above the operator's ceiling of %d; make the query read less (a narrower time filter on the table's key)", key, v.Value, ceiling)
		return 0
	}
	return n
}

// byteUnits are the units max_bytes_read accepts, binary and decimal.
var byteUnits = map[string]uint64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

var bytesRe = regexp.MustCompile(`^([0-9]+)\s*([A-Za-z]*)$`)

// ParseBytes reads a size: a whole number with an optional unit (B, KB, MB, GB, TB, KiB, MiB,
// GiB, TiB; case-insensitive), such as 2GiB.
func ParseBytes(s string) (uint64, error) {
	m := bytesRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("not a size such as 2GiB")
	}
	unit, ok := byteUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB", m[2])
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil || n > ^uint64(0)/unit {
		return 0, fmt.Errorf("too large")
	}
	return n * unit, nil
}

// sources reads sources: [{table, time_column, max_silence}, …].
func (d *decoder) sources(v *yaml.Node) []hunt.Source {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		d.at(v, "sources must be a non-empty list such as [{table: logs.events, time_column: ts, max_silence: 15m}], not %s", YAMLKind(v))
		return nil
	}
	if len(v.Content) > MaxSources {
		d.at(v, "sources lists %d tables, more than %d; each is read before every run", len(v.Content), MaxSources)
		return nil
	}
	var out []hunt.Source
	seen := map[string]int{}
	for _, n := range v.Content {
		n = deref(n)
		if n.Kind != yaml.MappingNode {
			d.at(n, "a sources entry must be a mapping {table, time_column, max_silence}, not %s", YAMLKind(n))
			continue
		}
		order, f := d.fields(n, "sources.")
		s := hunt.Source{Line: n.Line}
		var tableN, colN, silenceN *yaml.Node
		for _, key := range order {
			k, val := f[key][0], f[key][1]
			switch key {
			case "table":
				tableN = val
			case "time_column":
				colN = val
			case "max_silence":
				silenceN = val
			default:
				d.unknownKey(k, "sources.", sourceKeys)
			}
		}
		if tableN == nil {
			d.at(n, "a sources entry needs table: (db.table or table)")
		} else if t, ok := d.str(tableN, "sources.table"); ok {
			s.Table = t
			d.sourceTable(tableN, t)
			if prev, dup := seen[t]; dup {
				d.at(tableN, "sources lists this table twice (first at line %d)", prev)
			}
			seen[t] = tableN.Line
		}
		if colN == nil {
			d.at(n, "a sources entry needs time_column: the column whose newest value says the feed is alive")
		} else if c, ok := d.str(colN, "sources.time_column"); ok {
			if !identRe.MatchString(c) {
				d.at(colN, "sources.time_column must be a bare column name (letters, digits and '_')")
			}
			s.TimeColumn = c
		}
		if silenceN == nil {
			d.at(n, "a sources entry needs max_silence: how long the source may stay silent, e.g. max_silence: 15m")
		} else if dur := d.duration(silenceN, "sources.max_silence", false); dur > 0 {
			if dur > schedule.MaxInterval {
				d.at(silenceN, "sources.max_silence is longer than %s", schedule.FormatInterval(schedule.MaxInterval))
			}
			s.MaxSilence = dur
		}
		out = append(out, s)
	}
	return out
}

// sourceTable holds a source table to the rules of tables a hunt's query reads: never
// hunt-runner's own, system tables only when allowed.
func (d *decoder) sourceTable(n *yaml.Node, t string) {
	if !tableNameRe.MatchString(t) {
		d.at(n, "sources.table must be db.table or table, plain identifiers (letters, digits and '_')")
		return
	}
	issue := d.policy.tableIssue(t)
	if db, _, qualified := strings.Cut(t, "."); qualified {
		issue = d.policy.schemaIssue(db)
	}
	if issue != "" {
		d.at(n, "sources.table is held to the rules of the tables a hunt reads: %s", issue)
	}
}
