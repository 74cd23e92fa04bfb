package chlocal

import (
	"net/http/httptest"
	"testing"
)

func TestRefusal(t *testing.T) {
	for _, tc := range []struct {
		name               string
		remote, host, orig string
		allowRemote, want  bool
	}{
		{"loopback client", "127.0.0.1:5000", "127.0.0.1:8123", "", false, true},
		{"localhost Host", "127.0.0.1:5000", "localhost:8123", "", false, true},
		{"LOCALHOST. Host", "127.0.0.1:5000", "LOCALHOST.:8123", "", false, true},
		{"IPv6 loopback", "[::1]:5000", "[::1]:8123", "", false, true},
		{"other 127/8 address", "127.0.0.2:5000", "127.0.0.5:8123", "", false, true},
		{"Host without port", "127.0.0.1:5000", "localhost", "", false, true},
		{"loopback page origin", "127.0.0.1:5000", "127.0.0.1:8123", "http://localhost:3000", false, true},
		{"unspecified Host (client of a 0.0.0.0 listener)", "127.0.0.1:5000", "0.0.0.0:8123", "", false, true},
		{"unspecified IPv6 Host", "[::1]:5000", "[::]:8123", "", false, true},
		{"rebound name", "127.0.0.1:5000", "evil.example:8123", "", false, false},
		{"rebound name with its origin", "127.0.0.1:5000", "evil.example:8123", "http://evil.example:8123", false, false},
		{"name under localhost", "127.0.0.1:5000", "a.localhost:8123", "", false, false},
		{"decimal IP trick", "127.0.0.1:5000", "2130706433:8123", "", false, false},
		{"empty Host", "127.0.0.1:5000", "", "", false, false},
		{"cross-origin page", "127.0.0.1:5000", "127.0.0.1:8123", "http://evil.example", false, false},
		{"null origin", "127.0.0.1:5000", "127.0.0.1:8123", "null", false, false},
		{"file origin", "127.0.0.1:5000", "127.0.0.1:8123", "file://", false, false},
		{"cross-site subresource", "127.0.0.1:5000", "127.0.0.1:8123", "", false, false},
		{"remote peer", "192.0.2.7:5000", "127.0.0.1:8123", "", false, false},
		{"mapped v4 peer", "[::ffff:192.0.2.7]:5000", "localhost:8123", "", false, false},
		{"remote peer allowed", "192.0.2.7:5000", "chlocal:8123", "", true, true},
		{"remote page refused even so", "192.0.2.7:5000", "chlocal:8123", "http://evil.example", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/ping", nil)
			r.RemoteAddr, r.Host = tc.remote, tc.host
			if tc.orig != "" {
				r.Header.Set("Origin", tc.orig)
			}
			if tc.name == "cross-site subresource" {
				r.Header.Set("Sec-Fetch-Site", "cross-site")
			}
			s := &Server{opts: Options{AllowRemote: tc.allowRemote}}
			why := s.refusal(r)
			if (why == "") != tc.want {
				t.Fatalf("refusal = %q, want allowed=%v", why, tc.want)
			}
		})
	}
}
