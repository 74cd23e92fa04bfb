package configsrc

import (
	"fmt"
	"regexp"
	"strings"
)

// The offline query check. It is lexical on purpose: it needs no server, runs in CI and in
// every reload, and is exact about what it looks at (statement count, the first keyword,
// function names followed by "(", SETTINGS names, query parameters) because it tokenises
// strings, quoted identifiers and comments the way ClickHouse does. The server's parser, asked
// through CheckWithServer, is the authority on everything else.

type tokKind int

const (
	tkWord   tokKind = iota // keyword or bare identifier
	tkQuoted                // "identifier" or `identifier`
	tkString                // 'literal'
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

// queryIssue is a problem at a byte offset of the query text.
type queryIssue struct {
	pos int
	msg string
}

// lexQuery splits q into tokens, dropping whitespace and comments.
func lexQuery(q string) ([]token, *queryIssue) {
	var toks []token
	i := 0
	for i < len(q) {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-', c == '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			start := i
			depth := 0 // ClickHouse nests /* */ comments
			for i < len(q) {
				if strings.HasPrefix(q[i:], "/*") {
					depth++
					i += 2
				} else if strings.HasPrefix(q[i:], "*/") {
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
		case c == '{':
			// Parameters are short; bounding the search keeps the lexer linear.
			if end := strings.IndexByte(q[i:min(len(q), i+256)], '}'); end > 0 && paramRe.MatchString(q[i:i+end+1]) {
				toks = append(toks, token{tkParam, q[i : i+end+1], i})
				i += end + 1
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

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}

var (
	paramRe = regexp.MustCompile(`^\{\s*[A-Za-z_][A-Za-z0-9_]*\s*(:[^{}]*)?\}$`)
	// The window parameters must be a date-time type the runner's UTC values parse into.
	windowTypeRe = regexp.MustCompile(`^(DateTime64\(\s*[0-9]\s*(,\s*'[^']*'\s*)?\)|DateTime(\(\s*'[^']*'\s*\))?)$`)
)

// offServer lists table functions (and the scalar file()) that read from or act outside the
// ClickHouse server. A hunt runs unattended with the runner's credentials: it may read only
// the server's own tables. Keys are lower case; prefix entries cover a whole family
// (s3Cluster, remoteSecure, clusterAllReplicas, icebergS3, …).
var offServer = []struct {
	name   string
	prefix bool
	why    string
}{
	{"url", false, "fetches data over HTTP from outside the server"},
	{"urlcluster", false, "fetches data over HTTP from outside the server"},
	{"s3", true, "reads object storage outside the server"},
	{"gcs", true, "reads object storage outside the server"},
	{"oss", true, "reads object storage outside the server"},
	{"cosn", true, "reads object storage outside the server"},
	{"azureblobstorage", true, "reads object storage outside the server"},
	{"hdfs", true, "reads HDFS outside the server"},
	{"iceberg", true, "reads a data lake outside the server"},
	{"deltalake", true, "reads a data lake outside the server"},
	{"hudi", true, "reads a data lake outside the server"},
	{"paimon", true, "reads a data lake outside the server"},
	{"remote", true, "queries another ClickHouse server"},
	{"cluster", true, "fans the query out to other servers"},
	{"mysql", true, "queries an external MySQL database"},
	{"postgresql", true, "queries an external PostgreSQL database"},
	{"mongodb", true, "queries an external MongoDB"},
	{"redis", true, "queries an external Redis"},
	{"sqlite", true, "opens an SQLite file on the server"},
	{"jdbc", true, "queries an external database through the JDBC bridge"},
	{"odbc", true, "queries an external database through the ODBC bridge"},
	{"ytsaurus", true, "queries an external YTsaurus cluster"},
	{"arrowflight", true, "queries an external Arrow Flight service"},
	{"file", false, "reads files on the server's filesystem"},
	{"filecluster", false, "reads files on the servers' filesystems"},
	{"executable", true, "runs a program on the server"},
	{"input", false, "reads data sent by the client, and a hunt sends none"},
}

func offServerReason(name string) (string, bool) {
	l := strings.ToLower(name)
	for _, f := range offServer {
		if l == f.name || (f.prefix && strings.HasPrefix(l, f.name)) {
			return f.why, true
		}
	}
	return "", false
}

// deniedSettings are settings a query may not change: they would lift the read-only guard or
// the per-run time limit the runner enforces from the hunt's timeout.
var deniedSettings = map[string]string{
	"readonly":                               "would change the read-only guard",
	"allow_ddl":                              "would allow DDL",
	"allow_introspection_functions":          "would allow introspection functions",
	"max_execution_time":                     "would override the hunt's timeout; set timeout: instead",
	"max_execution_time_leaf":                "would override the hunt's timeout; set timeout: instead",
	"timeout_overflow_mode":                  "would override the hunt's timeout; set timeout: instead",
	"timeout_overflow_mode_leaf":             "would override the hunt's timeout; set timeout: instead",
	"max_estimated_execution_time":           "would override the hunt's timeout; set timeout: instead",
	"allow_experimental_database_replicated": "would change server behaviour",
}

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

// checkQuery runs the offline check of a hunt query. It returns every issue found (most queries
// have at most one).
func checkQuery(q string) (queryInfo, []queryIssue) {
	var info queryInfo
	toks, lexErr := lexQuery(q)
	if lexErr != nil {
		return info, []queryIssue{*lexErr}
	}
	// Statements: a trailing ';' is tolerated, a second statement is not.
	var stmts [][]token
	var cur []token
	for _, t := range toks {
		if t.kind == tkSemicolon {
			if len(cur) > 0 {
				stmts = append(stmts, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, t)
	}
	if len(cur) > 0 {
		stmts = append(stmts, cur)
	}
	switch {
	case len(stmts) == 0:
		return info, []queryIssue{{0, "query is empty (only comments)"}}
	case len(stmts) > 1:
		return info, []queryIssue{{stmts[1][0].pos, fmt.Sprintf("query must be one statement, found %d (the second starts here); remove the ';' and run the others as separate hunts", len(stmts))}}
	}
	s := stmts[0]
	first := s[0]
	info.end = s[len(s)-1].pos + len(s[len(s)-1].text)
	if first.kind != tkWord || !(strings.EqualFold(first.text, "SELECT") || strings.EqualFold(first.text, "WITH")) {
		if !(first.kind == tkPunct && first.text == "(") {
			kw := strings.ToUpper(first.text)
			if first.kind == tkWord && writeKeywords[kw] {
				return info, []queryIssue{{first.pos, fmt.Sprintf("query is %s %s statement; a hunt query must be a read-only SELECT (hunt-runner writes the findings itself)", article(kw), kw)}}
			}
			return info, []queryIssue{{first.pos, fmt.Sprintf("query must start with SELECT or WITH, not %q", first.text)}}
		}
	}

	var issues []queryIssue
	var hasStart, hasEnd, paramIssue bool
	depth := 0
	for i, t := range s {
		next := func(k int) (token, bool) {
			if i+k < len(s) {
				return s[i+k], true
			}
			return token{}, false
		}
		switch t.kind {
		case tkPunct:
			switch t.text {
			case "(":
				depth++
			case ")":
				depth--
			}
		case tkParam:
			name, typ, hasType := strings.Cut(strings.Trim(t.text, "{}"), ":")
			name, typ = strings.TrimSpace(name), strings.TrimSpace(typ)
			switch {
			case name == "window" && !hasType:
				info.windowTokens = append(info.windowTokens, t)
				hasStart, hasEnd = true, true
			case name == "window_start" || name == "window_end":
				if !hasType || !windowTypeRe.MatchString(typ) {
					paramIssue = true
					issues = append(issues, queryIssue{t.pos, fmt.Sprintf("parameter %s must have a date-time type, as in {%s:DateTime64(3)}", t.text, name)})
				}
				if name == "window_start" {
					hasStart = true
				} else {
					hasEnd = true
				}
			default:
				paramIssue = true
				issues = append(issues, queryIssue{t.pos, fmt.Sprintf("unknown query parameter %s; hunt-runner binds only {window_start:DateTime64(3)} and {window_end:DateTime64(3)}", t.text)})
			}
		case tkWord, tkQuoted:
			n, ok := next(1)
			isCall := ok && n.kind == tkPunct && n.text == "("
			upper := strings.ToUpper(t.text)
			if isCall {
				if prev := i - 1; prev >= 0 && s[prev].kind == tkPunct && s[prev].text == "." {
					break // a method-like db.func( is a qualified name, not a table function
				}
				name := t.text
				if t.kind == tkQuoted { // `url`(…) is still url(…)
					name = name[1 : len(name)-1]
				}
				if why, bad := offServerReason(name); bad {
					issues = append(issues, queryIssue{t.pos, fmt.Sprintf("query calls %s(), which %s; a hunt may read only tables on the ClickHouse server", name, why)})
				}
				break
			}
			if t.kind == tkQuoted {
				break
			}
			switch upper {
			case "INTO":
				if n, ok := next(1); ok && strings.EqualFold(n.text, "OUTFILE") {
					issues = append(issues, queryIssue{t.pos, "INTO OUTFILE writes a file; remove it (hunt-runner stores findings in hunt_findings)"})
				}
			case "FORMAT":
				// The clause is FORMAT <name> at the end (maybe before SETTINGS); a column
				// that happens to be called format is not one.
				n1, ok1 := next(1)
				n2, ok2 := next(2)
				if depth == 0 && ok1 && n1.kind == tkWord && (!ok2 || (n2.kind == tkWord && strings.EqualFold(n2.text, "SETTINGS"))) {
					issues = append(issues, queryIssue{t.pos, "FORMAT clause: remove it; hunt-runner inserts the rows into hunt_findings itself"})
				}
			case "SETTINGS":
				issues = append(issues, checkSettings(s[i+1:])...)
			}
		}
	}
	if (!hasStart || !hasEnd) && !paramIssue {
		issues = append(issues, queryIssue{first.pos, "query does not use both {window_start:DateTime64(3)} and {window_end:DateTime64(3)}, so every run would read the same rows; filter on the event time, e.g. WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}"})
	}
	return info, issues
}

// checkSettings looks at the "name = value" pairs of a SETTINGS clause.
func checkSettings(toks []token) []queryIssue {
	var issues []queryIssue
	depth := 0
	for i, t := range toks {
		if t.kind == tkPunct {
			switch t.text {
			case "(":
				depth++
			case ")":
				depth--
			}
			if depth < 0 {
				break
			}
			continue
		}
		if depth != 0 || t.kind != tkWord || i+1 >= len(toks) || toks[i+1].text != "=" {
			continue
		}
		if why, bad := deniedSettings[strings.ToLower(t.text)]; bad {
			issues = append(issues, queryIssue{t.pos, fmt.Sprintf("SETTINGS %s is not allowed in a hunt query: it %s", t.text, why)})
		}
	}
	return issues
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
