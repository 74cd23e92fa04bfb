package configsrc

import (
	"fmt"
	"regexp"
	"strings"
)

// The offline query check. It is lexical on purpose: it needs no server, runs in CI and in
// every reload, and is exact about what it looks at (statement count, bracket balance, the
// first keyword, table and function calls, SETTINGS names, schema prefixes, query parameters)
// because it tokenises strings (including $$heredocs$$), quoted identifiers and comments the
// way ClickHouse does. The server's parser, asked through CheckWithServer, is the authority on
// everything else. Every pass is linear in the query's length: a reload re-checks every hunt.

type tokKind int

const (
	tkWord   tokKind = iota // keyword or bare identifier
	tkQuoted                // "identifier" or `identifier`
	tkString                // 'literal' or $$literal$$
	tkNumber
	tkParam // {name:Type} or the legacy {window}
	tkPunct
	tkSemicolon
)

type token struct {
	kind tokKind
	text string
	pos  int // byte offset in the query
}

// name is the identifier a word or quoted token stands for (quotes and doubled quotes removed;
// escapes are refused elsewhere, so none remain).
func (t token) name() string {
	if t.kind != tkQuoted || len(t.text) < 2 {
		return t.text
	}
	q := t.text[:1]
	return strings.ReplaceAll(t.text[1:len(t.text)-1], q+q, q)
}

// queryIssue is a problem at a byte offset of the query text.
type queryIssue struct {
	pos int
	msg string
}

// maxIssues bounds the issues of one query, so that mapping each to a file position (linear in
// the file) keeps the whole check linear.
const maxIssues = 20

// lexQuery splits q into tokens, dropping whitespace and comments.
func lexQuery(q string) ([]token, *queryIssue) {
	var toks []token
	i := 0
	for i < len(q) {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-',
			c == '#' && i+1 < len(q) && (q[i+1] == ' ' || q[i+1] == '!'): // ClickHouse reads "# " and "#!" as comments, nothing else
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			start := i
			depth := 0 // ClickHouse nests /* */ comments
			for i < len(q) {
				if q[i] == '/' && i+1 < len(q) && q[i+1] == '*' {
					depth++
					i += 2
				} else if q[i] == '*' && i+1 < len(q) && q[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
			if depth != 0 {
				return nil, &queryIssue{start, "unterminated /* comment"}
			}
		case c == '\'' || c == '"' || c == '`':
			start := i
			i++
			closed := false
			for i < len(q) {
				if q[i] == '\\' {
					i += 2
					continue
				}
				if q[i] == c {
					if i+1 < len(q) && q[i+1] == c { // doubled quote
						i += 2
						continue
					}
					i++
					closed = true
					break
				}
				i++
			}
			if !closed {
				what := "string literal"
				if c != '\'' {
					what = "quoted identifier"
				}
				return nil, &queryIssue{start, "unterminated " + what + " (missing " + string(c) + ")"}
			}
			kind := tkString
			if c != '\'' {
				kind = tkQuoted
			}
			toks = append(toks, token{kind, q[start:min(i, len(q))], start})
		case c == '$' && heredocTag(q[i:]) != "":
			// $tag$ … $tag$ is a string to ClickHouse: whatever is inside is data, never code.
			tag := heredocTag(q[i:])
			end := strings.Index(q[i+len(tag):], tag)
			if end < 0 {
				return nil, &queryIssue{i, "unterminated heredoc string (missing closing " + tag + ")"}
			}
			end += i + 2*len(tag)
			toks = append(toks, token{tkString, q[i:end], i})
			i = end
		case c == '{':
			// Parameters are short; bounding the search keeps the lexer linear.
			end := strings.IndexByte(q[i:min(len(q), i+256)], '}')
			if end > 0 && paramRe.MatchString(q[i:i+end+1]) {
				toks = append(toks, token{tkParam, q[i : i+end+1], i})
				i += end + 1
			} else if paramStartRe.MatchString(q[i:min(len(q), i+256)]) && (end < 0 || strings.ContainsAny(q[i:i+end+1], "\\'\"`")) {
				// The server lexes a parameter's type as SQL: a backslash or quote there can
				// open a string that runs past the '}' this lexer would stop at, and the two
				// would read the rest of the query differently.
				return nil, &queryIssue{i, "a query parameter's type holds a backslash or a quote (or does not close); write {window_start:DateTime64(3)}, with a time zone only as a plain name: DateTime64(3, 'UTC')"}
			} else {
				toks = append(toks, token{tkPunct, "{", i})
				i++
			}
		case c == ';':
			toks = append(toks, token{tkSemicolon, ";", i})
			i++
		case isIdentStart(c):
			start := i
			for i < len(q) && (isIdentStart(q[i]) || (q[i] >= '0' && q[i] <= '9') || q[i] == '$') {
				i++
			}
			toks = append(toks, token{tkWord, q[start:i], start})
		case c >= '0' && c <= '9':
			start := i
			for i < len(q) && (isIdentStart(q[i]) || (q[i] >= '0' && q[i] <= '9') || q[i] == '.' ||
				((q[i] == '+' || q[i] == '-') && (q[i-1] == 'e' || q[i-1] == 'E'))) {
				i++
			}
			toks = append(toks, token{tkNumber, q[start:i], start})
		default:
			toks = append(toks, token{tkPunct, string(c), i})
			i++
		}
	}
	return toks, nil
}

// heredocTag returns the opening "$tag$" (or "$$") at the start of s, or "".
func heredocTag(s string) string {
	for j := 1; j < len(s) && j < 256; j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1]
		case isIdentStart(c) || (c >= '0' && c <= '9' && j > 1):
		default:
			return ""
		}
	}
	return ""
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}

