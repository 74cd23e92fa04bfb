package chlocal_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// send posts a statement to addr with the given Host and Origin headers.
func send(t *testing.T, addr, host, origin, sql string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/", strings.NewReader(sql))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
		req.Header.Set("Content-Type", "text/plain") // a "simple" request: a browser sends it without preflight
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A web page cannot use chlocal: not cross-origin, not through DNS
// rebinding; local clients naming loopback can.
func TestLoopbackPolicy(t *testing.T) {
	srv := chtest.Start(t)
	_, port, _ := net.SplitHostPort(srv.Addr)
	for _, host := range []string{"", "localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port} {
		if resp, body := send(t, srv.Addr, host, "", "SELECT 1"); resp.StatusCode != 200 || body != "1\n" {
			t.Errorf("Host %q: %s %q, want 200", host, resp.Status, body)
		}
	}
	if resp, _ := send(t, srv.Addr, "", "http://localhost:3000", "SELECT 1"); resp.StatusCode != 200 {
		t.Errorf("a loopback origin: %s, want 200", resp.Status)
	}
	for _, tc := range []struct{ host, origin string }{
		{"evil.example:" + port, ""},                            // DNS rebinding, GET-like request without Origin
		{"evil.example:" + port, "http://evil.example:" + port}, // DNS rebinding, same-origin POST
		{"", "http://evil.example"},                             // cross-origin POST to 127.0.0.1
		{"", "null"},                                            // sandboxed frame or file: page
	} {
		resp, body := send(t, srv.Addr, tc.host, tc.origin, "SELECT 'refused-marker'")
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-ClickHouse-Exception-Code") != "195" ||
			!strings.Contains(body, "IP_ADDRESS_NOT_ALLOWED") {
			t.Errorf("Host %q Origin %q: %s %q, want 403 with code 195", tc.host, tc.origin, resp.Status, body)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+srv.Addr+"/chlocal/faults", nil)
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("control endpoint with Host %q Origin %q: %s, want 403", tc.host, tc.origin, resp.Status)
		}
	}
	// An <img> or link on a web page: a GET with no Origin, which current
	// browsers mark cross-site.
	if resp, _ := send(t, srv.Addr, "", "", "SELECT 'refused-marker'", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site subresource request: %s, want 403", resp.Status)
	}
	if resp, _ := send(t, srv.Addr, "", "", "SELECT 1", "Sec-Fetch-Site", "none"); resp.StatusCode != 200 {
		t.Errorf("a URL typed into the browser (Sec-Fetch-Site: none): %s, want 200", resp.Status)
	}
	for _, st := range srv.StatementLog(t) {
		if strings.Contains(st.SQL, "refused-marker") {
			t.Fatalf("a refused request reached the engine: %+v", st)
		}
	}
}
