package configsrc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/yamlpos"
)

// Exceptions as code (docs/hunts.md#exceptions): a hunt's exceptions: list and the shared lists
// it names in exceptions_from:, each in its own NAME.exceptions.yaml file anywhere in the tree.

var (
	exceptionKeys     = []string{"id", "match", "where", "until", "owner", "reason"}
	exceptionListKeys = []string{"name", "exceptions"}
	exceptionIDRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	exceptionColumnRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// exceptionColumnOK reports whether a match: column may be named in the statement: a plain
// name, and not one of the hr_ names the statement itself defines.
func exceptionColumnOK(col string) bool {
	return exceptionColumnRe.MatchString(col) && !strings.HasPrefix(strings.ToLower(col), "hr_")
}

// ownExceptions names a hunt's own exceptions: list in the ids of its items (exceptions#1).
const ownExceptions = "exceptions"

// IsExceptionsFile reports whether a path names a shared exception list: NAME.exceptions.yaml
// or NAME.exceptions.yml. Sources read it with the hunt files, and the set takes it as a list,
// never as a hunt.
func IsExceptionsFile(rel string) bool { return exceptionsListName(rel) != "" }

// exceptionsListName is the NAME of a NAME.exceptions.yaml path, "" for any other path.
func exceptionsListName(rel string) string {
	ext := path.Ext(rel)
	if ext != ".yaml" && ext != ".yml" {
		return ""
	}
	name, ok := strings.CutSuffix(path.Base(strings.TrimSuffix(rel, ext)), ".exceptions")
	if !ok {
		return ""
	}
	return name
}

// listShown shows a list name in a message when it is a valid one.
func listShown(s string) string {
	if exceptionIDRe.MatchString(s) {
		return s
	}
	return "(a name)"
}

// fromRef is one name of a hunt's exceptions_from:, with its position for an unknown name.
type fromRef struct {
	name      string
	line, col int
}

// exceptions reads a list of exception items (of the hunt's exceptions:, or of a shared list).
func (d *decoder) exceptions(v *yaml.Node, list string) []hunt.Exception {
	if yamlpos.IsNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		d.at(v, "exceptions must be a list of items such as - {match: {user: svc-backup}, until: 2027-01-31, owner: …, reason: …}, not %s", YAMLKind(v))
		return nil
	}
	if len(v.Content) > hunt.ExceptionsMax {
		d.at(v, "exceptions lists %d items, more than %d", len(v.Content), hunt.ExceptionsMax)
		return nil
	}
	var out []hunt.Exception
	for i, item := range v.Content {
		if e, ok := d.exception(deref(item), list, i+1); ok {
			out = append(out, e)
		}
	}
	return out
}

// exception reads one item; n is its place in the list, from 1.
func (d *decoder) exception(v *yaml.Node, list string, n int) (hunt.Exception, bool) {
	before := len(d.problems)
	e := hunt.Exception{ID: fmt.Sprintf("%s#%d", list, n), File: d.file, Line: v.Line, Col: v.Column}
	if list == ownExceptions {
		e.List = ""
	} else {
		e.List = list
	}
	if v.Kind != yaml.MappingNode {
		d.at(v, "an exception must be a mapping with match:, until:, owner: and reason:, not %s", YAMLKind(v))
		return e, false
	}
	order, f := d.fields(v, "exceptions.")
	for _, key := range order {
		k, val := f[key][0], f[key][1]
		switch key {
		case "id":
			if s, ok := d.str(val, "exception id"); ok {
				if !exceptionIDRe.MatchString(s) {
					d.at(val, "exception id is not valid: letters, digits, '_', '.' and '-', starting with a letter or digit, at most 64 characters")
				}
				e.ID = s
			}
		case "match":
			e.Match = d.exceptionMatch(val)
		case "where":
			if s, ok := d.str(val, "exception where"); ok {
				e.Where = d.exceptionWhere(val, s)
			}
		case "until":
			e.Until = d.exceptionUntil(val)
		case "owner", "reason":
			s, ok := d.str(val, "exception "+key)
			limit := hunt.ExceptionOwnerMaxBytes
			if key == "reason" {
				limit = hunt.ExceptionReasonMaxBytes
			}
			switch {
			case !ok:
			case strings.TrimSpace(s) == "":
				d.at(val, "exception %s is empty", key)
			case len(s) > limit:
				d.at(val, "exception %s is %d bytes, more than %d; it is shown with the exception in status", key, len(s), limit)
			case hasControl(s):
				d.at(val, "exception %s holds a control character", key)
			default:
				if key == "owner" {
					e.Owner = s
				} else {
					e.Reason = s
				}
			}
		default:
			d.unknownKey(k, "exceptions.", exceptionKeys)
		}
	}
	if f["match"][1] == nil {
		d.at(v, "exception has no match: give the output columns and values it excludes, e.g. match: {src_ip: 10.0.0.0/8}")
	}
	if f["until"][1] == nil && !d.policy.AllowPermanentExceptions {
		d.at(v, "exception has no until: give it an expiry (until: 2027-01-31, or an RFC 3339 time), or an operator can allow permanent exceptions with --allow-permanent-exceptions")
	}
	for _, key := range []string{"owner", "reason"} {
		if f[key][1] == nil {
			d.at(v, "exception has no %s: every exception says who owns it and why it exists", key)
		}
	}
	return e, len(d.problems) == before
}

