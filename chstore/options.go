package chstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Defaults applied by Options.WithDefaults.
const (
	DefaultURL            = "clickhouse://localhost:9000"
	DefaultDatabase       = "hunt_runner"
	DefaultUser           = "default"
	DefaultConnectTimeout = 30 * time.Second
	DefaultDialTimeout    = 5 * time.Second
)

// ErrConfig marks a connection setting that can never work (bad URL, unreadable password file,
// TLS options on a plain-text URL). Open never retries it.
var ErrConfig = errors.New("invalid ClickHouse connection settings")

// Options says how to reach ClickHouse. The zero value connects to DefaultURL as DefaultUser
// with no password. String, GoString and LogValue never show the password.
type Options struct {
	// URL is clickhouse://host:9000[/db] (native protocol) or http(s)://host:8123[/db] (HTTP;
	// https or ?secure=true for TLS, which also works on clickhouse://). Several hosts may be
	// given comma-separated. A user in the URL is accepted; a password in any form
	// (user:pass@, ?password=) is refused: it would show in process lists, manifests and
	// logs. Default DefaultURL.
	URL string
	// Database holds hunt-runner's coordination tables. Default: the URL's path, else
	// DefaultDatabase. The connection's default database (for unqualified names in hunt SQL)
	// is the URL's path as written.
	Database string
	// User overrides the URL's user. Default: the URL's user, else DefaultUser.
	User string
	// Password overrides a password in the URL. The CLI fills it from the environment
	// (HUNT_RUNNER_CLICKHOUSE_PASSWORD), never from a flag. Mutually exclusive with PasswordFile.
	Password string
	// PasswordFile is read once by WithDefaults; one trailing newline is ignored.
	PasswordFile string
	// TLSCAFile is a PEM bundle used instead of the system roots to verify the server.
	TLSCAFile string
	// TLSSkipVerify disables certificate verification; Open logs a warning.
	TLSSkipVerify bool
	// ConnectTimeout bounds how long Open keeps retrying the first connection.
	// Default DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// DialTimeout bounds one TCP connect (and TLS handshake). Default DefaultDialTimeout.
	DialTimeout time.Duration
	// AllowMissingDatabase lets Open succeed while Database does not exist yet (for `schema`).
	// Otherwise Open fails with ErrUnknownDatabase, so a runner started before the schema says
	// so plainly instead of failing on its first query.
	AllowMissingDatabase bool
	// MaxOpenConns caps the connection pool. Default: the driver's (10).
	MaxOpenConns int
	// Consistency is the coordination connection's mode (consistency.go); empty is auto. Open
	// resolves it and puts its settings on every statement of the connection.
	Consistency Consistency
	// SkipConsistency opens a connection that never touches coordination tables (hunt queries):
	// no detection, no settings.
	SkipConsistency bool
	// ConsistencyLogLevel is the level of Open's line saying which mode it chose: the zero
	// value (info) for daemons, debug for interactive commands.
	ConsistencyLogLevel slog.Level
	// LogComment is the log_comment of every statement of the connection that sets none of its
	// own (internal/attrib: the coordination comment naming the runner). Empty: none.
	LogComment string
}

// Endpoint is what a ClickHouse URL says, after defaults for the port.
type Endpoint struct {
	Protocol   clickhouse.Protocol
	Addr       []string // host:port, at least one
	Database   string   // from the path; empty if none
	User       string
	Secure     bool // TLS
	SkipVerify bool // ?skip_verify=true
	// Query holds the remaining parameters, handed to the driver (settings, compress, …).
	Query url.Values
}

// String shows the endpoint without its password.
func (e Endpoint) String() string {
	return fmt.Sprintf("%s %s db=%q user=%q tls=%t", e.Protocol, strings.Join(e.Addr, ","), e.Database, e.User, e.Secure)
}

// GoString keeps %#v from printing the password.
func (e Endpoint) GoString() string { return "chstore.Endpoint{" + e.String() + "}" }

// ErrPasswordInURL is wrapped (with ErrConfig) when a ClickHouse URL carries a password.
var ErrPasswordInURL = errors.New("the ClickHouse URL carries a password; remove it and set HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file instead")

