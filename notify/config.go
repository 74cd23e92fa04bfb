package notify

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Sink types.
const (
	TypeWebhook      = "webhook"
	TypeAlertmanager = "alertmanager"
	TypeSlack        = "slack"
)

// Defaults of the notify config.
const (
	DefaultMaxFindings = 20
	DefaultHorizon     = 24 * time.Hour
	DefaultSinkTimeout = 10 * time.Second
)

// sinkNameRe equals configsrc.SinkNameRe (TestSinkNameShapeMatchesHuntFiles); it is not
// imported from there so that this package, and the Alertmanager test module, do not pull in
// configsrc's git client.
var sinkNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Config is a parsed --notify-config file. Secrets are read from their files at parse time.
type Config struct {
	File        string
	Sinks       []Sink
	Routes      []Route
	MaxFindings int           // max_notify_findings: findings carried per notification
	Horizon     time.Duration // retry_horizon: failures are retried this long, then dead-lettered
}

// Sink is one destination.
type Sink struct {
	Name    string
	Type    string
	URL     string // never logged for slack: an incoming-webhook URL is itself a credential
	Secret  []byte // webhook HMAC-SHA256 key (secret_file)
	Bearer  string // Authorization: Bearer (bearer_token_file)
	Timeout time.Duration
}

// Route sends hunts whose fields all equal Match (hunt_id, severity or a label) to Sinks.
type Route struct {
	Match map[string]string
	Sinks []string
}

// Sink returns the sink named name.
func (c *Config) Sink(name string) (Sink, bool) {
	for _, s := range c.Sinks {
		if s.Name == name {
			return s, true
		}
	}
	return Sink{}, false
}

// SinksFor returns the sinks a hunt notifies: its own notify: list when it has one, else the
// first matching route's sinks. Unknown names are dropped (validate reports them).
func (c *Config) SinksFor(h Hunt) []string {
	if c == nil {
		return nil
	}
	names := h.Notify
	if names == nil {
		for _, r := range c.Routes {
			if r.matches(h) {
				names = r.Sinks
				break
			}
		}
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if _, ok := c.Sink(n); ok && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func (r Route) matches(h Hunt) bool {
	for k, v := range r.Match {
		var got string
		switch k {
		case "hunt_id":
			got = h.ID
		case "severity":
			got = h.Severity
		default:
			got = h.Labels[k]
		}
		if got != v {
			return false
		}
	}
	return true
}

// UnknownSinks lists the names in a hunt's notify: list that the config does not define.
func (c *Config) UnknownSinks(h Hunt) []string {
	var out []string
	for _, n := range h.Notify {
		if _, ok := c.Sink(n); !ok {
			out = append(out, n)
		}
	}
	return out
}

// ConfigError is one problem of a notify config, positioned for an editor.
type ConfigError struct {
	File         string
	Line, Column int
	Message      string
}

func (e ConfigError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
}

// ConfigErrors is every problem found; Error joins them one per line.
type ConfigErrors []ConfigError

func (es ConfigErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// LoadConfig reads and parses a notify config file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("notify config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses a notify config strictly: unknown keys, wrong types, duplicate or
// undefined sink names, credentials in URLs and unreadable secret files are all errors,
// reported together as ConfigErrors.
func ParseConfig(file string, data []byte) (*Config, error) {
	p := &cfgParser{file: file}
	c := p.parse(data)
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return c, nil
}

type cfgParser struct {
	file string
	errs ConfigErrors
}

func (p *cfgParser) at(n *yaml.Node, format string, args ...any) {
	line, col := 1, 1
	if n != nil {
		line, col = max(n.Line, 1), max(n.Column, 1)
	}
	p.errs = append(p.errs, ConfigError{File: p.file, Line: line, Column: col, Message: fmt.Sprintf(format, args...)})
}

var yamlLineRe = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)

func (p *cfgParser) parse(data []byte) *Config {
	c := &Config{File: p.file, MaxFindings: DefaultMaxFindings, Horizon: DefaultHorizon}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.at(nil, "notify config is empty; it needs sinks:")
			return c
		}
		line, msg := 1, err.Error()
		if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		p.errs = append(p.errs, ConfigError{File: p.file, Line: line, Column: 1, Message: msg})
		return c
	}
	if len(doc.Content) == 0 {
		p.at(nil, "notify config is empty; it needs sinks:")
		return c
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.at(root, "notify config must be a mapping with sinks: and routes:")
		return c
	}
	var routesN *yaml.Node
	for _, kv := range p.pairs(root, "") {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "sinks":
			p.sinks(c, v)
		case "routes":
			routesN = v
		case "max_notify_findings":
			if n, ok := p.integer(v, "max_notify_findings"); ok {
				if n < 1 || n > 1000 {
					p.at(v, "max_notify_findings must be between 1 and 1000")
				}
				c.MaxFindings = n
			}
		case "retry_horizon":
			if d, ok := p.duration(v, "retry_horizon"); ok {
				c.Horizon = d
			}
		default:
			p.at(k, "unknown key %q; known keys: max_notify_findings, retry_horizon, routes, sinks", k.Value)
		}
	}
	if routesN != nil {
		p.routes(c, routesN)
	}
	return c
}

