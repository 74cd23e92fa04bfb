package configsrc

import (
	"slices"
	"strings"
)

// queryChecker walks one statement's tokens once (linear time), tracking bracket scopes to know
// where a table may be named.
type queryChecker struct {
	s      []token
	i      int // the token being looked at; a step may consume more
	p      Policy
	sc     *scopes
	tfunc  string // a table function was just called: its "(" opens its arguments
	tpos   int    // where it was called
	issues issueList
	info   queryInfo

	hasStart, hasEnd, paramIssue bool
}

func (c *queryChecker) next(k int) (token, bool) {
	if c.i+k < len(c.s) {
		return c.s[c.i+k], true
	}
	return token{}, false
}

// token checks one token; false stops the walk (the query broke out of its brackets).
func (c *queryChecker) token(t token) bool {
	switch t.kind {
	case tkPunct:
		return c.punct(t)
	case tkParam:
		c.param(t)
	case tkString:
		if db := c.p.CoordinationDatabase; db != "" && (strings.HasPrefix(t.text[1:], db+".") || t.text[1:] == db+"'") {
			// dictGet, joinGet, hasColumnInTable and table functions name databases in strings.
			c.issues.add(t.pos, "query names hunt-runner's own database in a string; a hunt may read only source data")
		}
		if v, ok := plainString(t.text); ok && c.sc.top().tfunc != "" {
			if err := argNameIssue(v, c.p); err != nil {
				c.issues.add(t.pos, "%s", err.(*RefusedError).Msg)
			}
		}
		c.sc.tableRead()
	case tkQuoted:
		if strings.ContainsAny(t.text, "\\") || hasControl(t.text) {
			// Escapes make one identifier print as several lines of the server's EXPLAIN
			// output, which the server-side check reads line by line.
			c.issues.add(t.pos, "quoted identifier holds a backslash or control character; rename the column or use an alias")
		}
		c.word(t)
	case tkWord:
		c.word(t)
	default:
		c.sc.tableRead()
	}
	return true
}

func (c *queryChecker) punct(t token) bool {
	n1, ok1 := c.next(1)
	switch t.text {
	case "(", "[", "{":
		tf := ""
		if t.text == "(" {
			tf, c.tfunc = c.tfunc, ""
		}
		c.sc.open(t.text, tf, c.tpos)
	case ")", "]", "}":
		closed, ok := c.sc.close(t.text)
		if ok && closed.tfunc == "merge" && closed.commas == 0 {
			c.issues.add(closed.tpos, "merge() without a database reads the connection's current database, which cannot be checked; name the database: merge(db, 'regexp')")
		}
		if !ok {
			// The query runs inside hunt-runner's own brackets (FindingsQuery): a bracket it
			// did not open would close the wrapper's.
			c.issues.add(t.pos, "unbalanced %q: it closes a bracket the query did not open; a hunt query must keep its brackets balanced", t.text)
			return false
		}
	case ",":
		c.sc.comma()
	case ".":
		if ok1 && (n1.kind == tkWord || n1.kind == tkQuoted) {
			if n2, ok2 := c.next(2); ok2 && n2.kind == tkPunct && n2.text == "(" && c.sc.expectTable() {
				c.issues.add(n1.pos, "query calls a qualified table function; a hunt may read only tables")
			}
			if n1.kind == tkQuoted && (strings.Contains(n1.text, "\\") || hasControl(n1.text)) {
				c.issues.add(n1.pos, "quoted identifier holds a backslash or control character; rename the column or use an alias")
			}
			if n3, ok3 := c.next(2); !ok3 || n3.text != "." {
				c.sc.tableRead()
			}
			c.i++ // the right side of a qualified name is not a table or function of its own
		}
	}
	return true
}

func (c *queryChecker) param(t token) {
	name, typ, hasType := strings.Cut(strings.Trim(t.text, "{}"), ":")
	name, typ = strings.TrimSpace(name), strings.TrimSpace(typ)
	switch {
	case name == "window" && !hasType:
		c.info.windowTokens = append(c.info.windowTokens, t)
		c.hasStart, c.hasEnd = true, true
	case name == "window_start" || name == "window_end":
		if !hasType || !windowTypeRe.MatchString(typ) {
			c.paramIssue = true
			c.issues.add(t.pos, "parameter {%s} must have a date-time type, as in {%s:DateTime64(3)}", name, name)
		}
		if name == "window_start" {
			c.hasStart = true
		} else {
			c.hasEnd = true
		}
	default:
		c.paramIssue = true
		c.issues.add(t.pos, "unknown query parameter; hunt-runner binds only {window_start:DateTime64(3)} and {window_end:DateTime64(3)}")
	}
}

