package notify

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a client certificate.
type pki struct {
	caPEM                 []byte
	pool                  *x509.CertPool
	server                tls.Certificate
	clientCert, clientKey []byte
}

func newPKI(t *testing.T) pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(n int64, usage x509.ExtKeyUsage) ([]byte, []byte) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		c := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "leaf"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, c, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	p := pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	sc, sk := issue(2, x509.ExtKeyUsageServerAuth)
	if p.server, err = tls.X509KeyPair(sc, sk); err != nil {
		t.Fatal(err)
	}
	p.clientCert, p.clientKey = issue(3, x509.ExtKeyUsageClientAuth)
	return p
}

// A sink's tls_config (ca_file, cert_file, key_file) and basic_auth reach a server that
// trusts only that CA's client certificates and checks the password; without them the same
// post fails.
func TestSinkTLSClientCertAndBasicAuth(t *testing.T) {
	p := newPKI(t)
	var gotUser, gotPass string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, pw, ok := r.BasicAuth()
		if !ok || len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		gotUser, gotPass = u, pw
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	ca := writeFile(t, dir, "ca.pem", p.caPEM)
	cert := writeFile(t, dir, "client.pem", p.clientCert)
	key := writeFile(t, dir, "client.key", p.clientKey)
	pass := string(secret(t))
	pw := writeFile(t, dir, "pw", []byte(pass+"\n"))
	cfg, err := ParseConfig("n.yaml", []byte(`sinks:
  - name: am
    type: alertmanager
    urls: [`+srv.URL+`]
    basic_auth: {username: hunt, password_file: `+pw+`}
    tls_config: {ca_file: `+ca+`, cert_file: `+cert+`, key_file: `+key+`}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := cfg.Sink("am")
	if r := post(context.Background(), newHTTPClient(s.TLS), s, "k", []byte(`[]`)); r.outcome != sent {
		t.Fatalf("outcome %v: %v", r.outcome, r.err)
	}
	if gotUser != "hunt" || gotPass != pass {
		t.Errorf("basic auth %q/%q", gotUser, gotPass)
	}
	// Without the sink's tls_config the server's certificate is not trusted.
	if r := post(context.Background(), newHTTPClient(nil), s, "k", []byte(`[]`)); r.outcome == sent {
		t.Error("sent without trusting the CA")
	}
	// Without the client certificate the server refuses the handshake.
	noCert := &tls.Config{RootCAs: s.TLS.RootCAs}
	if r := post(context.Background(), newHTTPClient(noCert), s, "k", []byte(`[]`)); r.outcome == sent {
		t.Error("sent without the client certificate")
	}
}

// An alertmanager sink with several urls posts to each replica; one replica that took the
// alert is enough, a replica that is down does not fail the delivery, and when none took it
// the failure is retryable and names the replicas by position only.
func TestAlertmanagerFanOut(t *testing.T) {
	var hits [2]int
	up := func(i, code int) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v2/alerts" {
				t.Errorf("path %s", r.URL.Path)
			}
			hits[i]++
			w.WriteHeader(code)
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b := up(0, http.StatusOK), up(1, http.StatusOK)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	s := Sink{Name: "am", Type: TypeAlertmanager, URLs: []string{a.URL, b.URL}, Timeout: 5 * time.Second}
	if r := post(context.Background(), newHTTPClient(nil), s, "k", []byte(`[]`)); r.outcome != sent || hits != [2]int{1, 1} {
		t.Fatalf("outcome %v hits %v, want both replicas posted", r.outcome, hits)
	}
	s.URLs = []string{deadURL, b.URL}
	if r := post(context.Background(), newHTTPClient(nil), s, "k", []byte(`[]`)); r.outcome != sent {
		t.Fatalf("one replica down: outcome %v: %v", r.outcome, r.err)
	}
	failing := up(0, http.StatusServiceUnavailable)
	s.URLs = []string{deadURL, failing.URL}
	r := post(context.Background(), newHTTPClient(nil), s, "k", []byte(`[]`))
	if r.outcome != retryable || !strings.Contains(r.err.Error(), "url 1:") || !strings.Contains(r.err.Error(), "url 2:") ||
		strings.Contains(r.err.Error(), "http://") {
		t.Fatalf("all down: outcome %v, error %v", r.outcome, r.err)
	}
}

// A sink that echoes the request (headers and body) into its error answer does not get its
// own bearer token, basic password or HMAC key into the error the Dispatcher logs and stores.
func TestEchoedSecretsRedacted(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusBadRequest)
		_ = r.Header.Write(w)
		_, _ = w.Write(body)
	}))
	defer echo.Close()
	key := secret(t)
	for _, s := range []Sink{
		{Name: "b", Type: TypeWebhook, Bearer: string(secret(t)), Secret: key},
		{Name: "p", Type: TypeAlertmanager, User: "hunt", Pass: string(secret(t))},
	} {
		s.URLs, s.Timeout = []string{echo.URL}, 5*time.Second
		r := post(context.Background(), newHTTPClient(nil), s, "k", []byte(`{}`))
		if r.outcome != permanent {
			t.Fatalf("outcome %v", r.outcome)
		}
		msg := r.err.Error()
		for _, sec := range s.secrets() {
			if sec != "" && strings.Contains(msg, sec[:len(sec)/2]) {
				t.Errorf("sink %s: error carries a secret: %s", s.Name, msg)
			}
		}
		if !strings.Contains(msg, "[redacted]") {
			t.Errorf("sink %s: nothing redacted in %s", s.Name, msg)
		}
	}
}
