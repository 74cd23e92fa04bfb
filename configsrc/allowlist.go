package configsrc

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The allowlist a hunt's query is checked against, offline (the names the lexer sees) and on the
// server's parse (every function node). A name is compared case-insensitively: ClickHouse's
// function names never differ only by case unless they are aliases of one function
// (TestDefaultFunctionsExist checks that on the engine).

// aggregateCombinators are the suffixes ClickHouse lets any aggregate take (system.
// aggregate_function_combinators, less the internal Null). Each only changes how the aggregate
// is fed or what it returns, so an allowed aggregate stays allowed with them: countIf,
// sumArrayIf, uniqState, quantilesMerge, avgOrNull.
var aggregateCombinators = []string{
	"If", "Array", "Map", "State", "Merge", "MergeState", "SimpleState", "OrNull", "OrDefault",
	"ForEach", "Distinct", "Resample", "ArgMin", "ArgMax",
}

// syntaxFunctions are the names the server's parser writes for syntax that has no function of
// that name in system.functions: a lambda (x -> …) and EXISTS (subquery).
var syntaxFunctions = []string{"lambda", "exists"}

// Table functions allowed by default: generators of numbers, whose arguments must be numeric
// literals generating at most MaxGeneratedRows rows.
var defaultTableFunctions = []string{"numbers", "numbers_mt", "generate_series", "generateSeries"}

// MaxGeneratedRows bounds the rows one default generator (numbers(N), generate_series(a, b))
// may produce: enough for a calendar or a lookup range, far from a flood.
const MaxGeneratedRows = 1_000_000

// Hunt-runner's lower-case sets, built once from the lists above.
var (
	scalarSet      = lowerSet(defaultScalars, syntaxFunctions)
	aggregateSet   = lowerSet(defaultAggregates)
	dictionarySet  = lowerSet(dictionaryFunctions)
	leftOutSet     = lowerSet(leftOut)
	combinatorsLow = func() []string {
		out := make([]string, len(aggregateCombinators))
		for i, c := range aggregateCombinators {
			out[i] = strings.ToLower(c)
		}
		return out
	}()
)

func lowerSet(lists ...[]string) map[string]bool {
	m := map[string]bool{}
	for _, l := range lists {
		for _, s := range l {
			m[strings.ToLower(s)] = true
		}
	}
	return m
}

// DefaultFunctions lists the default function allowlist, sorted (for documentation and tests):
// scalar, aggregate and dictionary functions.
func DefaultFunctions() []string {
	out := slices.Concat(defaultScalars, defaultAggregates, dictionaryFunctions)
	slices.Sort(out)
	return slices.Compact(out)
}

// DefaultTableFunctions lists the table functions allowed by default.
func DefaultTableFunctions() []string { return slices.Clone(defaultTableFunctions) }

// isAggregate reports whether lower (a lower-case name) is an allowed aggregate, with any chain
// of combinators (at most four: sumArrayIfOrNull is three).
func isAggregate(lower string, depth int) bool {
	if aggregateSet[lower] {
		return true
	}
	if depth == 4 {
		return false
	}
	for _, c := range combinatorsLow {
		if len(lower) > len(c) && strings.HasSuffix(lower, c) && isAggregate(lower[:len(lower)-len(c)], depth+1) {
			return true
		}
	}
	return false
}

// functionAllowed reports whether a hunt may call the (scalar, aggregate or window) function.
// Dictionary functions are allowed here; their dictionary is checked by dictionaryIssue.
func (p Policy) functionAllowed(name string) bool {
	l := strings.ToLower(name)
	return scalarSet[l] || isAggregate(l, 0) || dictionarySet[l] || p.extraFunctions()[l]
}

func (p Policy) extraFunctions() map[string]bool { return lowerSet(p.AllowFunctions) }

// tableFunctionAllowed reports whether a hunt may read from the table function.
func (p Policy) tableFunctionAllowed(name string) bool {
	l := strings.ToLower(name)
	return slices.Contains(defaultTableFunctions, l) || p.allowedTableFunctions()[l]
}

