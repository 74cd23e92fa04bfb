package notify

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/alertmanager/timeinterval"
	"go.yaml.in/yaml/v3"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/yamlpos"
)

// Sink types.
const (
	TypeWebhook      = "webhook"
	TypeAlertmanager = "alertmanager"
	TypeSlack        = "slack"
)

// Defaults and ceilings of the notify config.
const (
	// NotifyFindingsDefault is max_notify_findings when unset: the findings one notification
	// carries (not a hunt's max_findings, the findings one run stores: hunt.MaxFindingsDefault).
	NotifyFindingsDefault = 20
	HorizonDefault        = 24 * time.Hour
	SinkTimeoutDefault    = 10 * time.Second
	// ResolveAfterDefault is how long after an attempt an Alertmanager alert stays firing
	// (endsAt): longer than any sane group_wait + group_interval, so the alert is notified
	// before it resolves, and short enough that a page does not stay open for a day.
	ResolveAfterDefault = time.Hour
	// MaxLookback bounds a sink's lookback: delivery rows live 30 days (hunt_delivery's TTL).
	MaxLookback = 7 * 24 * time.Hour
)

// CommonLabel and CommonLabelValue are set on every Alertmanager alert hunt-runner posts, so
// one route (source="hunt-runner") catches them all; a hunt label cannot override them.
const (
	CommonLabel      = "source"
	CommonLabelValue = "hunt-runner"
)

// Config is a parsed --notify-config file. Secrets are read from their files at parse time.
type Config struct {
	File        string
	Sinks       []Sink
	Routes      []Route
	MaxFindings int           // max_notify_findings: findings carried per notification
	Horizon     time.Duration // retry_horizon: failures are retried this long, then dead-lettered
	// ExternalURL is external_url: where people reach the status page; an alert's
	// generatorURL is ExternalURL/hunts/<id>. Empty leaves generatorURL out.
	ExternalURL string
	// TimeIntervals are time_intervals: named Alertmanager time intervals that sinks and
	// routes list in mute_time_intervals (notify/mute.go).
	TimeIntervals map[string][]timeinterval.TimeInterval
}

// Sink is one destination.
type Sink struct {
	Name string
	Type string
	// URLs are where each notification is posted: one for webhook and slack; an
	// alertmanager sink may list every replica (urls:), as Prometheus does. Never logged: a
	// Slack incoming-webhook URL is itself a credential.
	URLs    []string
	Secret  []byte // webhook HMAC-SHA256 key (secret_file)
	Bearer  string // Authorization: Bearer (bearer_token_file)
	User    string // basic_auth.username
	Pass    string // basic_auth.password_file
	TLS     *tls.Config
	Timeout time.Duration
	// Lookback is how far before the sink was first enabled its committed fires are still
	// delivered; 0 (the default) sends only fires committed after that.
	Lookback time.Duration
	// ResolveAfter sets an Alertmanager alert's endsAt: the attempt's time plus this.
	ResolveAfter time.Duration
	// MuteTimeIntervals names the time intervals during which the sink is sent nothing.
	MuteTimeIntervals []string
}

// secrets are the sink's credentials, which no error text may carry (redact).
func (s Sink) secrets() []string {
	out := []string{s.Bearer, s.Pass, string(s.Secret)}
	if s.Pass != "" {
		out = append(out, base64.StdEncoding.EncodeToString([]byte(s.User+":"+s.Pass)))
	}
	if s.Type == TypeSlack {
		out = append(out, s.URLs...)
		for _, u := range s.URLs {
			if pu, err := url.Parse(u); err == nil && len(pu.Path) > 1 {
				out = append(out, pu.Path)
			}
		}
	}
	return out
}

