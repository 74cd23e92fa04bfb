package provision

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// SourceDatabases finds, lexically, the databases that hunts read: every database-qualified
// table after FROM or JOIN (and after the commas of a FROM list). queries maps hunt id to query.
// Unqualified tables cannot be attributed to a database, and table functions (remote, url, s3,
// …) need privileges the runner is never given; both come back as notes for the operator.
// Lexical on purpose: provisioning must work offline, before the runner can connect.
func SourceDatabases(queries map[string]string) (dbs []string, notes []string) {
	found := map[string]bool{}
	ids := make([]string, 0, len(queries))
	for id := range queries {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		refs, fns := tableRefs(queries[id])
		for _, r := range refs {
			if r.db == "" {
				notes = append(notes, fmt.Sprintf("hunt %s: table %q is not database-qualified; qualify it or pass --source-database", id, r.table))
				continue
			}
			found[r.db] = true
		}
		for _, f := range fns {
			notes = append(notes, fmt.Sprintf("hunt %s: table function %s() is not granted to the runner", id, f))
		}
	}
	for db := range found {
		dbs = append(dbs, db)
	}
	sort.Strings(dbs)
	return dbs, notes
}

type tableRef struct{ db, table string }

type lexTok struct {
	text   string
	ident  bool // bare word or quoted identifier
	quoted bool
}

// tableRefs returns the table references and table functions of one query.
func tableRefs(q string) (refs []tableRef, funcs []string) {
	toks := lex(q)
	isKw := func(t lexTok, kw string) bool { return t.ident && !t.quoted && strings.EqualFold(t.text, kw) }
	// cte names are defined by WITH name AS (…); a FROM name that matches one is not a table.
	ctes := map[string]bool{}
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].ident && isKw(toks[i+1], "AS") && toks[i+2].text == "(" {
			ctes[toks[i].text] = true
		}
	}
	// FROM also appears inside function calls (extract(day FROM ts), trim(BOTH ' ' FROM s),
	// substring(s FROM 2)); only a FROM outside a call, or inside a parenthesised query,
	// introduces tables.
	const (
		parenGroup = iota
		parenCall
		parenQuery
	)
	var parens []int
	inCall := make([]bool, len(toks))
	for i, t := range toks {
		switch {
		case t.text == "(":
			kind := parenGroup
			if i > 0 && toks[i-1].ident && (toks[i-1].quoted || !notCall[strings.ToUpper(toks[i-1].text)]) {
				kind = parenCall
			}
			parens = append(parens, kind)
		case t.text == ")":
			if len(parens) > 0 {
				parens = parens[:len(parens)-1]
			}
		case isKw(t, "SELECT") && len(parens) > 0:
			parens[len(parens)-1] = parenQuery
		}
		inCall[i] = len(parens) > 0 && parens[len(parens)-1] == parenCall
	}
	for i := 0; i < len(toks); i++ {
		if !isKw(toks[i], "FROM") && !isKw(toks[i], "JOIN") || inCall[i] {
			continue
		}
		for j := i + 1; j < len(toks); {
			// one table expression: ident [. ident] [ ( … ) ]
			t := toks[j]
			if !t.ident || isKw(t, "SELECT") {
				break
			}
			name, db := t.text, ""
			k := j + 1
			if k+1 < len(toks) && toks[k].text == "." && toks[k+1].ident {
				db, name = t.text, toks[k+1].text
				k += 2
			}
			switch {
			case k < len(toks) && toks[k].text == "(":
				if db == "" {
					funcs = appendUnique(funcs, strings.ToLower(name))
				}
			case db == "" && ctes[name]:
			default:
				refs = append(refs, tableRef{db: db, table: name})
			}
			if !isKw(toks[i], "FROM") {
				break
			}
			// a FROM list: skip to the next top-level comma, if any, before a keyword
			k = skipAlias(toks, k)
			if k < len(toks) && toks[k].text == "," {
				j = k + 1
				continue
			}
			break
		}
	}
	return refs, funcs
}