var (
	// A parameter's type holds no backslash and no quote but around a plain time zone name.
	paramRe      = regexp.MustCompile(`^\{\s*[A-Za-z_][A-Za-z0-9_]*\s*(:([^{}\\'"` + "`" + `]|'[A-Za-z0-9_/+-]*')*)?\}$`)
	paramStartRe = regexp.MustCompile(`^\{\s*[A-Za-z_][A-Za-z0-9_]*\s*:`)
	// The window parameters must be a date-time type the runner's UTC values parse into.
	windowTypeRe = regexp.MustCompile(`^(DateTime64\(\s*[0-9]\s*(,\s*'[A-Za-z0-9_/+-]*'\s*)?\)|DateTime(\(\s*'[A-Za-z0-9_/+-]*'\s*\))?)$`)
)

// writeKeywords start statements that change data or the server.
var writeKeywords = map[string]bool{
	"INSERT": true, "ALTER": true, "DROP": true, "CREATE": true, "TRUNCATE": true, "DELETE": true,
	"UPDATE": true, "RENAME": true, "ATTACH": true, "DETACH": true, "OPTIMIZE": true, "GRANT": true,
	"REVOKE": true, "KILL": true, "SYSTEM": true, "SET": true, "EXCHANGE": true, "UNDROP": true,
	"REPLACE": true, "BACKUP": true, "RESTORE": true, "MOVE": true, "USE": true,
}

// queryInfo is what checkQuery learns about a valid query.
type queryInfo struct {
	windowTokens []token // legacy {window} tokens, to expand
	end          int     // offset just past the statement's last token (drops a trailing ';' and comments)
}

// checkQuery runs the offline check of a hunt query under the default policy.
func checkQuery(q string) (queryInfo, []queryIssue) { return checkQueryPolicy(q, Policy{}) }

// issueList collects issues up to maxIssues.
type issueList []queryIssue

func (l *issueList) add(pos int, format string, args ...any) {
	if len(*l) < maxIssues {
		*l = append(*l, queryIssue{pos, fmt.Sprintf(format, args...)})
	}
}