// Route sends hunts whose fields all equal Match (keys hunt_id, severity) and whose labels
// include Labels to Sinks. No other match key is accepted, so a typo cannot make a route that
// silently never matches.
type Route struct {
	Match  map[string]string
	Labels map[string]string
	Sinks  []string
	// MuteTimeIntervals names the time intervals during which this route's hunts are not
	// notified to its sinks.
	MuteTimeIntervals []string
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
func (c *Config) SinksFor(h *hunt.Hunt) []string {
	if c == nil {
		return nil
	}
	names := h.Notify
	if names == nil {
		if r := c.routeFor(h); r != nil {
			names = r.Sinks
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

func (r Route) matches(h *hunt.Hunt) bool {
	for k, v := range r.Match {
		got := h.ID
		if k == "severity" {
			got = h.Severity
		}
		if got != v {
			return false
		}
	}
	for k, v := range r.Labels {
		if got, ok := h.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// UnknownSinks lists the names in a hunt's notify: list that the config does not define.
func (c *Config) UnknownSinks(h *hunt.Hunt) []string {
	var out []string
	for _, n := range h.Notify {
		if _, ok := c.Sink(n); !ok {
			out = append(out, n)
		}
	}
	return out
}

// ConfigError is one problem of a notify config, positioned for an editor (file:line:col).
type ConfigError = yamlpos.Problem

// ConfigErrors is every problem found; Error joins them one per line.
type ConfigErrors = yamlpos.Problems

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
	// invalid names the sinks that are defined but have an error of their own (an
	// unreadable secret file, say): a route naming one is not also told it is undefined.
	invalid map[string]bool
	// muteRefs are the mute_time_intervals names seen, checked once time_intervals is read.
	muteRefs []muteRef
}

func (p *cfgParser) at(n *yaml.Node, format string, args ...any) {
	p.errs.At(p.file, n, format, args...)
}

func (p *cfgParser) parse(data []byte) *Config {
	c := &Config{File: p.file, MaxFindings: NotifyFindingsDefault, Horizon: HorizonDefault}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.at(nil, "notify config is empty; it needs sinks:")
			return c
		}
		line, msg := yamlpos.SyntaxError(err)
		p.errs.Addf(p.file, line, 1, "%s", msg)
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
	var routesN, intervalsN *yaml.Node
	for _, kv := range p.pairs(root, "") {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "sinks":
			p.sinks(c, v)
		case "routes":
			routesN = v
		case "time_intervals":
			intervalsN = v
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
		case "external_url":
			if u, ok := p.str(v, "external_url"); ok && p.checkURL(v, u) {
				c.ExternalURL = strings.TrimRight(u, "/")
			}
		default:
			p.unknownKey(k, "", []string{"external_url", "max_notify_findings", "retry_horizon", "routes", "sinks", "time_intervals"})
		}
	}
	if routesN != nil {
		p.routes(c, routesN)
	}
	if intervalsN != nil {
		p.timeIntervals(c, intervalsN)
	}
	p.checkMuteRefs(c)
	return c
}

// pairs returns the key/value nodes of a mapping in order, aliases followed, reporting
// duplicate and non-string keys (yamlpos.Pairs).
func (p *cfgParser) pairs(m *yaml.Node, where string) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	for _, kv := range yamlpos.Pairs(m, where, nil, p.at) {
		out = append(out, [2]*yaml.Node{kv.Key, kv.Value})
	}
	return out
}

// unknownKey refuses key k of the mapping at prefix, with a did-you-mean (yamlpos.UnknownNamedKey).
func (p *cfgParser) unknownKey(k *yaml.Node, prefix string, known []string) {
	yamlpos.UnknownNamedKey(k, prefix, known, p.at)
}

func (p *cfgParser) str(v *yaml.Node, key string) (string, bool) {
	if s, ok := yamlpos.StrValue(v); ok && s != "" {
		return s, true
	}
	p.at(v, "%s must be a non-empty string", key)
	return "", false
}

func (p *cfgParser) integer(v *yaml.Node, key string) (int, bool) {
	if n, ok := yamlpos.IntValue(v); ok {
		return n, true
	}
	p.at(v, "%s must be a whole number", key)
	return 0, false
}

// duration reads a positive duration in Go's grammar (10s, 24h; no days): a notify config's
// durations are a process's timeouts and horizons, not a hunt's schedule.
func (p *cfgParser) duration(v *yaml.Node, key string) (time.Duration, bool) {
	if s, ok := yamlpos.StrValue(v); ok {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
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
			if s.Name != "" {
				if p.invalid == nil {
					p.invalid = map[string]bool{}
				}
				p.invalid[s.Name] = true
			}
			continue
		}
		if line, dup := seen[s.Name]; dup {
			p.at(n, "sink %s is defined twice (first at line %d)", printable(s.Name), line)
			continue
		}
		seen[s.Name] = n.Line
		c.Sinks = append(c.Sinks, s)
	}
}

var sinkKeys = []string{"basic_auth", "bearer_token_file", "lookback", "mute_time_intervals", "name", "resolve_after", "secret_file", "timeout", "tls_config", "type", "url", "url_file", "urls"}

func (p *cfgParser) sink(n *yaml.Node) (Sink, bool) {
	s := Sink{Timeout: SinkTimeoutDefault, ResolveAfter: ResolveAfterDefault}
	if n.Kind != yaml.MappingNode {
		p.at(n, "a sink must be a mapping with name, type and url")
		return s, false
	}
	before := len(p.errs)
	var urlN, urlsN, urlFileN, secretN, bearerN, basicN, resolveN *yaml.Node
	for _, kv := range p.pairs(n, "sink.") {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "name":
			if name, ok := p.str(v, "name"); ok {
				if !hunt.SinkNameRe.MatchString(name) {
					p.at(v, "sink name %s is not valid: letters, digits, '_', '.', '-', starting with a letter or digit, at most 64", printable(name))
				}
				s.Name = name
			}
		case "type":
			if t, ok := p.str(v, "type"); ok {
				if t != TypeWebhook && t != TypeAlertmanager && t != TypeSlack {
					p.at(v, "sink type %s is not one of webhook, alertmanager, slack", printable(t))
				}
				s.Type = t
			}
		case "url":
			urlN = v
		case "urls":
			urlsN = v
		case "url_file":
			urlFileN = v
		case "secret_file":
			secretN = v
		case "bearer_token_file":
			bearerN = v
			if b, ok := p.secretFile(v, "bearer_token_file"); ok {
				s.Bearer = string(b)
			}
		case "basic_auth":
			basicN = v
			s.User, s.Pass = p.basicAuth(v)
		case "tls_config":
			s.TLS = p.tlsConfig(v)
		case "timeout":
			if d, ok := p.duration(v, "timeout"); ok {
				s.Timeout = d
			}
		case "lookback":
			if d, ok := p.durationOrZero(v, "lookback"); ok {
				if d > MaxLookback {
					p.at(v, "lookback is at most %s (delivery rows are kept 30 days)", MaxLookback)
				}
				s.Lookback = d
			}
		case "mute_time_intervals":
			s.MuteTimeIntervals = p.muteNames(v)
		case "resolve_after":
			resolveN = v
			if d, ok := p.duration(v, "resolve_after"); ok {
				s.ResolveAfter = d
			}
		default:
			p.unknownKey(k, "sink.", sinkKeys)
		}
	}
	if s.Name == "" && len(p.errs) == before {
		p.at(n, "sink needs name:")
	}
	if s.Type == "" && len(p.errs) == before {
		p.at(n, "sink %s needs type: (webhook, alertmanager or slack)", printable(s.Name))
	}
	set := 0
	for _, u := range []*yaml.Node{urlN, urlsN, urlFileN} {
		if u != nil {
			set++
		}
	}
	switch {
	case set > 1:
		p.at(n, "sink %s sets more than one of url, urls and url_file; keep one", printable(s.Name))
	case urlN != nil:
		if u, ok := p.str(urlN, "url"); ok {
			s.URLs = []string{u}
			if p.checkURL(urlN, u) && s.Type == TypeSlack && strings.EqualFold(hostOf(u), "hooks.slack.com") {
				p.at(urlN, "a Slack incoming-webhook URL is a credential; put it in a file and name it with url_file")
			}
		}
	case urlsN != nil:
		if s.Type != TypeAlertmanager && s.Type != "" {
			p.at(urlsN, "urls lists Alertmanager replicas; a %s sink takes one url", s.Type)
		}
		if urlsN.Kind != yaml.SequenceNode || len(urlsN.Content) == 0 {
			p.at(urlsN, "urls must be a non-empty list of Alertmanager URLs")
			break
		}
		for _, un := range urlsN.Content {
			if u, ok := p.str(un, "urls item"); ok && p.checkURL(un, u) {
				if slices.Contains(s.URLs, u) {
					p.at(un, "urls lists the same Alertmanager twice")
				}
				s.URLs = append(s.URLs, u)
			}
		}
	case urlFileN != nil:
		if b, ok := p.secretFile(urlFileN, "url_file"); ok {
			u := strings.TrimSpace(string(b))
			s.URLs = []string{u}
			p.checkURL(urlFileN, u)
		}
	default:
		p.at(n, "sink %s needs url: (or url_file:, or urls: for alertmanager)", printable(s.Name))
	}
	if secretN != nil {
		if s.Type != TypeWebhook && s.Type != "" {
			p.at(secretN, "secret_file signs webhook bodies; sink %s is of type %s", printable(s.Name), s.Type)
		}
		if b, ok := p.secretFile(secretN, "secret_file"); ok {
			s.Secret = b
		}
	}
	if bearerN != nil && basicN != nil {
		p.at(basicN, "sink %s sets both bearer_token_file and basic_auth; keep one", printable(s.Name))
	}
	if resolveN != nil && s.Type != TypeAlertmanager && s.Type != "" {
		p.at(resolveN, "resolve_after sets an Alertmanager alert's endsAt; sink %s is of type %s", printable(s.Name), s.Type)
	}
	return s, len(p.errs) == before
}

