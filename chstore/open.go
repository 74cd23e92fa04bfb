package chstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// What a failed connection attempt was, for errors.Is. Open retries ErrDNS, ErrRefused and
// ErrTimeout (a server or its DNS record may still be coming up); it never retries ErrAuth,
// ErrUnknownDatabase, ErrTLS or ErrConfig, which waiting cannot fix.
var (
	ErrDNS             = errors.New("ClickHouse host name does not resolve")
	ErrRefused         = errors.New("ClickHouse refused the connection")
	ErrAuth            = errors.New("ClickHouse authentication failed")
	ErrUnknownDatabase = errors.New("ClickHouse database does not exist")
	ErrTLS             = errors.New("ClickHouse TLS handshake failed")
	ErrTimeout         = errors.New("ClickHouse did not answer in time")
)

// ClickHouse exception codes Open classifies.
const (
	codeUnknownDatabase      = 81
	codeUnknownUser          = 192
	codeWrongPassword        = 193
	codeRequiredPassword     = 194
	codeAuthenticationFailed = 516
)

// ConnectError is what Open returns when it gives up. Its text has the URL redacted and the
// password scrubbed from anything the driver or server echoed; the driver's own error is
// deliberately not kept in the chain, because printing it could reveal the password.
type ConnectError struct {
	Kind     error  // ErrDNS, ErrRefused, ErrAuth, ErrUnknownDatabase, ErrTLS, or nil if unclassified
	URL      string // redacted
	Code     int32  // ClickHouse exception code, 0 when the server sent none
	Attempts int
	cause    string // scrubbed text of the last driver error
}

func (e *ConnectError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "connect to ClickHouse at %s", e.URL)
	if e.Kind != nil {
		fmt.Fprintf(&b, ": %v", e.Kind)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (gave up after %d attempts)", e.Attempts)
	}
	if e.cause != "" {
		fmt.Fprintf(&b, ": %s", e.cause)
	}
	if h := hint(e.Kind); h != "" {
		fmt.Fprintf(&b, " — %s", h)
	}
	return b.String()
}

func (e *ConnectError) Unwrap() error { return e.Kind }

func hint(kind error) string {
	switch kind {
	case ErrDNS:
		return "check the host in --clickhouse-url"
	case ErrRefused:
		return "is ClickHouse running and listening on that port (9000 native, 8123 HTTP)?"
	case ErrAuth:
		return "check --clickhouse-user and HUNT_RUNNER_CLICKHOUSE_PASSWORD or --clickhouse-password-file"
	case ErrUnknownDatabase:
		return "create it with `hunt-runner schema`, or fix --database / the URL path"
	case ErrTLS:
		return "check --clickhouse-ca-file, the server certificate, and that the port speaks TLS"
	case ErrTimeout:
		return "is a firewall dropping packets, or does the port speak another protocol (9000 native, 8123 HTTP)?"
	}
	return ""
}

// retryable reports whether waiting may help.
func retryable(kind error) bool {
	return kind == nil || kind == ErrDNS || kind == ErrRefused || kind == ErrTimeout
}

// classify turns a driver error into a ConnectError with the secrets scrubbed.
func classify(err error, url string, secrets ...string) *ConnectError {
	ce := &ConnectError{URL: url, cause: scrub(err.Error(), secrets...)}
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		ce.Code = ex.Code
		switch ex.Code {
		case codeAuthenticationFailed, codeUnknownUser, codeWrongPassword, codeRequiredPassword:
			ce.Kind = ErrAuth
		case codeUnknownDatabase:
			ce.Kind = ErrUnknownDatabase
		}
		return ce
	}
	var dnsErr *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &dnsErr) || strings.Contains(msg, "no such host"):
		ce.Kind = ErrDNS
	case errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(msg, "connection refused"):
		ce.Kind = ErrRefused
	case errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidCert),
		errors.As(err, &verifyErr), errors.As(err, &recordErr),
		strings.Contains(msg, "x509:"), strings.Contains(msg, "tls:"), strings.Contains(msg, "HTTP response to HTTPS client"):
		ce.Kind = ErrTLS
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, clickhouse.ErrAcquireConnTimeout),
		strings.Contains(msg, "i/o timeout"), strings.Contains(msg, "acquire conn timeout"):
		ce.Kind = ErrTimeout
	}
	return ce
}

// Open connects to ClickHouse, retrying DNS failures, refused connections and timeouts with
// exponential backoff (250ms doubling to 5s) until o.ConnectTimeout has passed. It logs the
// redacted URL only. Unless o.AllowMissingDatabase is set, it also checks that o.Database
// exists. It resolves o.Consistency on the server (ResolveConsistency) and gives the connection
// that mode's settings, refusing a configuration that cannot be correct (ErrConsistency). The
// returned error is a *ConnectError (or wraps ErrConfig or ErrConsistency, or is ctx's error).
func Open(ctx context.Context, o Options, log *slog.Logger) (driver.Conn, error) {
	return openConn(ctx, o, log, nil)
}

