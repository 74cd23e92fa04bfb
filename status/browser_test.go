package status

import (
	"bytes"
	"context"
	"flag"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/store"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the status page screenshot to docs/status-page.png")

// chromium finds the browser: the test skips without one locally, and fails under CI=true,
// where .ci/run installs Debian's chromium package.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH; .ci/run installs the Debian package")
	}
	t.Skip("no chromium on PATH (apt-get install chromium)")
	return ""
}

// headless runs one headless Chromium invocation (a fresh profile each time) and returns
// its standard output.
func headless(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--hide-scrollbars"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

var tags = regexp.MustCompile(`<[^>]*>`)

// visible is the text a person reads in an HTML fragment.
func visible(html string) string {
	return strings.Join(strings.Fields(tags.ReplaceAllString(html, " ")), " ")
}

// rowOf cuts hunt id's table row out of the rendered DOM.
func rowOf(t *testing.T, dom, id string) (state, text string) {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr id="hunt-` + regexp.QuoteMeta(id) + `" data-state="([^"]*)">(.*?)</tr>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page has no row for %s:\n%s", id, dom)
	}
	return m[1], visible(m[2])
}

// TestStatusPageInChromium renders the page in a real browser and checks what a person would
// see: every hunt, the failing one marked and first, its lag in minutes, the unpublished one
// flagged. It keeps a screenshot for docs/operations.md (-update-screenshot).
func TestStatusPageInChromium(t *testing.T) {
	bin := chromium(t)
	db := fixture(t)
	srv := serveFixture(t, db, fixtureEntries())

	dom := headless(t, bin, "--dump-dom", srv.URL+"/")
	text := visible(dom)
	for _, id := range []string{"failing", "fresh", "ghost", "healthy", "monthly", "quiet"} {
		if !strings.Contains(text, id) {
			t.Errorf("the page does not show %s:\n%s", id, text)
		}
	}
	if strings.Contains(dom, "retired") {
		t.Error("the page shows the retired hunt")
	}
	class, row := rowOf(t, dom, "failing")
	if class != "failing" || !strings.Contains(row, "failing") || !strings.Contains(row, "Unknown table") ||
		!regexp.MustCompile(`\b([7-9]|1[0-9])m(\d+s)?\b`).MatchString(row) || !strings.Contains(row, " 8 ") {
		t.Errorf("the failing hunt's row reads %q (class %q): want it marked failing, 8 failures, its error, lag ≥ 7m", row, class)
	}
	if i, j := strings.Index(dom, `id="hunt-failing"`), strings.Index(dom, `id="hunt-healthy"`); i > j {
		t.Error("the failing hunt is not above the healthy one")
	}
	if class, row := rowOf(t, dom, "healthy"); class != "running" || !strings.Contains(row, "succeeded") ||
		!strings.Contains(row, "5 rows") {
		t.Errorf("healthy row %q (class %q)", row, class)
	}
	if _, row := rowOf(t, dom, "ghost"); !strings.Contains(row, "unpublished") {
		t.Errorf("ghost row %q: not flagged unpublished", row)
	}
	if !strings.Contains(dom, `href="/hunts/failing"`) {
		t.Error("no link to the failing hunt's page")
	}

	detail := visible(headless(t, bin, "--dump-dom", srv.URL+"/hunts/failing"))
	if !strings.Contains(detail, "Recent runs") || strings.Count(detail, "pod-b") != 8 || !strings.Contains(detail, "never") {
		t.Errorf("the failing hunt's page:\n%s", detail)
	}

	shot := filepath.Join(t.TempDir(), "status.png")
	headless(t, bin, "--window-size=1200,450", "--screenshot="+shot, srv.URL+"/")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() != 1200 {
		t.Fatalf("screenshot: %v %v", err, img)
	}
	if *updateScreenshot {
		if err := os.WriteFile(filepath.Join("..", "docs", "status-page.png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusPageShowsWhatAnOperatorLooksFor, in Chromium: severity on the index, and severity,
// labels, description and query on the hunt's page; a paused hunt says who paused it, why and
// until when, and has no next fire (nor a place among the upcoming fires); the upcoming fires
// are listed soonest first; the runners link opens a page, not JSON.
func TestStatusPageShowsWhatAnOperatorLooksFor(t *testing.T) {
	bin := chromium(t)
	db := fixture(t)
	if err := store.New(db.Conn, db.Name).Pause(context.Background(),
		store.Pause{HuntID: "monthly", By: "alice", Reason: "noisy after the proxy change", For: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	entries := fixtureEntries()
	entries[0].Severity, entries[0].Labels = "high", map[string]string{"team": "soc", "mitre": "T1110"}
	entries[0].Description = "Brute force against the VPN <gateway>"
	entries[0].Query = "SELECT user, count() AS n FROM auth WHERE ok = 0 GROUP BY user HAVING n > 20"
	srv := serveFixture(t, db, entries)

	dom := headless(t, bin, "--dump-dom", srv.URL+"/")
	if _, row := rowOf(t, dom, "healthy"); !strings.Contains(row, "high") {
		t.Errorf("healthy row %q lacks its severity", row)
	}
	class, row := rowOf(t, dom, "monthly")
	if class != "paused" || !strings.Contains(row, "by alice, until ") || !strings.Contains(row, "noisy after the proxy change") {
		t.Errorf("paused row %q (class %q): want who, until when and why", row, class)
	}
	raw := regexp.MustCompile(`(?s)<tr id="hunt-monthly"[^>]*>(.*?)</tr>`).FindStringSubmatch(dom)
	if raw == nil || !strings.Contains(raw[1], `<td class="nowrap"><span class="muted">paused</span></td>`) {
		t.Errorf("the paused hunt's next-fire cell is not \"paused\": %v", raw)
	}
	up := regexp.MustCompile(`(?s)<table id="upcoming">(.*?)</table>`).FindStringSubmatch(dom)
	if up == nil {
		t.Fatalf("no upcoming fires:\n%s", dom)
	}
	upText := visible(up[1])
	if !strings.Contains(upText, "healthy") || strings.Contains(upText, "monthly") || strings.Contains(upText, "quiet") {
		t.Errorf("upcoming fires %q: want healthy, not the paused or the disabled hunt", upText)
	}
	if !strings.Contains(dom, `href="/runners"`) {
		t.Error("no link to the runners page")
	}
	runners := headless(t, bin, "--dump-dom", srv.URL+"/runners")
	if !strings.Contains(runners, `<table id="runners">`) || !strings.Contains(visible(runners), "Runners") {
		t.Errorf("/runners is not a page:\n%s", runners)
	}
	detail := headless(t, bin, "--dump-dom", srv.URL+"/hunts/healthy")
	text := visible(detail)
	for _, want := range []string{"high", "team=soc", "mitre=T1110", "Brute force against the VPN <gateway>", entries[0].Query} {
		if !strings.Contains(text, strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(want)) && !strings.Contains(text, want) {
			t.Errorf("the hunt's page lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(detail, "<gateway>") {
		t.Error("the description is not escaped")
	}
	if _, body, _ := strings.Cut(func() string { _, _, b := get(t, srv.URL+"/api/v1/hunts/healthy"); return b }(), "{"); !strings.Contains(body, `"severity": "high"`) ||
		!strings.Contains(body, `"team": "soc"`) || !strings.Contains(body, `"query": "SELECT user`) {
		t.Errorf("the API's hunt lacks severity, labels or query: %s", body)
	}
	if *updateScreenshot {
		for page, file := range map[string]string{"/": "status-page-paused.png", "/hunts/healthy": "status-hunt-page.png"} {
			shot := filepath.Join(t.TempDir(), "shot.png")
			headless(t, bin, "--window-size=1200,700", "--screenshot="+shot, srv.URL+page)
			b, err := os.ReadFile(shot)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("..", "docs", file), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, row := rowOf(t, dom, "failing"); strings.Contains(row, "paused") {
		t.Errorf("failing row %q says paused", row)
	}
}