// durationOrZero is duration that also accepts 0.
func (p *cfgParser) durationOrZero(v *yaml.Node, key string) (time.Duration, bool) {
	if v.Kind == yaml.ScalarNode && (v.Value == "0" || v.Value == "0s") {
		return 0, true
	}
	return p.duration(v, key)
}

// basicAuth reads basic_auth: {username, password_file}; the password only from a file.
func (p *cfgParser) basicAuth(v *yaml.Node) (user, pass string) {
	if v.Kind != yaml.MappingNode {
		p.at(v, "basic_auth must be a mapping {username: ..., password_file: ...}")
		return "", ""
	}
	var userN, passN *yaml.Node
	for _, kv := range p.pairs(v, "basic_auth.") {
		switch kv[0].Value {
		case "username":
			userN = kv[1]
			user, _ = p.str(kv[1], "basic_auth.username")
		case "password_file":
			passN = kv[1]
			if b, ok := p.secretFile(kv[1], "basic_auth.password_file"); ok {
				pass = string(b)
			}
		default:
			p.at(kv[0], "unknown key %s; known keys: password_file, username (the password is read from a file only)",
				printable("basic_auth."+kv[0].Value))
		}
	}
	if userN == nil {
		p.at(v, "basic_auth needs username:")
	}
	if passN == nil {
		p.at(v, "basic_auth needs password_file:")
	}
	if strings.Contains(user, ":") {
		p.at(userN, "basic_auth.username cannot contain ':'")
	}
	return user, pass
}