// ParseURL reads a ClickHouse URL. A URL with a password in it is refused (ErrPasswordInURL).
// Errors never contain the URL's password.
func ParseURL(raw string) (Endpoint, error) {
	var e Endpoint
	if passwordInURL(raw) {
		return e, fmt.Errorf("%w: %w", ErrConfig, ErrPasswordInURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error echoes the input; report only the redacted form.
		return e, fmt.Errorf("%w: cannot parse ClickHouse URL %q (URL-encode special characters in the user and password)", ErrConfig, Redact(raw))
	}
	if suspiciousURL(raw, u) {
		return e, fmt.Errorf("%w: ClickHouse URL %q: a '#' or '?' in the user or password must be URL-encoded (%%23, %%3F)", ErrConfig, Redact(raw))
	}
	secure := false
	switch u.Scheme {
	case "clickhouse", "tcp":
		e.Protocol = clickhouse.Native
	case "http":
		e.Protocol = clickhouse.HTTP
	case "https":
		e.Protocol, secure = clickhouse.HTTP, true
	default:
		return e, fmt.Errorf("%w: ClickHouse URL %q: scheme must be clickhouse://, http:// or https://", ErrConfig, Redact(raw))
	}
	if u.Host == "" {
		return e, fmt.Errorf("%w: ClickHouse URL %q has no host", ErrConfig, Redact(raw))
	}
	if u.User != nil {
		e.User = u.User.Username()
	}
	q := u.Query()
	if v, ok := q["username"]; ok {
		e.User = v[0]
		q.Del("username")
	}
	e.Database = strings.Trim(u.Path, "/")
	if v, ok := q["database"]; ok {
		e.Database = v[0]
		q.Del("database")
	}
	if v, ok := q["secure"]; ok {
		b, err := parseBoolParam(v[0])
		if err != nil {
			return e, fmt.Errorf("%w: ClickHouse URL %q: secure: %w", ErrConfig, Redact(raw), err)
		}
		if u.Scheme == "https" && !b {
			return e, fmt.Errorf("%w: ClickHouse URL %q: https with secure=false", ErrConfig, Redact(raw))
		}
		secure = b
		q.Del("secure")
	}
	if v, ok := q["skip_verify"]; ok {
		b, err := parseBoolParam(v[0])
		if err != nil {
			return e, fmt.Errorf("%w: ClickHouse URL %q: skip_verify: %w", ErrConfig, Redact(raw), err)
		}
		e.SkipVerify = b
		q.Del("skip_verify")
	}
	e.Secure = secure
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPort(e.Protocol, secure))
		}
		e.Addr = append(e.Addr, h)
	}
	if len(e.Addr) == 0 {
		return e, fmt.Errorf("%w: ClickHouse URL %q has no host", ErrConfig, Redact(raw))
	}
	e.Query = q
	return e, nil
}

func parseBoolParam(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "", "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: %q", s)
}

func defaultPort(p clickhouse.Protocol, secure bool) string {
	switch {
	case p == clickhouse.Native && secure:
		return "9440"
	case p == clickhouse.Native:
		return "9000"
	case secure:
		return "8443"
	default:
		return "8123"
	}
}

