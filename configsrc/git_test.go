package configsrc

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gitRepo is a real repository made with the git CLI: a bare "origin" and a working clone.
type gitRepo struct {
	t      *testing.T
	root   string // holds origin.git (the GIT_PROJECT_ROOT for http-backend)
	origin string
	work   string
}

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git CLI not installed")
	}
	root := t.TempDir()
	r := &gitRepo{t: t, root: root, origin: filepath.Join(root, "origin.git"), work: filepath.Join(t.TempDir(), "work")}
	r.git("", "init", "-q", "--bare", "-b", "main", r.origin)
	r.git("", "init", "-q", "-b", "main", r.work)
	r.git(r.work, "remote", "add", "origin", r.origin)
	return r
}

func (r *gitRepo) git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := filepath.Join(r.root, "home")
	os.MkdirAll(home, 0o755)
	cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Detection Engineer", "GIT_AUTHOR_EMAIL=de@example.com",
		"GIT_COMMITTER_NAME=Detection Engineer", "GIT_COMMITTER_EMAIL=de@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (empty content deletes) and pushes; it returns the new commit SHA.
func (r *gitRepo) commit(msg string, files map[string]string, pushArgs ...string) string {
	r.t.Helper()
	for name, content := range files {
		p := filepath.Join(r.work, name)
		if content == "" {
			r.git(r.work, "rm", "-q", name)
			continue
		}
		writeFile(r.t, p, content)
		r.git(r.work, "add", name)
	}
	r.git(r.work, "commit", "-q", "-m", msg)
	r.git(r.work, append([]string{"push", "-q", "origin", "main"}, pushArgs...)...)
	return r.git(r.work, "rev-parse", "HEAD")
}

// serveHTTP serves the repositories over smart HTTP (git http-backend behind net/http/cgi),
// requiring the token as basic-auth password when token is not empty.
func (r *gitRepo) serveHTTP(token string) *httptest.Server {
	r.t.Helper()
	backend := "/usr/lib/git-core/git-http-backend"
	if out, err := exec.Command("git", "--exec-path").Output(); err == nil {
		backend = filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	}
	if _, err := os.Stat(backend); err != nil {
		r.t.Skipf("git http-backend not found: %v", err)
	}
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + r.root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if token != "" {
			if _, pw, ok := req.BasicAuth(); !ok || pw != token {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorised", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, req)
	}))
	r.t.Cleanup(srv.Close)
	return srv
}