// exceptionMatch reads match: {column: value | [values]}.
func (d *decoder) exceptionMatch(v *yaml.Node) []hunt.ExceptionMatch {
	if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
		d.at(v, "match must be a mapping of output columns to a value or a list of values, such as {user: svc-backup, src_ip: [10.0.0.0/8]}, not %s", YAMLKind(v))
		return nil
	}
	order, f := d.fields(v, "match.")
	var out []hunt.ExceptionMatch
	for _, col := range order {
		k, val := f[col][0], f[col][1]
		if !exceptionColumnOK(col) {
			d.at(k, "match column must be an output column's plain name (letters, digits and '_', not starting with hr_, which names hunt-runner's own columns in the statement); alias the column in the query")
			continue
		}
		items := []*yaml.Node{val}
		if val.Kind == yaml.SequenceNode {
			items = val.Content
		}
		if len(items) == 0 || len(items) > hunt.ExceptionValuesMax {
			d.at(val, "match.%s lists %d values; give 1 to %d", col, len(items), hunt.ExceptionValuesMax)
			continue
		}
		m := hunt.ExceptionMatch{Column: col, Line: k.Line, Col: k.Column}
		for _, it := range items {
			it = deref(it)
			if it.Kind != yaml.ScalarNode || yamlpos.IsNull(it) {
				d.at(it, "match.%s values must be strings or numbers, not %s", col, YAMLKind(it))
				continue
			}
			s := it.Value
			if len(s) > MaxLabelValueBytes {
				d.at(it, "match.%s value is %d bytes, more than %d", col, len(s), MaxLabelValueBytes)
				continue
			}
			if p, ok := ipRange(s); ok {
				m.Ranges = append(m.Ranges, p)
				if !strings.Contains(s, "/") {
					m.Values = append(m.Values, s) // a bare address also matches its text on a non-IP column
				}
				continue
			}
			m.Values = append(m.Values, s)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b hunt.ExceptionMatch) int { return strings.Compare(a.Column, b.Column) })
	return out
}

// ipRange reads s as an IP range: a CIDR prefix (normalised to its network), or an address as
// a one-address range.
func ipRange(s string) (string, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked().String(), true
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()).String(), true
	}
	return "", false
}

// exceptionUntil reads until: a date (midnight UTC) or an RFC 3339 time.
func (d *decoder) exceptionUntil(v *yaml.Node) time.Time {
	if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) {
		d.at(v, "until must be a date (2027-01-31) or an RFC 3339 time (2027-01-31T18:00:00Z), not %s", YAMLKind(v))
		return time.Time{}
	}
	if t, err := time.Parse(time.DateOnly, v.Value); err == nil {
		return t.UTC()
	}
	if t, err := time.Parse(time.RFC3339, v.Value); err == nil {
		return t.UTC()
	}
	d.at(v, "until must be a date (2027-01-31, midnight UTC) or an RFC 3339 time (2027-01-31T18:00:00Z)")
	return time.Time{}
}