// pairs returns the key/value nodes of a mapping, reporting duplicate and non-string keys.
func (p *cfgParser) pairs(m *yaml.Node, where string) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.at(k, "%skeys must be plain names", where)
			continue
		}
		if line, dup := seen[k.Value]; dup {
			p.at(k, "duplicate key %q (first at line %d)", where+k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, [2]*yaml.Node{k, v})
	}
	return out
}

func (p *cfgParser) str(v *yaml.Node, key string) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" || v.Value == "" {
		p.at(v, "%s must be a non-empty string", key)
		return "", false
	}
	return v.Value, true
}

func (p *cfgParser) integer(v *yaml.Node, key string) (int, bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" {
		if n, err := strconv.Atoi(v.Value); err == nil {
			return n, true
		}
	}
	p.at(v, "%s must be a whole number", key)
	return 0, false
}

func (p *cfgParser) duration(v *yaml.Node, key string) (time.Duration, bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
		if d, err := time.ParseDuration(v.Value); err == nil && d > 0 {
			return d, true
		}
	}
	p.at(v, "%s must be a positive duration such as 10s or 24h", key)
	return 0, false
}

func (p *cfgParser) sinks(c *Config, v *yaml.Node) {
	if v.Kind != yaml.SequenceNode {
		p.at(v, "sinks must be a list of {name, type, url}")
		return
	}
	seen := map[string]int{}
	for _, n := range v.Content {
		s, ok := p.sink(n)
		if !ok {
			continue
		}
		if line, dup := seen[s.Name]; dup {
			p.at(n, "sink %q is defined twice (first at line %d)", s.Name, line)
			continue
		}
		seen[s.Name] = n.Line
		c.Sinks = append(c.Sinks, s)
	}
}

var sinkKeys = "bearer_token_file, name, secret_file, timeout, type, url, url_file"

