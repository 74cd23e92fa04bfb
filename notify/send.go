package notify

import (
	"bytes"
	"context"
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
// and a webhook that moved should be reconfigured, so a 3xx is a permanent failure.
func newHTTPClient() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// post sends body to s once.
func post(ctx context.Context, client *http.Client, s Sink, key string, body []byte) attemptResult {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	target := s.URL
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
	if s.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+s.Bearer)
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
	err = fmt.Errorf("sink %s answered %d: %s", s.Name, code, strings.TrimSpace(string(snippet)))
	if code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout {
		res := attemptResult{outcome: retryable, err: err}
		if n, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && n > 0 {
			res.retryAfter = time.Duration(n) * time.Second
		}
		return res
	}
	return attemptResult{outcome: permanent, err: err}
}
