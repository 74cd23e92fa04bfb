package chlocal

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// refusal reports why a request is refused ("" when it is answered).
//
// chlocal runs every statement it is sent with full rights (file(), url(),
// INSERT INTO FUNCTION …), so a web page must never reach it. A page can
// send requests to 127.0.0.1 (a "simple" cross-origin POST needs no
// preflight, an <img> GET carries no Origin at all), and through DNS
// rebinding it can even make them look same-origin under its own name.
// Hence, by default:
//   - the peer must be a loopback address;
//   - the Host header must name loopback (localhost, 127.0.0.0/8, ::1, or
//     the unspecified address a client of a 0.0.0.0 listener dials): a
//     rebound name such as evil.example:PORT is refused;
//   - an Origin header, which browsers send and ordinary clients do not,
//     must be a loopback origin;
//   - Sec-Fetch-Site, which current browsers send on every request, must not
//     be cross-site (this catches the GETs of <img>, <script> and links,
//     which carry no Origin).
//
// AllowRemote drops the first two for a chlocal serving other hosts
// (compose, a cluster); the browser rules stay, since no web page has a
// reason to talk to it.
func (s *Server) refusal(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" && !loopbackOrigin(o) {
		return "requests from web pages (Origin " + o + ") are refused"
	}
	if strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site") {
		return "requests from web pages (Sec-Fetch-Site: cross-site) are refused"
	}
	if s.opts.AllowRemote {
		return ""
	}
	if !loopbackPeer(r.RemoteAddr) {
		return "only loopback clients are answered (peer " + r.RemoteAddr + "; start chlocal with AllowRemote / -allow-remote to serve other hosts)"
	}
	if !loopbackHost(r.Host) {
		return "Host " + r.Host + " does not name a loopback address (DNS rebinding defence; use localhost or 127.0.0.1)"
	}
	return ""
}

func loopbackPeer(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether a Host header (name[:port]) names loopback.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return true // a rebinding page cannot make a browser send Host 0.0.0.0; the browser rules catch one that fetches it
	}
	return loopbackName(host)
}

// loopbackName accepts localhost (with or without the root dot) and loopback
// IP literals. Names under .localhost are refused: a browser maps them to
// loopback itself, but not every resolver does.
func loopbackName(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false // includes "null" (sandboxed frames, file: pages)
	}
	return loopbackName(u.Hostname())
}