// WithDefaults validates o, fills the documented defaults and reads PasswordFile, so the result
// holds everything needed to connect. Errors wrap ErrConfig and never contain the password.
func (o Options) WithDefaults() (Options, error) {
	if o.URL == "" {
		o.URL = DefaultURL
	}
	ep, err := ParseURL(o.URL)
	if err != nil {
		return o, err
	}
	if o.Database == "" {
		o.Database = ep.Database
	}
	if o.Database == "" {
		o.Database = DefaultDatabase
	}
	if o.User == "" {
		o.User = ep.User
	}
	if o.User == "" {
		o.User = DefaultUser
	}
	switch {
	case o.Password != "" && o.PasswordFile != "":
		return o, fmt.Errorf("%w: both a password (HUNT_RUNNER_CLICKHOUSE_PASSWORD) and a password file are set; use one", ErrConfig)
	case o.PasswordFile != "":
		b, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			// The path is not secret; the file's content never reaches an error.
			return o, fmt.Errorf("%w: read ClickHouse password file: %w", ErrConfig, err)
		}
		o.Password = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		o.PasswordFile = ""
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Consistency, err = ParseConsistency(string(o.Consistency)); err != nil {
		return o, err
	}
	if err := checkEndpoints(o.Consistency, len(ep.Addr)); err != nil && !o.SkipConsistency {
		return o, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if (o.TLSCAFile != "" || o.TLSSkipVerify) && !ep.Secure {
		return o, fmt.Errorf("%w: TLS options are set but %q is not a TLS URL (use https:// or ?secure=true)", ErrConfig, Redact(o.URL))
	}
	return o, nil
}

// ClickHouseOptions builds the driver's options from o (after WithDefaults). The connection's
// default database is the URL's path, dropped when AllowMissingDatabase is set, because the
// server refuses a connection whose default database does not exist.
func (o Options) ClickHouseOptions() (*clickhouse.Options, error) {
	o, err := o.WithDefaults()
	if err != nil {
		return nil, err
	}
	ep, err := ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	// The driver parses the remaining parameters (settings, compress, timeouts); it is given
	// a URL with no credentials, so its errors cannot echo them.
	q := url.Values{}
	for k, v := range ep.Query {
		q[k] = v
	}
	clean := url.URL{Scheme: "clickhouse", Host: strings.Join(ep.Addr, ",")}
	if ep.Protocol == clickhouse.HTTP {
		clean.Scheme = "http"
	}
	if ep.Secure {
		// The driver keeps the DSN's scheme for HTTP requests: it must say https.
		q.Set("secure", "true")
		if ep.Protocol == clickhouse.HTTP {
			clean.Scheme = "https"
		}
	}
	clean.RawQuery = q.Encode()
	ch, err := clickhouse.ParseDSN(clean.String())
	if err != nil {
		return nil, fmt.Errorf("%w: ClickHouse URL %q: %w", ErrConfig, Redact(o.URL), err)
	}
	ch.Auth = clickhouse.Auth{Username: o.User, Password: o.Password, Database: ep.Database}
	if o.AllowMissingDatabase {
		ch.Auth.Database = ""
	}
	if ep.Secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.TLSSkipVerify || ep.SkipVerify}
		if ch.TLS != nil {
			cfg.ServerName = ch.TLS.ServerName
		}
		if o.TLSCAFile != "" {
			pem, err := os.ReadFile(o.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("%w: read CA file: %w", ErrConfig, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrConfig, o.TLSCAFile)
			}
			cfg.RootCAs = pool
		}
		ch.TLS = cfg
	}
	// The driver's own native dialer ignores the context; this one honours it, so Open's
	// per-attempt deadline and a caller's cancellation cut a hanging connect short.
	ch.DialContext = dialer(o.DialTimeout, ch.TLS, ch.Protocol == clickhouse.Native)
	// The driver also uses DialTimeout as the wait for a free pooled connection, so it stays
	// at the driver's default unless the per-connect timeout is longer.
	ch.DialTimeout = max(o.DialTimeout, poolWait)
	if o.LogComment != "" {
		if ch.Settings == nil {
			ch.Settings = clickhouse.Settings{}
		}
		ch.Settings["log_comment"] = o.LogComment
	}
	if o.MaxOpenConns > 0 {
		ch.MaxOpenConns = o.MaxOpenConns
		if ch.MaxIdleConns == 0 || ch.MaxIdleConns > o.MaxOpenConns {
			ch.MaxIdleConns = o.MaxOpenConns
		}
	}
	return ch, nil
}

// poolWait is how long a query may wait for a free pooled connection (the driver's default).
const poolWait = 30 * time.Second

// dialer connects one TCP connection within timeout and the context, adding TLS for the native
// protocol (HTTP's transport adds it itself from the TLS config).
func dialer(timeout time.Duration, cfg *tls.Config, native bool) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil || !native || cfg == nil {
			return conn, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(hctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	}
}

// String shows the options with the password redacted.
func (o Options) String() string {
	pw := ""
	if o.Password != "" {
		pw = redacted
	}
	return fmt.Sprintf("chstore.Options{URL:%q Database:%q User:%q Password:%q PasswordFile:%q TLSCAFile:%q TLSSkipVerify:%t ConnectTimeout:%s}",
		Redact(o.URL), o.Database, o.User, pw, o.PasswordFile, o.TLSCAFile, o.TLSSkipVerify, o.ConnectTimeout)
}