// functionRefusal is the message for a call of a function not on the allowlist.
func functionRefusal(name string) string {
	shown := functionName(name)
	return fmt.Sprintf("query calls %s(), which is not on hunt-runner's function allowlist (docs/hunts.md); an operator can allow it with --allow-functions %s (Policy.AllowFunctions)",
		shown, cmpOr(shown, "NAME"))
}

// tableFunctionRefusal is the message for a table function not on the allowlist.
func tableFunctionRefusal(name string) string {
	if why, bad := offServerReason(name); bad {
		return fmt.Sprintf("query calls %s(), which %s; a hunt may read only tables on the ClickHouse server", safeName(name), why)
	}
	shown := functionName(name)
	return fmt.Sprintf("query calls table function %s(); a hunt may read only tables and the default generators (numbers, generate_series); an operator can allow it with --allow-table-functions %s (Policy.AllowTableFunctions)",
		shown, cmpOr(shown, "NAME"))
}

func cmpOr(shown, placeholder string) string {
	if shown == "(a name)" {
		return placeholder
	}
	return shown
}

// functionName shows a function name when hunt-runner knows it (on a list of this file, or an
// off-server family), and "(a name)" otherwise: an unknown name is file content.
func functionName(name string) string {
	l := strings.ToLower(name)
	if identRe.MatchString(name) && (scalarSet[l] || aggregateSet[l] || dictionarySet[l] || leftOutSet[l] || isAggregate(l, 0)) {
		return name
	}
	return safeName(name)
}

// dictNameRe is a dictionary name a hunt may give dictGet: a plain name, maybe qualified.
var dictNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// dictionaryIssue says why a dictionary function may not read the dictionary named by the
// literal text lit (the SQL string as the server prints it, quotes included), or "".
func (p Policy) dictionaryIssue(fn, lit string) string {
	name, ok := plainString(lit)
	if !ok || !dictNameRe.MatchString(name) {
		return fmt.Sprintf("%s() must name its dictionary in a plain string literal ('db.dictionary'); hunt-runner refuses what it cannot check", functionName(fn))
	}
	if db, _, q := strings.Cut(name, "."); q {
		if issue := p.schemaIssue(db); issue != "" {
			return issue
		}
	}
	if !slices.Contains(p.AllowDictionaries, name) {
		return fmt.Sprintf("%s() reads a dictionary that is not allowed; an operator can allow it with --allow-dictionaries DB.NAME (Policy.AllowDictionaries)", functionName(fn))
	}
	return ""
}

// plainString returns the value of a single-quoted SQL string without escapes, as the server
// prints a Literal; false for anything else (an escape, another type).
func plainString(lit string) (string, bool) {
	if len(lit) < 2 || lit[0] != '\'' || lit[len(lit)-1] != '\'' {
		return "", false
	}
	v := lit[1 : len(lit)-1]
	if strings.ContainsAny(v, `'\`) {
		return "", false
	}
	return v, true
}

// generatedRows is how many rows numbers(…) or generate_series(…) produce for literal integer
// arguments; false when the arguments are not such literals.
func generatedRows(fn string, args []string) (uint64, bool) {
	vals := make([]int64, len(args))
	for i, a := range args {
		v, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return 0, false
		}
		vals[i] = v
	}
	switch l := strings.ToLower(fn); {
	case l == "numbers" || l == "numbers_mt":
		// numbers(N), numbers(offset, N), numbers(offset, N, step)
		switch len(vals) {
		case 1:
			return uint64(max(vals[0], 0)), vals[0] >= 0
		case 2, 3:
			return uint64(max(vals[1], 0)), vals[1] >= 0
		}
	case l == "generate_series" || l == "generateseries":
		// generate_series(start, stop[, step]): inclusive of stop
		step := int64(1)
		if len(vals) == 3 {
			step = vals[2]
		}
		if (len(vals) == 2 || len(vals) == 3) && step > 0 && vals[1]-vals[0] < math.MaxInt64 {
			if vals[1] < vals[0] {
				return 0, true
			}
			return uint64((vals[1]-vals[0])/step) + 1, true
		}
	}
	return 0, false
}