// tlsConfig reads tls_config: {ca_file, cert_file, key_file, server_name}: the CA that signs
// the sink's certificate (added to the system's), and a client certificate.
func (p *cfgParser) tlsConfig(v *yaml.Node) *tls.Config {
	if v.Kind != yaml.MappingNode {
		p.at(v, "tls_config must be a mapping {ca_file, cert_file, key_file, server_name}")
		return nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	var certN, keyN *yaml.Node
	for _, kv := range p.pairs(v, "tls_config.") {
		k, val := kv[0], kv[1]
		switch k.Value {
		case "ca_file":
			path, ok := p.str(val, "tls_config.ca_file")
			if !ok {
				continue
			}
			pem, err := os.ReadFile(path)
			if err != nil {
				p.at(val, "tls_config.ca_file: cannot read %s: %v", path, errors.Unwrap(err))
				continue
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				p.at(val, "tls_config.ca_file: %s holds no PEM certificate", path)
			}
			c.RootCAs = pool
		case "cert_file":
			certN = val
		case "key_file":
			keyN = val
		case "server_name":
			c.ServerName, _ = p.str(val, "tls_config.server_name")
		default:
			p.unknownKey(k, "tls_config.", []string{"ca_file", "cert_file", "key_file", "server_name"})
		}
	}
	switch {
	case (certN == nil) != (keyN == nil):
		p.at(v, "tls_config needs both cert_file and key_file for a client certificate")
	case certN != nil:
		cp, ok1 := p.str(certN, "tls_config.cert_file")
		kp, ok2 := p.str(keyN, "tls_config.key_file")
		if ok1 && ok2 {
			cert, err := tls.LoadX509KeyPair(cp, kp)
			if err != nil {
				// The error text of a key that does not parse can quote the file: say which
				// files, not what is in them.
				p.at(certN, "tls_config: cannot load the client certificate %s with key %s (unreadable, not PEM, or not a pair)", cp, kp)
			} else {
				c.Certificates = []tls.Certificate{cert}
			}
		}
	}
	return c
}

// printable cuts a config value for a message: at most 64 bytes, control characters shown
// escaped, so a hostile file cannot forge lines or flood the output.
func printable(s string) string { return yamlpos.Printable(s) }

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
				r.Match, r.Labels = p.match(val)
			case "mute_time_intervals":
				r.MuteTimeIntervals = p.muteNames(val)
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
					if _, ok := c.Sink(name); !ok && !p.invalid[name] {
						p.at(sn, "route names sink %s, which is not defined under sinks:", printable(name))
					}
					r.Sinks = append(r.Sinks, name)
				}
			default:
				p.unknownKey(k, "route.", []string{"match", "mute_time_intervals", "sinks"})
			}
		}
		if !hasSinks {
			p.at(n, "route needs sinks:")
		}
		c.Routes = append(c.Routes, r)
	}
}

