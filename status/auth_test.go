package status

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// TestTokenGuardsEveryPageAndAPIRoute: with Web.Token, each route answers 401 without the
// bearer token or with a wrong one (nothing of the report in the body), and 200 with it.
func TestTokenGuardsEveryPageAndAPIRoute(t *testing.T) {
	db := fixture(t)
	entries := fixtureEntries()
	const token = "s3cret-status-token"
	w := &Web{Store: db.store(), Database: db.Name, Token: token, Entries: func() []hunt.Hunt { return entries }}
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	do := func(path, auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/", "/hunts/failing", "/api/v1/hunts", "/api/v1/hunts/failing", "/api/v1/runners"} {
		for _, auth := range []string{"", "Bearer wrong", "Basic " + token, token} {
			if code, body := do(path, auth); code != http.StatusUnauthorized || strings.Contains(body, "failing") {
				t.Errorf("%s with %q: %d %s", path, auth, code, body)
			}
		}
		if code, body := do(path, "Bearer "+token); code != http.StatusOK {
			t.Errorf("%s with the token: %d %s", path, code, body)
		}
	}
}