// exceptionWhere checks a where: expression offline under the policy (CheckWhere) and places
// each issue in the file.
func (d *decoder) exceptionWhere(v *yaml.Node, s string) string {
	if len(s) > hunt.ExceptionWhereMaxBytes {
		d.at(v, "exception where is %d bytes, more than %d", len(s), hunt.ExceptionWhereMaxBytes)
		return ""
	}
	issues := checkWhere(s, d.policy)
	for _, is := range issues {
		line, col := d.queryPos(v, s, is.pos)
		d.addf(line, col, "where: %s", is.msg)
	}
	if len(issues) > 0 {
		return ""
	}
	return strings.TrimSpace(s)
}

// exceptionsFrom reads exceptions_from: [NAME, …].
func (d *decoder) exceptionsFrom(v *yaml.Node) []fromRef {
	if v.Kind != yaml.SequenceNode {
		d.at(v, "exceptions_from must be a list of shared exception list names, such as [corp-scanners], not %s", YAMLKind(v))
		return nil
	}
	var out []fromRef
	for _, it := range v.Content {
		it = deref(it)
		s, ok := d.str(it, "exceptions_from entry")
		switch {
		case !ok:
		case !exceptionIDRe.MatchString(s):
			d.at(it, "exceptions_from names a list by its file's NAME (NAME.exceptions.yaml): letters, digits, '_', '.' and '-'")
		case slices.ContainsFunc(out, func(r fromRef) bool { return r.name == s }):
			d.at(it, "exceptions_from names this list twice")
		default:
			out = append(out, fromRef{s, it.Line, it.Column})
		}
	}
	return out
}

// exceptionList is a decoded NAME.exceptions.yaml.
type exceptionList struct {
	name  string
	file  string
	items []hunt.Exception
}

// decodeExceptionList decodes one shared list file.
func decodeExceptionList(file string, data []byte, policy Policy) (exceptionList, []Problem) {
	d := &decoder{file: file, policy: policy}
	l := exceptionList{name: exceptionsListName(file), file: file}
	if len(data) > maxFileSize {
		d.addf(1, 1, "file is %d bytes; an exception list may be at most %d", len(data), maxFileSize)
		return l, d.problems
	}
	if !utf8.Valid(data) {
		line, col := invalidUTF8Pos(data)
		d.addf(line, col, "file is not valid UTF-8")
		return l, d.problems
	}
	d.lines = strings.Split(string(data), "\n")
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.addf(1, 1, "exception list is empty; it needs name: and exceptions:")
		} else {
			d.yamlError(err)
		}
		return l, d.problems
	}
	if len(doc.Content) == 0 || deref(doc.Content[0]).Kind != yaml.MappingNode {
		d.addf(1, 1, "an exception list must be a mapping with name: and exceptions:")
		return l, d.problems
	}
	root := deref(doc.Content[0])
	order, f := d.fields(root, "")
	for _, key := range order {
		k, v := f[key][0], f[key][1]
		switch key {
		case "name":
			if s, ok := d.str(v, "name"); ok && s != l.name {
				d.at(v, "name must equal the file's NAME (%s.exceptions.yaml names the list %s); rename the file or the list", listShown(l.name), listShown(l.name))
			}
		case "exceptions":
			l.items = d.exceptions(v, l.name)
		default:
			d.unknownKey(k, "", exceptionListKeys)
		}
	}
	if !exceptionIDRe.MatchString(l.name) {
		d.addf(1, 1, "the file name is not a valid list name (letters, digits, '_', '.', '-' before .exceptions.yaml)")
	}
	if f["name"][1] == nil {
		d.at(root, "exception list has no name: (it must equal the file's NAME)")
	}
	if f["exceptions"][1] == nil {
		d.at(root, "exception list has no exceptions:")
	}
	return l, d.problems
}