// match reads a route's match: {hunt_id, severity, labels: {name: value}}. Any other key is
// refused: a misspelt key would make a route that never matches, silently.
func (p *cfgParser) match(v *yaml.Node) (map[string]string, map[string]string) {
	if v.Kind != yaml.MappingNode {
		p.at(v, "match must be a mapping such as {severity: critical} or {labels: {team: network}}")
		return nil, nil
	}
	m := map[string]string{}
	var labels map[string]string
	for _, kv := range p.pairs(v, "match.") {
		k, val := kv[0], kv[1]
		switch k.Value {
		case "hunt_id", "severity":
			if s, ok := p.str(val, "match."+k.Value); ok {
				m[k.Value] = s
			}
		case "labels":
			if val.Kind != yaml.MappingNode {
				p.at(val, "match.labels must be a mapping of hunt label names to values, such as {team: network}")
				continue
			}
			labels = map[string]string{}
			for _, lkv := range p.pairs(val, "match.labels.") {
				if s, ok := p.str(lkv[1], "match.labels."+lkv[0].Value); ok {
					labels[lkv[0].Value] = s
				}
			}
		default:
			q := printable(k.Value)
			p.at(k, "unknown match key %s; a route matches on hunt_id, severity, or a hunt label under labels: {%s: ...}",
				q, q[1:len(q)-1])
		}
	}
	return m, labels
}