// OpenConsistent is Open, also returning how the consistency mode was chosen.
func OpenConsistent(ctx context.Context, o Options, log *slog.Logger) (driver.Conn, ConsistencyReport, error) {
	var rep ConsistencyReport
	conn, err := openConn(ctx, o, log, &rep)
	return conn, rep, err
}

func openConn(ctx context.Context, o Options, log *slog.Logger, report *ConsistencyReport) (driver.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o, err := o.WithDefaults()
	if err != nil {
		return nil, err
	}
	chOpts, err := o.ClickHouseOptions()
	if err != nil {
		return nil, err
	}
	secrets := []string{o.Password}
	safeURL := Redact(o.URL)
	log = log.With("clickhouse_url", safeURL, "protocol", chOpts.Protocol.String())
	if chOpts.TLS != nil && chOpts.TLS.InsecureSkipVerify {
		log.Warn("TLS certificate verification is disabled for ClickHouse; anyone on the path can impersonate the server")
	}

	start := time.Now()
	deadline := start.Add(o.ConnectTimeout)
	// Attempts run on a throwaway client whose timeouts fit the attempt: the driver bounds the
	// native handshake by DialTimeout alone, ignoring the context, and the long-lived client
	// keeps the driver's generous DialTimeout because it doubles as the pool wait.
	attemptTimeout := min(o.DialTimeout, o.ConnectTimeout)
	probeOpts := *chOpts
	probeOpts.DialTimeout = attemptTimeout
	probeOpts.DialContext = dialer(attemptTimeout, chOpts.TLS, chOpts.Protocol == clickhouse.Native)
	probe, err := clickhouse.Open(&probeOpts)
	if err != nil {
		return nil, classify(err, safeURL, secrets...)
	}
	defer probe.Close()
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, max(min(2*attemptTimeout, time.Until(deadline)), 10*time.Millisecond))
		err = probe.Ping(actx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to ClickHouse at %s: %w", safeURL, ctx.Err())
		}
		ce := classify(err, safeURL, secrets...)
		ce.Attempts = attempt
		if !retryable(ce.Kind) || time.Until(deadline) < backoff {
			return nil, ce
		}
		log.Warn("ClickHouse not reachable yet; retrying", "attempt", attempt, "retry_in", backoff.String(), "err", ce.cause)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to ClickHouse at %s: %w", safeURL, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	if !o.SkipConsistency {
		// The probe answers; the settings must be known before the connection that carries them
		// is opened.
		rctx, cancel := context.WithTimeout(ctx, max(time.Until(deadline), 2*attemptTimeout))
		rep, err := ResolveConsistency(rctx, probe, o.Database, o.Consistency, len(chOpts.Addr))
		cancel()
		if err != nil {
			// Every error of ResolveConsistency starts with ErrConsistency's text; the rest may
			// echo the server, so it is scrubbed like a connection error.
			return nil, fmt.Errorf("%w%s", ErrConsistency, strings.TrimPrefix(scrub(err.Error(), secrets...), ErrConsistency.Error()))
		}
		if chOpts.Settings == nil {
			chOpts.Settings = clickhouse.Settings{}
		}
		for k, v := range rep.Mode.Settings() {
			chOpts.Settings[k] = v
		}
		log.Log(ctx, o.ConsistencyLogLevel, "ClickHouse consistency", rep.LogAttrs()...)
		for _, w := range rep.Warnings {
			log.Warn(w, "consistency", string(rep.Mode))
		}
		if report != nil {
			*report = rep
		}
	}
	conn, err := clickhouse.Open(chOpts)
	if err != nil {
		return nil, classify(err, safeURL, secrets...)
	}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close()
		return nil, classify(err, safeURL, secrets...)
	}
	if !o.AllowMissingDatabase {
		if err := checkDatabase(ctx, conn, o.Database); err != nil {
			_ = conn.Close()
			ce := classify(err, safeURL, secrets...)
			if errors.Is(err, ErrUnknownDatabase) {
				ce.Kind, ce.cause = ErrUnknownDatabase, fmt.Sprintf("database %q not found", o.Database)
			}
			return nil, ce
		}
	}
	version := ""
	if v, err := conn.ServerVersion(); err == nil {
		version = v.Version.String()
	}
	// Debug: every command connects, and a line per command is chatter; failures say enough.
	log.Debug("connected to ClickHouse", "database", o.Database, "server_version", version,
		"took", time.Since(start).Round(time.Millisecond).String())
	return conn, nil
}

func checkDatabase(ctx context.Context, conn driver.Conn, database string) error {
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", database).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return ErrUnknownDatabase
	}
	return nil
}