// resolveExceptions appends the shared lists each hunt names to its exceptions and recomputes
// its hash (the lists are part of its definition). A hunt naming an unknown list, or a list
// with problems, is a problem of the hunt: it is not loaded with half its exceptions.
func resolveExceptions(ps map[string][]parsed, lists map[string]exceptionList, broken map[string]bool) (problems []Problem) {
	for id, copies := range ps {
		for i := range copies {
			p := &copies[i]
			h := &p.hunt
			bad := false
			for _, ref := range p.from {
				l, ok := lists[ref.name]
				switch {
				case broken[ref.name]:
					problems = append(problems, Problem{File: h.File, Line: ref.line, Column: ref.col, HuntID: id,
						Message: fmt.Sprintf("exceptions_from names %s, whose file has problems (fix them first)", ref.name)})
					bad = true
				case !ok:
					problems = append(problems, Problem{File: h.File, Line: ref.line, Column: ref.col, HuntID: id,
						Message: fmt.Sprintf("exceptions_from names %s, but no file %s.exceptions.yaml defines it%s", ref.name, ref.name, didYouMean(ref.name, lists))})
					bad = true
				default:
					h.Exceptions = append(h.Exceptions, l.items...)
				}
			}
			if len(h.Exceptions) > hunt.ExceptionsMax {
				problems = append(problems, Problem{File: h.File, Line: h.Line, Column: 1, HuntID: id,
					Message: fmt.Sprintf("the hunt has %d exceptions with its shared lists, more than %d", len(h.Exceptions), hunt.ExceptionsMax)})
				bad = true
			}
			seen := map[string]bool{}
			for _, e := range h.Exceptions {
				if seen[e.ID] {
					problems = append(problems, Problem{File: e.File, Line: e.Line, Column: max(e.Col, 1), HuntID: id,
						Message: fmt.Sprintf("exception id %s is used twice among hunt %s's exceptions; ids name hit counts, so they must be unique", e.ID, id)})
					bad = true
				}
				seen[e.ID] = true
			}
			if !bad {
				cols := matchColumnsOffline(h)
				problems = append(problems, cols...)
				bad = len(cols) > 0
			}
			if bad {
				p.invalid = true
			}
			h.Hash = h.ComputeHash()
		}
	}
	return problems
}

func didYouMean(name string, lists map[string]exceptionList) string {
	known := make([]string, 0, len(lists))
	for n := range lists {
		known = append(known, n)
	}
	if s := Suggest(name, known); s != "" {
		return "; did you mean " + s + "?"
	}
	return ""
}

// outputNames are the names an output column of q may have, offline: every identifier in its
// text. any is true when a * or COLUMNS() lets the server expand names the text does not hold.
func outputNames(q string) (names map[string]bool, any bool) {
	toks, issue := lexQuery(q)
	if issue != nil {
		return nil, true
	}
	names = map[string]bool{}
	for _, t := range toks {
		switch {
		case t.kind == tkPunct && t.text == "*", t.kind == tkWord && strings.EqualFold(t.text, "COLUMNS"):
			return nil, true
		case t.kind == tkWord || t.kind == tkQuoted:
			names[t.name()] = true
		}
	}
	return names, false
}

// matchColumnsOffline refuses a match: column that cannot be an output column of the hunt's
// query (it appears nowhere in its text); with a * the server check decides.
func matchColumnsOffline(h *hunt.Hunt) []Problem {
	names, any := outputNames(h.Query)
	if any {
		return nil
	}
	var out []Problem
	for _, e := range h.Exceptions {
		for _, m := range e.Match {
			if !names[m.Column] {
				out = append(out, Problem{File: e.File, Line: max(m.Line, 1), Column: max(m.Col, 1), HuntID: h.ID,
					Message: fmt.Sprintf("exception %s: match column %s is not an output column of hunt %s's query (no column or alias of that name)", e.ID, m.Column, h.ID)})
			}
		}
	}
	return out
}

// wherePrefix holds a where: expression for the offline check: the query checker then applies
// every rule of hunt SQL to it (functions, tables, settings, names) as to a WHERE clause.
const (
	wherePrefix = "SELECT * FROM (SELECT 1 WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}) WHERE (\n"
	whereSuffix = "\n)"
)

