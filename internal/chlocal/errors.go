package chlocal

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// exception is a ClickHouse error as the HTTP interface reports it.
type exception struct {
	code int
	name string // e.g. SYNTAX_ERROR; may be empty
	msg  string // the text after "DB::Exception: ", without name or version
}

var (
	// chDB sometimes nests the same exception: "Code: 115. DB::Exception:
	// Code: 115. DB::Exception: … (UNKNOWN_SETTING) (version …). (UNKNOWN_SETTING)".
	exceptionPrefixRe = regexp.MustCompile(`^\s*Code:\s*(\d+)\.\s*(?:DB::Exception:\s*)?`)
	exceptionTailRe   = regexp.MustCompile(`(?s)\.?\s*\(([A-Z][A-Z0-9_]*)\)\s*(?:\(version [^)]*(?:\([^)]*\))?[^)]*\))?\.?\s*$`)
)

// parseException turns chDB's error text into an exception. Text without a
// code becomes code 1001 (STD_EXCEPTION), so that clients still get a typed
// error.
func parseException(text string) exception {
	ex := exception{code: 1001, name: "STD_EXCEPTION"}
	s := strings.TrimSpace(text)
	found := false
	for {
		m := exceptionPrefixRe.FindStringSubmatch(s)
		if m == nil {
			break
		}
		if c, err := strconv.Atoi(m[1]); err == nil && c > 0 {
			ex.code, found = c, true
		}
		s = s[len(m[0]):]
	}
	if found {
		ex.name = ""
	}
	// Strip every trailing "(NAME)" / "(version …)" group, keeping the first
	// name seen from the end.
	for {
		m := exceptionTailRe.FindStringSubmatchIndex(s)
		if m == nil {
			break
		}
		if ex.name == "" || !found {
			ex.name = s[m[2]:m[3]]
		}
		s = strings.TrimSpace(s[:m[0]])
	}
	ex.msg = s
	return ex
}

// body is the response body clickhouse-server sends for the exception.
func (ex exception) body(version string) string {
	var b strings.Builder
	b.WriteString("Code: ")
	b.WriteString(strconv.Itoa(ex.code))
	b.WriteString(". DB::Exception: ")
	b.WriteString(ex.msg)
	if ex.name != "" {
		b.WriteString(" (")
		b.WriteString(ex.name)
		b.WriteString(")")
	}
	b.WriteString(" (version ")
	b.WriteString(version)
	b.WriteString(")\n")
	return b.String()
}

// status maps an error code to the HTTP status clickhouse-server uses
// (HTTPHandler's exceptionCodeToHTTPStatus), for the codes tests meet.
func (ex exception) status() int {
	switch ex.code {
	case 192, 193, 194, 195, 497, 516: // UNKNOWN_USER, WRONG_PASSWORD, REQUIRED_PASSWORD, IP_ADDRESS_NOT_ALLOWED, ACCESS_DENIED, AUTHENTICATION_FAILED
		return http.StatusForbidden
	case 6, 25, 26, 27, 33, 36, 38, 41, 42, 43, 53, 62, 72, 117, 167, 168, 223, 321, 395:
		// CANNOT_PARSE_*, CANNOT_READ_ALL_DATA, BAD_ARGUMENTS,
		// NUMBER_OF_ARGUMENTS_DOESNT_MATCH, ILLEGAL_TYPE_OF_ARGUMENT,
		// TYPE_MISMATCH, SYNTAX_ERROR, INCORRECT_DATA, TOO_DEEP_AST,
		// TOO_BIG_AST, UNEXPECTED_AST_STRUCTURE,
		// VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE, FUNCTION_THROW_IF_VALUE_IS_NON_ZERO
		return http.StatusBadRequest
	case 46, 47, 50, 56, 60, 73, 81, 115, 63, 336:
		// UNKNOWN_FUNCTION, UNKNOWN_IDENTIFIER, UNKNOWN_TYPE,
		// UNKNOWN_STORAGE, UNKNOWN_TABLE, UNKNOWN_FORMAT, UNKNOWN_DATABASE,
		// UNKNOWN_SETTING, UNKNOWN_AGGREGATE_FUNCTION, UNKNOWN_DATABASE_ENGINE
		return http.StatusNotFound
	case 159: // TIMEOUT_EXCEEDED
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