func (p *cfgParser) sink(n *yaml.Node) (Sink, bool) {
	s := Sink{Timeout: DefaultSinkTimeout}
	if n.Kind != yaml.MappingNode {
		p.at(n, "a sink must be a mapping with name, type and url")
		return s, false
	}
	before := len(p.errs)
	var urlN, urlFileN, secretN *yaml.Node
	for _, kv := range p.pairs(n, "sink.") {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "name":
			if name, ok := p.str(v, "name"); ok {
				if !sinkNameRe.MatchString(name) {
					p.at(v, "sink name %q is not valid: letters, digits, '_', '.', '-', starting with a letter or digit", name)
				}
				s.Name = name
			}
		case "type":
			if t, ok := p.str(v, "type"); ok {
				if t != TypeWebhook && t != TypeAlertmanager && t != TypeSlack {
					p.at(v, "sink type %q is not one of webhook, alertmanager, slack", t)
				}
				s.Type = t
			}
		case "url":
			urlN = v
		case "url_file":
			urlFileN = v
		case "secret_file":
			secretN = v
		case "bearer_token_file":
			if b, ok := p.secretFile(v, "bearer_token_file"); ok {
				s.Bearer = string(b)
			}
		case "timeout":
			if d, ok := p.duration(v, "timeout"); ok {
				s.Timeout = d
			}
		default:
			p.at(k, "unknown key %q; known keys: %s", "sink."+k.Value, sinkKeys)
		}
	}
	if s.Name == "" && len(p.errs) == before {
		p.at(n, "sink needs name:")
	}
	if s.Type == "" && len(p.errs) == before {
		p.at(n, "sink %q needs type: (webhook, alertmanager or slack)", s.Name)
	}
	switch {
	case urlN != nil && urlFileN != nil:
		p.at(urlFileN, "sink %q sets both url and url_file; keep one", s.Name)
	case urlN != nil:
		if u, ok := p.str(urlN, "url"); ok {
			s.URL = u
			if p.checkURL(urlN, u) && s.Type == TypeSlack && strings.EqualFold(hostOf(u), "hooks.slack.com") {
				p.at(urlN, "a Slack incoming-webhook URL is a credential; put it in a file and name it with url_file")
			}
		}
	case urlFileN != nil:
		if b, ok := p.secretFile(urlFileN, "url_file"); ok {
			s.URL = strings.TrimSpace(string(b))
			p.checkURL(urlFileN, s.URL)
		}
	default:
		p.at(n, "sink %q needs url: (or url_file:)", s.Name)
	}
	if secretN != nil {
		if s.Type != TypeWebhook && s.Type != "" {
			p.at(secretN, "secret_file signs webhook bodies; sink %q is of type %s", s.Name, s.Type)
		}
		if b, ok := p.secretFile(secretN, "secret_file"); ok {
			s.Secret = b
		}
	}
	return s, len(p.errs) == before
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// checkURL accepts absolute http(s) URLs without credentials. Messages never repeat the URL:
// it may have come from a secret file.
func (p *cfgParser) checkURL(n *yaml.Node, raw string) bool {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		p.at(n, "url is not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		p.at(n, "url must start with http:// or https://")
	case u.Host == "":
		p.at(n, "url has no host")
	case u.User != nil:
		p.at(n, "url carries credentials (user:password@); put a token in bearer_token_file instead")
	default:
		return true
	}
	return false
}

// secretFile reads a secret from the file named by v (trailing newline dropped).
func (p *cfgParser) secretFile(v *yaml.Node, key string) ([]byte, bool) {
	path, ok := p.str(v, key)
	if !ok {
		return nil, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		p.at(v, "%s: cannot read %s: %v", key, path, errors.Unwrap(err))
		return nil, false
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		p.at(v, "%s: %s is empty", key, path)
		return nil, false
	}
	return b, true
}

func (p *cfgParser) routes(c *Config, v *yaml.Node) {
	if v.Kind != yaml.SequenceNode {
		p.at(v, "routes must be a list of {match, sinks}")
		return
	}
	for _, n := range v.Content {
		if n.Kind != yaml.MappingNode {
			p.at(n, "a route must be a mapping with sinks: and an optional match:")
			continue
		}
		var r Route
		hasSinks := false
		for _, kv := range p.pairs(n, "route.") {
			k, val := kv[0], kv[1]
			switch k.Value {
			case "match":
				if val.Kind != yaml.MappingNode {
					p.at(val, "match must be a mapping such as {severity: critical}")
					continue
				}
				r.Match = map[string]string{}
				for _, mkv := range p.pairs(val, "match.") {
					if s, ok := p.str(mkv[1], "match."+mkv[0].Value); ok {
						r.Match[mkv[0].Value] = s
					}
				}
			case "sinks":
				hasSinks = true
				if val.Kind != yaml.SequenceNode {
					p.at(val, "sinks must be a list of sink names")
					continue
				}
				for _, sn := range val.Content {
					name, ok := p.str(sn, "sink name")
					if !ok {
						continue
					}
					if _, ok := c.Sink(name); !ok {
						p.at(sn, "route names sink %q, which is not defined under sinks:", name)
					}
					r.Sinks = append(r.Sinks, name)
				}
			default:
				p.at(k, "unknown key %q; known keys: match, sinks", "route."+k.Value)
			}
		}
		if !hasSinks {
			p.at(n, "route needs sinks:")
		}
		c.Routes = append(c.Routes, r)
	}
}