// checkQueryPolicy runs the offline check of a hunt query. It returns every issue found (most
// queries have at most one), at most maxIssues.
func checkQueryPolicy(q string, p Policy) (queryInfo, []queryIssue) {
	toks, lexErr := lexQuery(q)
	if lexErr != nil {
		return queryInfo{}, []queryIssue{*lexErr}
	}
	s, issue := oneStatement(toks)
	if issue != nil {
		return queryInfo{}, []queryIssue{*issue}
	}
	c := &queryChecker{s: s, p: p, sc: newScopes()}
	c.info.end = s[len(s)-1].pos + len(s[len(s)-1].text)
	for c.i = 0; c.i < len(s); c.i++ {
		if !c.token(s[c.i]) {
			return c.info, c.issues
		}
	}
	if c.sc.depth() != 0 {
		c.issues.add(c.info.end, "unbalanced brackets: %d opened and never closed; a hunt query must keep its brackets balanced", c.sc.depth())
	}
	if (!c.hasStart || !c.hasEnd) && !c.paramIssue {
		c.issues.add(s[0].pos, "query does not use both {window_start:DateTime64(3)} and {window_end:DateTime64(3)}, so every run would read the same rows; filter on the event time, e.g. WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}")
	}
	return c.info, c.issues
}

// oneStatement returns the tokens of the query's one statement (a trailing ';' is tolerated, a
// second statement is not), or the issue that refuses it: empty, or not a SELECT.
func oneStatement(toks []token) ([]token, *queryIssue) {
	s := toks
	for i, t := range toks {
		if t.kind != tkSemicolon {
			continue
		}
		s = toks[:i]
		for _, rest := range toks[i+1:] {
			if rest.kind != tkSemicolon {
				return nil, &queryIssue{rest.pos, "query must be one statement, and a second one starts here; remove the ';' and run the others as separate hunts"}
			}
		}
		break
	}
	if len(s) == 0 {
		return nil, &queryIssue{0, "query is empty (only comments)"}
	}
	first := s[0]
	if first.kind == tkWord && (strings.EqualFold(first.text, "SELECT") || strings.EqualFold(first.text, "WITH")) ||
		first.kind == tkPunct && first.text == "(" {
		return s, nil
	}
	kw := strings.ToUpper(first.text)
	if first.kind == tkWord && writeKeywords[kw] {
		return nil, &queryIssue{first.pos, fmt.Sprintf("query is %s %s statement; a hunt query must be a read-only SELECT (hunt-runner writes the findings itself)", article(kw), kw)}
	}
	return nil, &queryIssue{first.pos, "query must start with SELECT or WITH"}
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// safeName shows a function or setting name from a query only when hunt-runner knows it (an
// off-server function family, a common table function, a listed setting), so a message never
// carries arbitrary file content; the position says where the name is.
func safeName(s string) string {
	l := strings.ToLower(s)
	if !identRe.MatchString(s) {
		return "(a name)"
	}
	if _, setting := allowedSettings[l]; knownTableFunctions[l] || setting || deniedSettings[l] != "" {
		return s
	}
	for _, f := range offServer {
		if l == f.name || (f.prefix && strings.HasPrefix(l, f.name) && len(l) <= len(f.name)+10 && knownSuffix(l[len(f.name):])) {
			return s
		}
	}
	return "(a name)"
}

// knownSuffix is the tail of a function family's member (s3Cluster, remoteSecure, …).
func knownSuffix(s string) bool {
	switch s {
	case "", "cluster", "secure", "allreplicas", "s3", "azure", "hdfs", "local", "queue":
		return true
	}
	return false
}

// knownTableFunctions are ClickHouse table functions a message may name.
var knownTableFunctions = map[string]bool{
	"numbers": true, "numbers_mt": true, "zeros": true, "zeros_mt": true, "merge": true, "view": true,
	"values": true, "null": true, "generaterandom": true, "dictionary": true, "loop": true,
	"generate_series": true, "mergetreeindex": true, "mergetreeparts": true, "format": true,
	"timeseriesdata": true, "prometheusquery": true,
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// settingsClause reads "SETTINGS name = value, …" starting at s[at]. It reports ok=false when
// the word is not a clause (a column called settings). end is the index just past the clause.
// Values are literals (the server's grammar allows nothing else), bracketed ones included.
func settingsClause(s []token, at int, issues *issueList) (end int, ok bool) {
	i := at + 1
	for {
		if i+1 >= len(s) || (s[i].kind != tkWord && s[i].kind != tkQuoted) || s[i+1].text != "=" {
			if i == at+1 {
				return at + 1, false
			}
			return i, true
		}
		name, at := s[i].name(), i
		why, bad := settingRefusal(name)
		if bad {
			issues.add(s[i].pos, "SETTINGS %s is not allowed in a hunt query: it %s", safeName(name), why)
		}
		i += 2
		first, depth, closed := i, 0, false
		for ; i < len(s); i++ {
			switch s[i].text {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
			}
			if depth < 0 {
				closed = true
				break
			}
			if depth == 0 && s[i].text == "," {
				break
			}
		}
		if !bad {
			if issue := settingValueIssue(name, s[first:i]); issue != "" {
				issues.add(s[at].pos, "SETTINGS %s %s", safeName(name), issue)
			}
		}
		if closed || i >= len(s) {
			return i, true
		}
		i++ // past the comma
	}
}

// scopes tracks, per bracket depth, whether the next name is a table (after FROM, JOIN or a
// comma in a FROM list), so that a call there is known to be a table function.
type scopes struct {
	stack []scope
}

type scope struct {
	closer string
	state  int    // stExpr, stTable (a table comes next) or stFromList (in a FROM list, after a table)
	tfunc  string // the table function whose arguments these brackets hold, lower case, or ""
	tpos   int    // where that table function is called
	commas int    // commas seen directly inside these brackets
}

const (
	stExpr = iota
	stTable
	stFromList
)

func newScopes() *scopes { return &scopes{stack: []scope{{}}} }

func (s *scopes) depth() int  { return len(s.stack) - 1 }
func (s *scopes) top() *scope { return &s.stack[len(s.stack)-1] }
func (s *scopes) from()       { s.top().state = stTable }
func (s *scopes) expr()       { s.top().state = stExpr }
func (s *scopes) expectTable() bool {
	return s.top().state == stTable
}

func (s *scopes) tableRead() {
	if s.top().state == stTable {
		s.top().state = stFromList
	}
}

func (s *scopes) comma() {
	s.top().commas++
	if s.top().state == stFromList {
		s.top().state = stTable
	}
}

func (s *scopes) open(b, tfunc string, tpos int) {
	closer := map[string]string{"(": ")", "[": "]", "{": "}"}[b]
	s.tableRead() // FROM (subquery) or a call: the table position is taken
	s.stack = append(s.stack, scope{closer: closer, tfunc: tfunc, tpos: tpos})
}

// close pops a bracket and returns its scope; false when it does not match (or there is none
// to close).
func (s *scopes) close(b string) (scope, bool) {
	if len(s.stack) == 1 || s.top().closer != b {
		return scope{}, false
	}
	top := *s.top()
	s.stack = s.stack[:len(s.stack)-1]
	return top, true
}

// expandWindow replaces each legacy {window} token with the earlier runner's predicate.
func expandWindow(q string, toks []token, field string) string {
	if len(toks) == 0 {
		return q
	}
	pred := "(" + field + " >= {window_start:DateTime64(3)} AND " + field + " < {window_end:DateTime64(3)})"
	var b strings.Builder
	last := 0
	for _, t := range toks {
		b.WriteString(q[last:t.pos])
		b.WriteString(pred)
		last = t.pos + len(t.text)
	}
	b.WriteString(q[last:])
	return b.String()
}

func article(word string) string {
	if word != "" && strings.ContainsRune("AEIOU", rune(word[0])) {
		return "an"
	}
	return "a"
}