// GoString keeps %#v from printing the password.
func (o Options) GoString() string { return o.String() }

// LogValue keeps slog from printing the password.
func (o Options) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", Redact(o.URL)),
		slog.String("database", o.Database),
		slog.String("user", o.User),
	)
}

const redacted = "xxxxx"

// Redact returns the URL with any password (userinfo or ?password=) replaced by xxxxx. It works on
// URLs that do not parse too, masking too much rather than too little.
func Redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && !suspiciousURL(raw, u) && !(u.User == nil && strings.Contains(authority(raw), "@")) {
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), redacted)
			}
		}
		if u.RawQuery != "" {
			u.RawQuery = redactQuery(u.RawQuery)
		}
		// url.URL.String escapes the mask's nothing and keeps the rest as given.
		return u.String()
	}
	return redactRaw(raw)
}

// suspiciousURL reports a URL that parsed, but not as its author meant: an unescaped '#' or '?'
// in the password ends the host early, so the rest of the password lands in the fragment or
// the query where nothing would redact it.
func suspiciousURL(raw string, u *url.URL) bool {
	if u.Fragment != "" || strings.HasSuffix(raw, "#") {
		return true
	}
	if u.User == nil {
		if i := strings.Index(u.RawQuery, "@"); i >= 0 && !strings.Contains(u.RawQuery[:i], "=") {
			return true
		}
	}
	return false
}

func redactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(k); err == nil && strings.EqualFold(key, "password") && ok {
			parts[i] = k + "=" + redacted
		}
	}
	return strings.Join(parts, "&")
}

// redactRaw masks an unparseable URL: everything between the scheme's "user:" and the last "@"
// before the path, and the whole query if it mentions a password.
func redactRaw(raw string) string {
	s := raw
	if q := strings.Index(s, "?"); q >= 0 && strings.Contains(strings.ToLower(s[q:]), "password") {
		s = s[:q+1] + redacted
	}
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	if at := strings.LastIndex(s[start:], "@"); at >= 0 {
		at += start
		if c := strings.Index(s[start:at], ":"); c >= 0 {
			s = s[:start+c+1] + redacted + s[at:]
		}
	}
	return s
}

// scrub removes every form of the secrets that might be echoed back (raw, query-escaped,
// path-escaped, userinfo-escaped) from s.
func scrub(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec == "" {
			continue
		}
		forms := []string{sec, url.QueryEscape(sec), url.PathEscape(sec)}
		if ui := url.UserPassword("u", sec).String(); strings.HasPrefix(ui, "u:") {
			forms = append(forms, strings.TrimPrefix(ui, "u:"))
		}
		for _, f := range forms {
			if f != "" {
				s = strings.ReplaceAll(s, f, redacted)
			}
		}
	}
	return s
}

// passwordInURL reports a URL that carries a password in any form: userinfo with a colon, a
// password query parameter in any letter case, or an '@' that the URL parser did not read as
// the end of a userinfo: in clickhouse://alice:2024/Summer@host the "password" 2024/Summer
// makes alice the host and 2024 its port, and nothing would have masked it.
func passwordInURL(raw string) bool {
	beforeQuery := authority(raw)
	_, query, _ := strings.Cut(raw, "?")
	if strings.Contains(beforeQuery, "@") {
		user, _, _ := strings.Cut(beforeQuery, "@")
		if strings.Contains(user, ":") || strings.Contains(user, "/") || strings.Contains(user, "#") {
			return true
		}
	}
	if query != "" {
		if strings.Contains(query, "@") && !strings.Contains(beforeQuery, "@") {
			// user:12?secret@host: the '?' in the password started the query early.
			if i := strings.Index(query, "@"); !strings.Contains(query[:i], "=") {
				return true
			}
		}
		query, _, _ = strings.Cut(query, "#")
		for _, kv := range strings.Split(query, "&") {
			k, _, _ := strings.Cut(kv, "=")
			if key, err := url.QueryUnescape(k); err != nil || strings.EqualFold(strings.TrimSpace(key), "password") {
				return true
			}
		}
	}
	return false
}

// authority is the URL after its scheme and before its query: where a userinfo can be.
func authority(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		raw = raw[i+3:]
	}
	before, _, _ := strings.Cut(raw, "?")
	return before
}