func TestGitSource(t *testing.T) {
	for _, transport := range []string{"file", "http"} {
		t.Run(transport, func(t *testing.T) {
			repo := newGitRepo(t)
			c1 := repo.commit("first hunts", map[string]string{
				"README.md":          "# hunts\n",
				"hunts/a.yaml":       huntYAML("5m", "a1"),
				"hunts/net/dns.yml":  huntYAML("10m", "dns1"),
				"other/ignored.yaml": "not: a hunt",
			})
			opts := GitOptions{URL: "file://" + repo.origin, Ref: "main", Path: "hunts", CacheDir: filepath.Join(t.TempDir(), "cache")}
			var srv *httptest.Server
			token := "token-" + rand.Text()
			if transport == "http" {
				srv = repo.serveHTTP(token)
				opts.URL = srv.URL + "/origin.git"
				tokenFile := filepath.Join(t.TempDir(), "token")
				writeFile(t, tokenFile, token+"\n")
				opts.TokenFile = tokenFile
			}
			src, err := NewGit(opts)
			if err != nil {
				t.Fatal(err)
			}
			l := NewLoader(src, time.Hour, nil)
			ctx := context.Background()

			set, _, err := l.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if set.Commit != c1 || ids(set) != "a,dns" || len(set.Problems) != 0 {
				t.Fatalf("first load: commit %s (want %s) hunts %s problems %v", set.Commit, c1, ids(set), set.Problems)
			}
			if _, err := os.Stat(filepath.Join(src.(*gitSource).repoDir, "shallow")); err != nil {
				t.Errorf("the clone is not shallow: %v", err)
			}
			if h, _ := set.Get("dns"); h.File != "net/dns.yml" {
				t.Errorf("dns file = %q", h.File)
			}

			// Commit, reload, see the change; a broken file keeps its last good hunt.
			c2 := repo.commit("tune a, add b, break dns", map[string]string{
				"hunts/a.yaml":      huntYAML("15m", "a2"),
				"hunts/b.yaml":      huntYAML("1h", "b1"),
				"hunts/net/dns.yml": strings.Replace(huntYAML("10m", "dns2"), "10m", "yes", 1),
			})
			set, changed, err := l.Load(ctx)
			if err != nil || !changed {
				t.Fatalf("reload: %v changed=%v", err, changed)
			}
			if set.Commit != c2 || ids(set) != "a,b,dns" {
				t.Fatalf("after commit: commit %s (want %s) hunts %s", set.Commit, c2, ids(set))
			}
			if a, _ := set.Get("a"); a.Interval != 15*time.Minute {
				t.Errorf("a not updated: %v", a.Interval)
			}
			if p, ok := set.Stale["dns"]; !ok || p.Line != 1 || p.Column != 11 {
				t.Errorf("dns should be stale with the interval problem: %v", set.Stale)
			}

			// Force-push a rewritten history: the new tip wins.
			repo.git(repo.work, "reset", "-q", "--hard", c1)
			c3 := repo.commit("rewritten", map[string]string{"hunts/a.yaml": huntYAML("30m", "forced")}, "--force")
			set, _, err = l.Load(ctx)
			if err != nil {
				t.Fatalf("after force-push: %v", err)
			}
			if set.Commit != c3 || ids(set) != "a,dns" || len(set.Stale) != 0 {
				t.Fatalf("after force-push: commit %s (want %s) hunts %s stale %v", set.Commit, c3, ids(set), set.Stale)
			}
			if a, _ := set.Get("a"); !strings.Contains(a.Query, "'forced'") {
				t.Errorf("a after force-push: %s", a.Query)
			}

			// The remote becomes unreachable: the last good set stays.
			if srv != nil {
				srv.Close()
			} else if err := os.Rename(repo.origin, repo.origin+".moved"); err != nil {
				t.Fatal(err)
			}
			kept, changed, err := l.Load(ctx)
			if !errors.Is(err, ErrUnavailable) || changed || kept != set || l.Current() != set {
				t.Fatalf("unreachable: err %v changed %v, set replaced", err, changed)
			}
			if strings.Contains(err.Error(), token) {
				t.Errorf("error leaks the token: %v", err)
			}
		})
	}
}

func TestGitRefs(t *testing.T) {
	repo := newGitRepo(t)
	c1 := repo.commit("v1", map[string]string{"a.yaml": huntYAML("5m", "v1")})
	repo.git(repo.work, "tag", "-a", "-m", "release 1", "v1.0.0")
	repo.git(repo.work, "push", "-q", "origin", "v1.0.0")
	repo.commit("v2", map[string]string{"a.yaml": huntYAML("5m", "v2")})

	for _, tc := range []struct{ ref, marker string }{
		{"v1.0.0", "'v1'"}, // annotated tag
		{c1, "'v1'"},       // commit SHA (the server refuses want-by-SHA: full fetch fallback)
		{"refs/heads/main", "'v2'"},
	} {
		src, err := NewGit(GitOptions{URL: "file://" + repo.origin, Ref: tc.ref, CacheDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		set, err := src.Load(context.Background())
		if err != nil {
			t.Fatalf("ref %s: %v", tc.ref, err)
		}
		a, ok := set.Get("a")
		if !ok || !strings.Contains(a.Query, tc.marker) {
			t.Errorf("ref %s: a = %+v", tc.ref, a)
		}
		if tc.ref == c1 && set.Commit != c1 {
			t.Errorf("ref %s: commit %s", tc.ref, set.Commit)
		}
	}

	src, _ := NewGit(GitOptions{URL: "file://" + repo.origin, Ref: "no-such-branch", CacheDir: t.TempDir()})
	if _, err := src.Load(context.Background()); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "neither a branch nor a tag") {
		t.Errorf("missing ref: %v", err)
	}
}

func TestGitHTTPWrongToken(t *testing.T) {
	repo := newGitRepo(t)
	repo.commit("v1", map[string]string{"a.yaml": huntYAML("5m", "v1")})
	wrong := "wrong-" + rand.Text()
	srv := repo.serveHTTP("right-" + rand.Text())
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, wrong)
	src, _ := NewGit(GitOptions{URL: srv.URL + "/origin.git", TokenFile: tokenFile, CacheDir: t.TempDir()})
	_, err := src.Load(context.Background())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("error leaks the token: %v", err)
	}
}

