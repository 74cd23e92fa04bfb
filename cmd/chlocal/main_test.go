package main_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

func withoutEnv(names ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

func TestMissingLibraryMessage(t *testing.T) {
	bin := chtest.Binary(t)
	for _, tc := range []struct {
		name, lib, want string
	}{
		{"unset", "", "CHDB_LIB_PATH is not set"},
		{"missing file", filepath.Join(t.TempDir(), "nope", "libchdb.so"), "chDB library not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Env = withoutEnv("CHDB_LIB_PATH")
			if tc.lib != "" {
				cmd.Env = append(cmd.Env, "CHDB_LIB_PATH="+tc.lib)
			}
			out, err := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
				t.Fatalf("exit code %d (%v), want 1", code, err)
			}
			if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), tc.lib) {
				t.Fatalf("output %q lacks %q", out, tc.want)
			}
		})
	}
}

func TestListeningLineAndSIGTERM(t *testing.T) {
	chtest.LibPath(t)
	bin := chtest.Binary(t)
	data := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-path", data)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^listening on (127\.0\.0\.1:[0-9]+) \(ClickHouse 26\.[0-9.]+, revision [0-9]+\)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first line %q: want `listening on 127.0.0.1:PORT (ClickHouse 26.x, revision R)`", line)
	}
	addr := m[1]
	resp, err := http.Get("http://" + addr + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "Ok.\n" {
		t.Fatalf("/ping = %q", b)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("chlocal did not exit within 20s of SIGTERM")
	}
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("a given -path must be kept: %v", err)
	}
}

// startBin runs chlocal with args and returns its address once it listens.
func startBin(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(chtest.Binary(t), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^listening on (\S+) `).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first line %q", line)
	}
	return m[1]
}

func TestFaultsFlag(t *testing.T) {
	chtest.LibPath(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "faults.json")
	if err := os.WriteFile(good, []byte(`{"seed": 5, "rules": [{"name": "nope", "kind": "read", "match": "nope", "effect": "fail_before", "code": 242}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startBin(t, "-faults", good)
	resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("SELECT 'nope'"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 || resp.Header.Get("X-ClickHouse-Exception-Code") != "242" {
		t.Fatalf("statement under the file's rule: %s, code %q", resp.Status, resp.Header.Get("X-ClickHouse-Exception-Code"))
	}
	resp, err = http.Get("http://" + addr + "/chlocal/faults")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"seed":5`) || !strings.Contains(string(b), `"fired":1`) {
		t.Fatalf("GET /chlocal/faults = %s", b)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"rules": [{"name": "late", "effect": "delay_answer"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(chtest.Binary(t), "-faults", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "rule 0 (late)") || !strings.Contains(string(out), "needs a delay") {
		t.Fatalf("bad rule file: %v, output %q; want a failure naming the rule", err, out)
	}
}

// nonLoopbackIP returns an address of this machine other than loopback, or skips.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address")
	return ""
}

// Listening on every address is not enough to serve other hosts: the peer
// must be loopback unless -allow-remote is given, and web pages stay refused.
func TestAllowRemoteFlag(t *testing.T) {
	chtest.LibPath(t)
	ip := nonLoopbackIP(t)
	get := func(addr, host, origin string) int {
		t.Helper()
		_, port, _ := net.SplitHostPort(addr)
		req, _ := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(ip, port)+"/?query=SELECT+1", nil)
		if host != "" {
			req.Host = host + ":" + port
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	strict := startBin(t, "-listen", "0.0.0.0:0")
	if code := get(strict, "", ""); code != http.StatusForbidden {
		t.Fatalf("a peer at %s without -allow-remote: %d, want 403", ip, code)
	}
	// A remote client can claim any Host: the peer address decides.
	if code := get(strict, "localhost", ""); code != http.StatusForbidden {
		t.Fatalf("a peer at %s sending Host localhost without -allow-remote: %d, want 403", ip, code)
	}
	open := startBin(t, "-listen", "0.0.0.0:0", "-allow-remote")
	if code := get(open, "", ""); code != http.StatusOK {
		t.Fatalf("a peer at %s with -allow-remote: %d, want 200", ip, code)
	}
	if code := get(open, "", "http://evil.example"); code != http.StatusForbidden {
		t.Fatalf("a web page with -allow-remote: %d, want 403", code)
	}
}

// SIGTERM ends injected holds: a request held for ten minutes does not keep
// chlocal from shutting down cleanly.
func TestSIGTERMEndsHolds(t *testing.T) {
	chtest.LibPath(t)
	cmd := exec.Command(chtest.Binary(t))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.Fields(strings.TrimPrefix(line, "listening on "))[0]
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/chlocal/faults",
		strings.NewReader(`{"rules": [{"match": "held", "effect": "delay_answer", "delay": "10m"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	go func() {
		if resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("SELECT 'held'")); err == nil {
			resp.Body.Close()
		}
	}()
	var body []byte
	if !chtest.Poll(time.Minute, func() bool {
		resp, err := http.Get("http://" + addr + "/chlocal/log")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), `"executed":true`) && strings.Contains(string(body), "held")
	}) {
		t.Fatalf("the held statement never ran: %s", body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM with a held request: %v, want a clean exit", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("chlocal did not exit within 20s of SIGTERM")
	}
}
