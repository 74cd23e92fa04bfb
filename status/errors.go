package status

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/hunt-runner/hunt-runner/configsrc"
)

// The statement a hunt runs as wraps its query (configsrc.FindingsQuery); a server error that
// echoes the statement quotes that wrapper, which the author never wrote.
var wrapPrefix, wrapSuffix = func() (string, string) {
	p, s, _ := strings.Cut(configsrc.FindingsQuery("\x00"), "\x00")
	return p, s
}()

var (
	// transportRe is the driver's HTTP framing: "sendQuery: [HTTP 404] ".
	transportRe = regexp.MustCompile(`sendQuery: (\[HTTP \d{3}\] )?`)
	codeRe      = regexp.MustCompile(`\bcode: (\d+), message: `)
	versionRe   = regexp.MustCompile(` \(version [0-9.]+\)`)
	// syntaxRe is a syntax error's position and its echo of the rest of the statement.
	syntaxRe = regexp.MustCompile(`failed at position \d+ (\(.*?\)) \(line (\d+), col (\d+)\): (?s:(.*?))` +
		regexp.QuoteMeta(strings.TrimPrefix(wrapSuffix, "\n")) + `\.`)
	// checkEchoRe is the server check's quote of the statement from the failing token on
	// (configsrc flattens and cuts it), when it reaches the wrapper.
	checkEchoRe = regexp.MustCompile(`(\([^)]*\)): (?s:.*?)(?:ORDER BY cityHash64\(hr_f|hr_finding|hr_limit)(?s:.*?)(?:\.\.\.|\.) (Expected)`)
	// scopeRe is the analyzer's "In scope <the wrapping SELECT>", up to the error's name.
	scopeRe = regexp.MustCompile(`(?s)[.:]? [Ii]n scope ` + regexp.QuoteMeta(strings.TrimSpace(strings.SplitN(wrapPrefix, "\n", 2)[0])) + `.*?( \([A-Z_]+\))$`)
)

// wrapLines is how many lines the wrapper puts before the hunt's query.
var wrapLines = strings.Count(wrapPrefix, "\n")

// CleanError is a stored run error as people read it: the server's cause in full, without the
// driver's transport framing (sendQuery: [HTTP 404]), the server version, or the wrapping
// statement; a syntax error's line is the line of the hunt's own query. The stored row keeps
// the original.
func CleanError(msg string) string {
	msg = transportRe.ReplaceAllString(msg, "")
	msg = codeRe.ReplaceAllString(msg, "Code $1: ")
	msg = versionRe.ReplaceAllString(msg, "")
	msg = syntaxRe.ReplaceAllStringFunc(msg, func(m string) string {
		g := syntaxRe.FindStringSubmatch(m)
		line, _ := strconv.Atoi(g[2])
		if g[4] == "" { // the wrapper's closing parenthesis: the query stopped short
			return "failed at the end of the hunt's query."
		}
		if line <= wrapLines {
			return "failed at " + g[1] + "."
		}
		return "failed at " + g[1] + " (line " + strconv.Itoa(line-wrapLines) + ", col " + g[3] + " of the hunt's query)."
	})
	msg = checkEchoRe.ReplaceAllString(msg, "$1. $2")
	msg = scopeRe.ReplaceAllString(msg, "$1")
	return msg
}