// word checks a name or keyword: a qualified name's left side, a function call, a table where
// one is expected, and the clauses that change what comes next.
func (c *queryChecker) word(t token) {
	n1, ok1 := c.next(1)
	name := t.name()
	lower := strings.ToLower(name)
	if ok1 && n1.kind == tkPunct && n1.text == "." {
		if issue := c.p.schemaIssue(name); issue != "" {
			c.issues.add(t.pos, "%s", issue)
		}
		return // the qualified name goes on; "." decides what it is
	}
	if lower == "apply" && c.i > 0 && (c.s[c.i-1].text == "*" || c.s[c.i-1].text == ")") {
		c.issues.add(t.pos, "the query uses APPLY, which calls a function the server's tree does not name; call the function on the columns instead")
		return
	}
	if ok1 && n1.kind == tkPunct && n1.text == "(" {
		c.call(t, name, lower)
		return
	}
	if c.sc.expectTable() {
		if issue := c.p.tableIssue(name); issue != "" {
			c.issues.add(t.pos, "%s", issue)
		}
	}
	if c.sc.top().tfunc != "" {
		// merge(hunt_runner, …): a bare name given to a table function is a database or table.
		if err := argNameIssue(name, c.p); err != nil {
			c.issues.add(t.pos, "%s", err.(*RefusedError).Msg)
		}
	}
	if t.kind == tkQuoted {
		c.sc.tableRead()
		return
	}
	c.keyword(t, n1, ok1)
}

func (c *queryChecker) call(t token, name, lower string) {
	switch {
	case c.sc.top().tfunc != "":
		// A table function's arguments are literals; only merge's database may be REGEXP('…'),
		// whose pattern the server check reads.
		if c.sc.top().tfunc != "merge" || lower != "regexp" || c.sc.top().commas != 0 {
			c.issues.add(t.pos, "a table function's argument calls a function (such as currentDatabase()); table-function arguments must be literals, so that what they name can be checked")
			break
		}
		if c.i+3 >= len(c.s) || c.s[c.i+2].kind != tkString || c.s[c.i+3].text != ")" {
			c.issues.add(t.pos, "merge(REGEXP(…)) must take one string literal")
			break
		}
		pat, ok := plainString(c.s[c.i+2].text)
		if !ok {
			c.issues.add(t.pos, "merge(REGEXP(…)) must take a plain string literal, without escapes")
		} else if err := patternIssue(pat, c.p); err != nil {
			c.issues.add(t.pos, "%s", err.(*RefusedError).Msg)
		}
	case c.sc.expectTable():
		if !c.p.tableFunctionAllowed(name) {
			c.issues.add(t.pos, "%s", tableFunctionRefusal(name))
		} else if slices.Contains(defaultTableFunctions, lower) && !c.p.allowedTableFunctions()[lower] {
			c.generatorBounds(t, name, lower)
		}
		if lower != "view" && lower != "viewifpermitted" {
			c.tfunc, c.tpos = lower, t.pos // view's argument is a query, checked as one
		}
	case callKeywords[lower]:
		// SQL syntax or a type name before a bracket, not a call.
		if lower == "in" {
			c.inTable()
		}
	case !c.p.functionAllowed(name):
		if why, bad := offServerReason(lower); bad {
			c.issues.add(t.pos, "query calls %s(), which %s; a hunt may read only tables on the ClickHouse server", safeName(name), why)
		} else {
			c.issues.add(t.pos, "%s", functionRefusal(name))
		}
	case dictionarySet[lower]:
		lit := ""
		if c.i+2 < len(c.s) && c.s[c.i+2].kind == tkString {
			lit = c.s[c.i+2].text
		}
		if issue := c.p.dictionaryIssue(name, lit); issue != "" {
			c.issues.add(t.pos, "%s", issue)
		}
	}
	c.sc.tableRead()
}

// inTable checks the table a bare name after IN reads: x IN t and x IN (t).
func (c *queryChecker) inTable() {
	n1, ok1 := c.next(1)
	n2, ok2 := c.next(2)
	n3, ok3 := c.next(3)
	t := n1
	switch {
	case ok1 && (n1.kind == tkWord || n1.kind == tkQuoted) && (!ok2 || (n2.text != "(" && n2.text != ".")):
	case ok3 && n1.text == "(" && (n2.kind == tkWord || n2.kind == tkQuoted) && n3.text == ")":
		t = n2
	default:
		return
	}
	if issue := c.p.tableIssue(t.name()); issue != "" {
		c.issues.add(t.pos, "%s", issue)
	}
}