func skipAlias(toks []lexTok, k int) int {
	if k < len(toks) && toks[k].text == "(" { // table function arguments
		depth := 0
		for ; k < len(toks); k++ {
			switch toks[k].text {
			case "(":
				depth++
			case ")":
				depth--
			}
			if depth == 0 {
				k++
				break
			}
		}
	}
	if k < len(toks) && toks[k].ident && strings.EqualFold(toks[k].text, "AS") {
		k++
	}
	if k < len(toks) && toks[k].ident && !isReserved(toks[k]) {
		k++
	}
	if k < len(toks) && toks[k].ident && strings.EqualFold(toks[k].text, "FINAL") {
		k++
	}
	return k
}

// reserved words that end a table expression (so an alias is never mistaken for one).
var reserved = map[string]bool{
	"WHERE": true, "GROUP": true, "ORDER": true, "LIMIT": true, "HAVING": true, "JOIN": true, "INNER": true,
	"LEFT": true, "RIGHT": true, "FULL": true, "CROSS": true, "ARRAY": true, "ANY": true, "ALL": true,
	"ASOF": true, "SEMI": true, "ANTI": true, "GLOBAL": true, "ON": true, "USING": true, "PREWHERE": true,
	"SETTINGS": true, "FORMAT": true, "UNION": true, "EXCEPT": true, "INTERSECT": true, "WINDOW": true,
	"QUALIFY": true, "FINAL": true, "SAMPLE": true, "SELECT": true, "AS": true, "WITH": true, "LATERAL": true,
	"PASTE": true, "OUTER": true,
}

// notCall are words that may precede "(" without making it a function call.
var notCall = map[string]bool{
	"IN": true, "AND": true, "OR": true, "NOT": true, "ON": true, "USING": true, "AS": true, "FROM": true,
	"JOIN": true, "WHERE": true, "SELECT": true, "WITH": true, "WHEN": true, "THEN": true, "ELSE": true,
	"CASE": true, "IS": true, "LIKE": true, "ILIKE": true, "BETWEEN": true, "HAVING": true, "BY": true,
	"UNION": true, "ALL": true, "DISTINCT": true, "EXCEPT": true, "INTERSECT": true, "PREWHERE": true, "LIMIT": true,
}

func isReserved(t lexTok) bool { return t.ident && !t.quoted && reserved[strings.ToUpper(t.text)] }

func appendUnique(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// lex tokenises ClickHouse SQL enough to find table references: strings, quoted identifiers,
// comments and {param:Type} placeholders are skipped or kept whole, never looked inside.
func lex(q string) []lexTok {
	var toks []lexTok
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-', c == '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return toks
			}
			i += end + 4
		case c == '\'':
			i = skipQuoted(q, i, '\'')
			toks = append(toks, lexTok{text: "''"})
		case c == '"' || c == '`':
			j := skipQuoted(q, i, c)
			body := q[i+1 : max(i+1, j-1)]
			body = strings.ReplaceAll(body, string([]byte{'\\', c}), string(c))
			body = strings.ReplaceAll(body, string([]byte{c, c}), string(c))
			toks = append(toks, lexTok{text: body, ident: true, quoted: true})
			i = j
		case c == '{':
			end := strings.IndexByte(q[i:], '}')
			if end < 0 {
				return toks
			}
			toks = append(toks, lexTok{text: q[i : i+end+1]})
			i += end + 1
		case isWordByte(c):
			j := i
			for j < len(q) && (isWordByte(q[j]) || q[j] >= '0' && q[j] <= '9' || q[j] == '$') {
				j++
			}
			word := q[i:j]
			toks = append(toks, lexTok{text: word, ident: !(word[0] >= '0' && word[0] <= '9')})
			i = j
		default:
			toks = append(toks, lexTok{text: string(c)})
			i++
		}
	}
	return toks
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// skipQuoted returns the index after the closing quote, honouring backslash escapes and doubled
// quotes.
func skipQuoted(q string, i int, quote byte) int {
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case '\\':
			j++
		case quote:
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(q)
}