// checkWhere is the offline check of a where: expression: the query checker over the expression
// as the WHERE clause of a query, and, on its own, balanced brackets (it can never close the
// bracket the statement puts around it), no query parameter and one statement.
func checkWhere(expr string, p Policy) []queryIssue {
	if strings.TrimSpace(expr) == "" {
		return []queryIssue{{0, "the expression is empty"}}
	}
	toks, lexErr := lexQuery(expr)
	if lexErr != nil {
		return []queryIssue{*lexErr}
	}
	depth := 0
	for _, t := range toks {
		switch {
		case t.kind == tkPunct && (t.text == "(" || t.text == "["):
			depth++
		case t.kind == tkPunct && (t.text == ")" || t.text == "]"):
			depth--
			if depth < 0 {
				return []queryIssue{{t.pos, "unbalanced brackets: a ')' closes a bracket the expression did not open"}}
			}
		case t.kind == tkSemicolon:
			return []queryIssue{{t.pos, "a where: expression is one expression, with no ';'"}}
		case t.kind == tkParam:
			return []queryIssue{{t.pos, "a where: expression may not use query parameters; compare with literals"}}
		case t.kind == tkWord && depth == 0 && clauseWords[strings.ToUpper(t.text)]:
			return []queryIssue{{t.pos, fmt.Sprintf("%s is not part of a boolean expression; a where: expression is a condition over the output columns", strings.ToUpper(t.text))}}
		}
	}
	if depth != 0 {
		return []queryIssue{{len(expr), "unbalanced brackets: one opened and never closed"}}
	}
	_, issues := checkQueryPolicy(wherePrefix+expr+whereSuffix, p)
	for i := range issues {
		issues[i].pos = min(max(issues[i].pos-len(wherePrefix), 0), len(expr))
	}
	return issues
}

// clauseWords start a clause of a SELECT: outside brackets they cannot be part of a condition.
var clauseWords = map[string]bool{"SELECT": true, "FROM": true, "WHERE": true, "GROUP": true, "HAVING": true,
	"ORDER": true, "LIMIT": true, "OFFSET": true, "SETTINGS": true, "FORMAT": true, "UNION": true, "INTERSECT": true,
	"EXCEPT": true, "QUALIFY": true, "WINDOW": true, "INTO": true, "PREWHERE": true, "WITH": true}

// whereCheckQuery is the query the server check parses for a where: expression: the hunt's
// query filtered by it, held to every rule of hunt SQL (CheckWithServer).
func whereCheckQuery(huntQuery, where string) string {
	return "SELECT * FROM (\n" + TrimQuery(huntQuery) + "\n) WHERE (\n" + where + "\n)"
}

// ExceptionWarnings are validate's notes on the set's exceptions at now: each exception that
// expires within soon (hunt.ExceptionSoonDefault), and each that has expired and no longer
// applies. They are not problems: an exception stops applying by itself. A shared list's item
// is reported once, however many hunts use it.
func ExceptionWarnings(set *Set, now time.Time, soon time.Duration) []Problem {
	var out []Problem
	seen := map[string]bool{}
	for _, h := range set.Hunts {
		for _, e := range h.Exceptions {
			key := fmt.Sprintf("%s:%d:%s", e.File, e.Line, e.ID)
			if e.Until.IsZero() || seen[key] {
				continue
			}
			seen[key] = true
			p := Problem{File: e.File, Line: max(e.Line, 1), Column: max(e.Col, 1), HuntID: h.ID}
			switch left := e.Until.Sub(now); {
			case left <= 0:
				p.Message = fmt.Sprintf("exception %s expired at %s and no longer applies; remove it, or extend until: if it is still needed", e.ID, e.Until.Format(time.RFC3339))
			case left <= soon:
				p.Message = fmt.Sprintf("exception %s expires at %s (in %s); extend until: if it is still needed", e.ID, e.Until.Format(time.RFC3339), left.Round(time.Minute))
			default:
				continue
			}
			out = append(out, p)
		}
	}
	sortProblems(out)
	return out
}