// generatorBounds checks a default generator's arguments lexically: integer literals, within
// MaxGeneratedRows.
func (c *queryChecker) generatorBounds(t token, name, lower string) {
	var vals []string
	for j := c.i + 2; j < len(c.s); j++ {
		tok := c.s[j]
		switch {
		case tok.kind == tkPunct && tok.text == ")":
			if rows, ok := generatedRows(lower, vals); !ok || rows > MaxGeneratedRows {
				c.issues.add(t.pos, "%s() generates more than %d rows (or its bounds are not understood); narrow it, or an operator can lift the bound with --allow-table-functions %s", name, MaxGeneratedRows, lower)
			}
			return
		case tok.kind == tkNumber:
			vals = append(vals, tok.text)
		case tok.kind == tkPunct && tok.text == "-" && j+1 < len(c.s) && c.s[j+1].kind == tkNumber:
			vals = append(vals, "-"+c.s[j+1].text)
			j++
		case tok.kind == tkPunct && tok.text == ",":
		default:
			c.issues.add(t.pos, "%s() takes integer literals here, so its size is known before it runs; an operator can lift that with --allow-table-functions %s", name, lower)
			return
		}
	}
}

// callKeywords are words the lexer sees before a bracket that are syntax or data types, not
// calls: x IN (…), OVER (…), CAST(x AS Nullable(String)). TestCallKeywordsAreNotFunctions
// checks on the engine that none of them is a function outside the allowlist.
var callKeywords = lowerSet([]string{
	"IN", "AND", "OR", "NOT", "EXISTS", "OVER", "AS", "FROM", "JOIN", "USING", "ON", "SELECT",
	"WHERE", "PREWHERE", "HAVING", "THEN", "ELSE", "WHEN", "CASE", "BY", "LIMIT", "OFFSET",
	"FILTER", "DISTINCT", "ALL", "ANY", "SOME", "WITH", "IS", "LIKE", "ILIKE", "BETWEEN", "UNION",
	"EXCEPT", "INTERSECT", "QUALIFY", "INTERVAL", "COLUMNS", "GLOBAL", "TO", "STEP",
	"INTERPOLATE", "ROLLUP", "CUBE", "SETS", "GROUPING", "ROWS", "RANGE", "DESC", "ASC", "SAMPLE",
	"REPLACE", "TRIM",
	// data types, in CAST(… AS T(…)) and x::T(…)
	"Nullable", "LowCardinality", "Decimal", "Decimal32", "Decimal64", "Decimal128", "Decimal256",
	"DateTime", "DateTime64", "Time64", "FixedString", "Enum", "Enum8", "Enum16", "Object", "JSON",
	"Variant", "Dynamic", "AggregateFunction", "SimpleAggregateFunction", "Array", "Tuple", "Map",
})

func (c *queryChecker) keyword(t, n1 token, ok1 bool) {
	switch upper := strings.ToUpper(t.text); upper {
	case "WINDOW":
		if n2, ok2 := c.next(2); ok1 && ok2 && n1.kind == tkWord && strings.EqualFold(n2.text, "AS") {
			c.issues.add(t.pos, "the query uses a named window (WINDOW w AS (…)), whose definition the server's tree does not show; write the window inline, OVER (PARTITION BY … ORDER BY …)")
		}
		c.sc.expr()
	case "FROM", "JOIN":
		if upper == "JOIN" && c.i > 0 && strings.EqualFold(c.s[c.i-1].text, "ARRAY") {
			c.sc.expr() // ARRAY JOIN takes expressions, not tables
		} else {
			c.sc.from()
		}
	case "ON", "USING", "WHERE", "PREWHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "QUALIFY",
		"UNION", "EXCEPT", "INTERSECT", "SELECT", "WITH", "ARRAY":
		c.sc.expr()
	case "IN":
		c.inTable()
	case "INTO":
		if n1.kind == tkWord && strings.EqualFold(n1.text, "OUTFILE") {
			c.issues.add(t.pos, "INTO OUTFILE writes a file; remove it (hunt-runner stores findings in hunt_findings)")
		}
	case "FORMAT":
		// The clause is FORMAT <name> at the end (maybe before SETTINGS); a column that
		// happens to be called format is not one.
		n2, ok2 := c.next(2)
		if c.sc.depth() == 0 && ok1 && n1.kind == tkWord && (!ok2 || (n2.kind == tkWord && strings.EqualFold(n2.text, "SETTINGS"))) {
			c.issues.add(t.pos, "FORMAT clause: remove it; hunt-runner reads the rows and stores them itself")
		}
	case "SETTINGS":
		if end, ok := settingsClause(c.s, c.i, &c.issues); ok {
			c.i = end - 1
		}
	default:
		c.sc.tableRead()
	}
}
