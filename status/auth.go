package status

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// requireToken answers 401 unless the request carries "Authorization: Bearer <token>", as the
// shim's --token-file does. Both sides are hashed first, so the comparison takes the same time
// whatever the length of the guess. Run errors can quote row values (data), which is why the
// page and the API are worth a token.
func requireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="hunt-runner-status"`)
			writeJSON(rw, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token (--status-token-file)"})
			return
		}
		next.ServeHTTP(rw, r)
	})
}