func TestNewGitRejectsCredentialsInURL(t *testing.T) {
	if _, err := NewGit(GitOptions{URL: "https://bot:hunter2@git.example.com/hunts.git"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewGit(GitOptions{URL: "ssh://git@git.example.com/hunts.git", SSHKeyFile: "/k"}); err == nil {
		t.Fatal("SSH key without known_hosts accepted")
	}
}

// TestGitBrokenCacheRecovers: a cache that lost its objects (disk trouble, an interrupted
// write) is wiped and cloned again instead of failing forever.
func TestGitBrokenCacheRecovers(t *testing.T) {
	repo := newGitRepo(t)
	repo.commit("v1", map[string]string{"a.yaml": huntYAML("5m", "v1")})
	src, _ := NewGit(GitOptions{URL: "file://" + repo.origin, CacheDir: t.TempDir()})
	mustLoad(t, src)
	objects := filepath.Join(src.(*gitSource).repoDir, "objects")
	if err := os.RemoveAll(objects); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(objects, 0o755)
	c2 := repo.commit("v2", map[string]string{"a.yaml": huntYAML("5m", "v2")})
	set, err := src.Load(context.Background())
	if err != nil {
		t.Fatalf("broken cache not recovered: %v", err)
	}
	if a, _ := set.Get("a"); set.Commit != c2 || !strings.Contains(a.Query, "'v2'") {
		t.Errorf("commit %s (want %s), a = %s", set.Commit, c2, a.Query)
	}
}

// TestGitURLCredentials: a git URL with credentials in its user part is refused without being
// quoted; ssh user names are not credentials.
func TestGitURLCredentials(t *testing.T) {
	tok := testSecret(t)
	for _, tc := range []struct {
		url    string
		refuse bool
	}{
		{"https://" + tok + "@github.com/org/hunts.git", true},
		{"https://x-access-token:" + tok + "@github.com/org/hunts.git", true},
		{"http://oauth2:" + tok + "@gitlab.example/org/hunts.git", true},
		{"ssh://git:" + tok + "@github.com/org/hunts.git", true},
		{"git:" + tok + "@github.com:org/hunts.git", true},
		{"https://github.com/org/hunts.git?access_token=" + tok, true},
		{"https://github.com/org/hunts.git?private_token=" + tok + "#x", true},
		{"https://github.com/org/hunts.git#" + tok, true},
		{"https://github.com/org/hunts.git", false},
		{"ssh://git@github.com/org/hunts.git", false},
		{"git@github.com:org/hunts.git", false},
		{"file:///srv/git/hunts.git", false},
	} {
		_, err := NewGit(GitOptions{URL: tc.url, CacheDir: t.TempDir()})
		if tc.refuse != (err != nil) {
			t.Errorf("%s: err = %v, want refused %v", strings.ReplaceAll(tc.url, tok, "TOKEN"), err, tc.refuse)
		}
		if err != nil && strings.Contains(err.Error(), tok) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
}
