package yamlpos

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hunt-runner/hunt-runner/schedule"
	"go.yaml.in/yaml/v3"
)

// The typed scalar readers. YAML turns unquoted numbers and booleans into other types; those
// are errors (quote the value), never silently converted.

// Str reads a required string scalar.
func Str(v *yaml.Node, key string, at At) (string, bool) {
	if v.Kind != yaml.ScalarNode {
		at(v, "%s must be a string, not %s", key, Kind(v))
		return "", false
	}
	switch v.ShortTag() {
	case "!!str":
		return v.Value, true
	case "!!null":
		at(v, "%s is empty", key)
	default:
		at(v, "%s must be a string, not %s; quote the value", key, Kind(v))
	}
	return "", false
}

// OptStr is Str that reads an empty value as "".
func OptStr(v *yaml.Node, key string, at At) (string, bool) {
	if IsNull(v) {
		return "", true
	}
	return Str(v, key, at)
}

// StrValue is the text of a string scalar, false for anything else (a number, a boolean, empty).
func StrValue(v *yaml.Node) (string, bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
		return v.Value, true
	}
	return "", false
}

// BoolValue is the value of a YAML 1.2 boolean scalar (true, false in any case), false in ok for
// anything else.
func BoolValue(v *yaml.Node) (value, ok bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
		return false, false
	}
	b, err := strconv.ParseBool(strings.ToLower(v.Value))
	return b, err == nil
}

// Bool reads true or false. A plain yes/no/on/off (a boolean only in YAML 1.1, a string to
// yaml.v3) is refused rather than read as a string or guessed. After a problem it returns
// true, the value that keeps a broken file from silently switching something off.
func Bool(v *yaml.Node, key string, at At) bool {
	if b, ok := BoolValue(v); ok {
		return b
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Style == 0 && IsYAML11Bool(v.Value) {
		at(v, "%s: this value is a boolean only in YAML 1.1; write true or false", key)
		return true
	}
	at(v, "%s must be true or false, not %s", key, Kind(v))
	return true
}

// IsYAML11Bool tells the words YAML 1.1 read as booleans and YAML 1.2 reads as strings.
func IsYAML11Bool(s string) bool {
	switch strings.ToLower(s) {
	case "yes", "no", "on", "off", "y", "n":
		return true
	}
	return false
}

// IntValue is the value of an integer scalar, false in ok for anything else.
func IntValue(v *yaml.Node) (int, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		return 0, false
	}
	n, err := strconv.Atoi(v.Value)
	return n, err == nil
}

// AllDigits tells a plain decimal from the other integers YAML reads (signed, 0x, 0o, with
// underscores), which an author did not mean as a count or a number of seconds.
func AllDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

var sexagesRe = regexp.MustCompile(`^[0-9]+(:[0-5]?[0-9])+$`)

// Duration reads a duration in the project's grammar (schedule.ParseDuration: days, hours,
// minutes, seconds, or a bare number of seconds) after the YAML-level checks; a key ending in
// "interval" is read by schedule.ParseInterval, whose messages say interval. zeroOK accepts a
// zero (0, 0s, 0m, …). After a problem it returns 0.
func Duration(v *yaml.Node, key string, zeroOK bool, at At) time.Duration {
	if v.Kind != yaml.ScalarNode {
		at(v, "%s must be a duration such as 5m, not %s", key, Kind(v))
		return 0
	}
	text := v.Value
	switch v.ShortTag() {
	case "!!str":
		if v.Style == 0 && IsYAML11Bool(text) {
			at(v, "%s: the value is a boolean in YAML 1.1, not a duration; write a duration such as 5m", key)
			return 0
		}
		if v.Style == 0 && sexagesRe.MatchString(text) {
			at(v, "%s: the value is a base-60 number in YAML 1.1, not a duration; write it with units, such as 1h30m", key)
			return 0
		}
	case "!!int":
		if !AllDigits(text) {
			at(v, "%s: the value is not a decimal number of seconds; write a duration such as 5m", key)
			return 0
		}
	case "!!float":
		at(v, "%s: the value is read by YAML as a floating-point number, not a duration; write whole units such as 1000s or 15m", key)
		return 0
	case "!!bool":
		at(v, "%s: the value is a boolean, not a duration; write a duration such as 5m", key)
		return 0
	case "!!null":
		at(v, "%s is empty; write a duration such as 5m", key)
		return 0
	default:
		at(v, "%s must be a duration such as 5m, not %s", key, Kind(v))
		return 0
	}
	if zeroOK && isZero(text) {
		return 0
	}
	parse := schedule.ParseDuration
	if strings.HasSuffix(key, "interval") { // interval or schedule.interval
		parse = schedule.ParseInterval
	}
	dur, err := parse(text)
	if err != nil {
		at(v, "%s: %s", key, WithoutValue(err.Error(), text))
		return 0
	}
	return dur
}

func isZero(s string) bool {
	s = strings.TrimRight(strings.TrimSpace(s), "smhd")
	return s != "" && strings.Trim(s, "0") == ""
}

// WithoutValue removes a value that a parser quoted in its message. A unit it quotes ("min" of
// 5min) stays when it is a short word: the author cannot fix what is not named, and a few
// letters are no secret.
func WithoutValue(msg, value string) string {
	if value == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, " "+strconv.Quote(value), "")
	msg = quotedRe.ReplaceAllStringFunc(msg, func(q string) string {
		if inner := q[1 : len(q)-1]; inner != "" && strings.Contains(value, inner) && !unitWordRe.MatchString(q) {
			return "…"
		}
		return q
	})
	msg = strings.ReplaceAll(msg, value, "the value")
	for _, f := range strings.Fields(value) {
		if len(f) >= 3 {
			msg = strings.ReplaceAll(msg, f, "…")
		}
	}
	return msg
}

var quotedRe = regexp.MustCompile(`"[^"]*"`)

// unitWordRe is a quoted unit short enough to name (min, secs, hours, weeks).
var unitWordRe = regexp.MustCompile(`^"[A-Za-z]{1,7}"$`)
