package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// The worked example's tests pass: `hunt-runner test examples/hunts` exits 0. A private engine,
// because the fixtures create the sample database and the shared one may have it.
func TestExampleHuntTestsPass(t *testing.T) {
	srv := chtest.Start(t)
	out, err := runApp(t, "test", "--clickhouse-url", srv.URL, "../../examples/hunts")
	if exitCode(err) != exitOK || !strings.Contains(out, "4 passed, 0 failed") {
		t.Fatalf("exit %d (%v):\n%s", exitCode(err), err, out)
	}
	if !strings.Contains(out, "--- PASS: password-spray/one address failing for five users is a spray") ||
		!strings.Contains(out, "--- PASS: password-spray/the corporate scanner is excepted") ||
		!strings.Contains(out, "hunts with no test: brute-force") {
		t.Fatalf("output:\n%s", out)
	}
}

// A failing test exits 1 with the diff and a JUnit file; a malformed file exits 2 and names its
// file and line; --require-tests exits 1 for a hunt without a negative test.
func TestHuntTestExitCodes(t *testing.T) {
	srv := chtest.Start(t)
	dir := t.TempDir()
	hunt := "id: spray\ninterval: 5m\nquery: |\n  SELECT src_ip, uniqExact(user) AS users FROM sample.auth_events\n" +
		"  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)} GROUP BY src_ip\n"
	test := func(expect string) string {
		return "hunt: spray\ntests:\n  - name: two users\n    window: {start: 2026-01-01T00:00:00Z, end: 2026-01-01T00:05:00Z}\n" +
			"    tables:\n      sample.auth_events:\n        columns: {ts: DateTime64(3), user: String, src_ip: String}\n" +
			"        rows:\n          - {ts: 2026-01-01T00:01:00Z, user: a, src_ip: 10.0.0.1}\n          - {ts: 2026-01-01T00:02:00Z, user: b, src_ip: 10.0.0.1}\n" +
			"    expect:\n" + expect
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("spray.yaml", hunt)
	write("spray.test.yaml", test("      - {src_ip: 10.0.0.1, users: 2}\n"))
	common := []string{"--clickhouse-url", srv.URL}

	out, err := runApp(t, testArgs(common, dir)...)
	if exitCode(err) != exitOK || !strings.Contains(out, "1 passed, 0 failed") {
		t.Fatalf("passing: exit %d %v\n%s", exitCode(err), err, out)
	}
	out, err = runApp(t, testArgs(common, "--json", dir)...)
	var rep struct {
		Tests []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"tests"`
		Passed int `json:"passed"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Passed != 1 || len(rep.Tests) != 1 || rep.Tests[0].Status != "pass" {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	out, err = runApp(t, testArgs(common, "--require-tests", dir)...)
	if exitCode(err) != exitError || !strings.Contains(out, "hunts without a positive and a negative test: spray (no test that expects none (expect: []))") {
		t.Fatalf("--require-tests: exit %d\n%s", exitCode(err), out)
	}

	write("spray.test.yaml", test("      - {src_ip: 10.0.0.1, users: 3}\n"))
	junit := filepath.Join(t.TempDir(), "report.xml")
	out, err = runApp(t, testArgs(common, "--junit", junit, dir)...)
	if exitCode(err) != exitError || !strings.Contains(out, "--- FAIL: spray/two users") ||
		!strings.Contains(out, `{"src_ip":"10.0.0.1","users":3}`) || !strings.Contains(out, "0 passed, 1 failed") {
		t.Fatalf("failing: exit %d\n%s", exitCode(err), out)
	}
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Text string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil || doc.Failures != 1 || doc.Suites[0].Cases[0].Failure == nil ||
		!strings.Contains(doc.Suites[0].Cases[0].Failure.Text, `"users":2`) {
		t.Fatalf("JUnit (%v):\n%s", err, data)
	}

	write("spray.test.yaml", "hunt: spray\ntests:\n  - name: x\n    window: {start: 2026-01-01T00:00:00Z}\n    expect: []\n")
	out, err = runApp(t, testArgs(common, dir)...)
	if exitCode(err) != exitUsage || !strings.Contains(out, "spray.test.yaml:4:13: window needs both start and end") {
		t.Fatalf("malformed: exit %d\n%s", exitCode(err), out)
	}

	empty := t.TempDir()
	write2 := filepath.Join(empty, "spray.yaml")
	if err := os.WriteFile(write2, []byte(hunt), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runApp(t, testArgs(common, empty)...); exitCode(err) != exitUsage ||
		!strings.Contains(err.Error(), "no tests (*.test.yaml) found") {
		t.Fatalf("no tests: %v", err)
	}
}

// testArgs puts the flags before the paths (urfave/cli stops reading flags at the first path).
func testArgs(common []string, rest ...string) []string {
	return append(append([]string{"test"}, common...), rest...)
}

// Without --clickhouse-url, `test` runs on the embedded engine: the binary `make dev` builds
// (with the engine) passes the example's tests on its own, with no server at all.
func TestHuntTestOnTheEmbeddedEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	lib := chtest.LibPath(t)
	bin := filepath.Join(t.TempDir(), "hunt-runner-dev")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "test", "../../examples/hunts")
	cmd.Env = append(os.Environ(), "CHDB_LIB_PATH="+lib, "HUNT_RUNNER_CLICKHOUSE_URL=")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "4 passed, 0 failed") {
		t.Fatalf("embedded: %v\n%s", err, out)
	}
}
