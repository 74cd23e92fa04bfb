package configsrc

import "strings"

// queryChecker walks one statement's tokens once (linear time), tracking bracket scopes to know
// where a table may be named.
type queryChecker struct {
	s       []token
	i       int // the token being looked at; a step may consume more
	p       Policy
	allowed map[string]bool
	sc      *scopes
	issues  issueList
	info    queryInfo

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
		if c.p.CoordinationDatabase != "" && strings.HasPrefix(t.text[1:], c.p.CoordinationDatabase+".") {
			// dictGet, joinGet and friends name tables in strings.
			c.issues.add(t.pos, "query names hunt-runner's own database in a string; a hunt may read only source data")
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
		c.sc.open(t.text)
	case ")", "]", "}":
		if !c.sc.close(t.text) {
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
	if ok1 && n1.kind == tkPunct && n1.text == "(" {
		c.call(t, name, lower)
		return
	}
	if c.sc.expectTable() {
		if issue := c.p.tableIssue(name); issue != "" {
			c.issues.add(t.pos, "%s", issue)
		}
	}
	if t.kind == tkQuoted {
		c.sc.tableRead()
		return
	}
	c.keyword(t, n1, ok1)
}

func (c *queryChecker) call(t token, name, lower string) {
	why, offServer := offServerReason(lower)
	switch {
	case offServer && !c.allowed[lower]:
		c.issues.add(t.pos, "query calls %s(), which %s; a hunt may read only tables on the ClickHouse server", safeName(name), why)
	case c.sc.expectTable() && !c.allowed[lower]:
		c.issues.add(t.pos, "query calls table function %s(); a hunt may read only tables (an operator can allow it with --allow-table-functions)", safeName(name))
	}
	c.sc.tableRead()
}

func (c *queryChecker) keyword(t, n1 token, ok1 bool) {
	switch upper := strings.ToUpper(t.text); upper {
	case "FROM", "JOIN":
		if upper == "JOIN" && c.i > 0 && strings.EqualFold(c.s[c.i-1].text, "ARRAY") {
			c.sc.expr() // ARRAY JOIN takes expressions, not tables
		} else {
			c.sc.from()
		}
	case "ON", "USING", "WHERE", "PREWHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "WINDOW", "QUALIFY",
		"UNION", "EXCEPT", "INTERSECT", "SELECT", "WITH", "ARRAY":
		c.sc.expr()
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
