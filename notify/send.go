package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// outcome of one attempt.
type outcome int

const (
	sent      outcome = iota // 2xx
	retryable                // 5xx, 429, timeout, connection error
	permanent                // other 4xx, 3xx: retrying the same request cannot help
)

// attemptResult is what one POST came to. err never contains the sink's URL.
type attemptResult struct {
	outcome    outcome
	err        error
	retryAfter time.Duration // from a 429/503 Retry-After in seconds, else 0
}

// newHTTPClient does not follow redirects: a signed body sent on to another host is a leak,
// and a webhook that moved should be reconfigured, so a 3xx is a permanent failure. A sink's
// tls_config gets a transport of its own.
func newHTTPClient(tlsConfig *tls.Config) *http.Client {
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if tlsConfig != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tlsConfig
		c.Transport = t
	}
	return c
}

// post sends body to every URL of s once (for an alertmanager sink, every replica, as
// Prometheus does: replicas do not share alerts). The attempt counts as sent when one URL
// took it, since an Alertmanager cluster then notifies; when none did, it is retryable if any
// failure was.
func post(ctx context.Context, client *http.Client, s Sink, key string, body []byte) attemptResult {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	res := attemptResult{outcome: permanent}
	var errs []string
	took := false
	for i, target := range s.URLs {
		r := postOne(ctx, client, s, target, key, body)
		if r.outcome == sent {
			took = true
			continue
		}
		if len(s.URLs) > 1 {
			// Replicas are named by position: a URL may be a credential.
			errs = append(errs, fmt.Sprintf("url %d: %v", i+1, r.err))
		} else {
			errs = append(errs, r.err.Error())
		}
		if r.outcome == retryable {
			res.outcome = retryable
		}
		res.retryAfter = max(res.retryAfter, r.retryAfter)
	}
	if took {
		return attemptResult{outcome: sent}
	}
	prefix := ""
	if len(s.URLs) > 1 {
		prefix = fmt.Sprintf("sink %s: no Alertmanager took the alert: ", s.Name)
	}
	res.err = errors.New(redact(prefix+strings.Join(errs, "; "), s.secrets()))
	return res
}

// postOne sends body to target once.
func postOne(ctx context.Context, client *http.Client, s Sink, target, key string, body []byte) attemptResult {
	if s.Type == TypeAlertmanager {
		target = strings.TrimRight(target, "/") + "/api/v2/alerts"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return attemptResult{outcome: permanent, err: errors.New("cannot build the request from the sink's url")}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hunt-runner")
	req.Header.Set("Idempotency-Key", key)
	if len(s.Secret) > 0 {
		req.Header.Set(SignatureHeader, Sign(s.Secret, body))
	}
	switch {
	case s.Bearer != "":
		req.Header.Set("Authorization", "Bearer "+s.Bearer)
	case s.User != "":
		req.SetBasicAuth(s.User, s.Pass)
	}
	resp, err := client.Do(req)
	if err != nil {
		// *url.Error repeats the URL, which may be a credential (Slack): keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", s.Timeout)
		}
		return attemptResult{outcome: retryable, err: fmt.Errorf("POST to sink %s: %w", s.Name, err)}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return attemptResult{outcome: sent}
	}
	// The answer is data, and a sink that echoes the request echoes its credentials: they are
	// cut out (post) before the text reaches a log or last_error.
	text := strings.ToValidUTF8(strings.TrimSpace(string(snippet)), "\uFFFD")
	err = fmt.Errorf("sink %s answered %d: %s", s.Name, code, text)
	if code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout {
		res := attemptResult{outcome: retryable, err: err}
		if n, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && n > 0 {
			res.retryAfter = time.Duration(n) * time.Second
		}
		return res
	}
	return attemptResult{outcome: permanent, err: err}
}

// redact replaces every secret in text. A secret cut by the 512-byte snippet is also caught
// by its first half, so an echo truncated mid-token does not leak most of it.
func redact(text string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) < 4 {
			continue
		}
		text = strings.ReplaceAll(text, sec, "[redacted]")
		if half := sec[:len(sec)/2]; len(half) >= 8 && strings.Contains(text, half) {
			if i := strings.LastIndex(text, half); i >= 0 {
				text = text[:i] + "[redacted]"
			}
		}
	}
	return text
}
