package configsrc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// GitOptions configure a git source.
type GitOptions struct {
	URL  string // https://, ssh:// (or scp-like user@host:path) or file://; no credentials in it
	Ref  string // branch, tag, full ref name or 40-hex commit SHA; default "main"
	Path string // directory inside the repository holding the hunts; default the root
	// CacheDir holds the clone, a bare repository in a subdirectory named after the URL (so a
	// broken clone can be wiped without touching anything else); default
	// <user cache dir>/hunt-runner/git.
	CacheDir string
	// TokenFile holds an HTTPS access token, sent as basic-auth password with TokenUser
	// (default "git"). Read on every fetch, so a rotated token is picked up.
	TokenFile string
	TokenUser string
	// SSHKeyFile is a private key for ssh URLs; KnownHostsFile is then required.
	SSHKeyFile     string
	KnownHostsFile string
	// Timeout bounds each fetch; default 1m.
	Timeout        time.Duration
	SpreadFraction float64 // as Options.SpreadFraction
	Policy         Policy  // as Options.Policy
}

var shaRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

const targetRef = plumbing.ReferenceName("refs/hunt-runner/target")

type gitSource struct {
	opts    GitOptions
	repoDir string // CacheDir/<hash of URL>
	mu      sync.Mutex
}

// NewGit returns a source that fetches opts.Ref from opts.URL (shallow) on every Load and reads
// the hunt files from that commit's tree. Credentials come only from files.
func NewGit(opts GitOptions) (Source, error) {
	if opts.URL == "" {
		return nil, errors.New("configsrc: git URL is empty")
	}
	if err := checkGitURL(opts.URL); err != nil {
		return nil, err
	}
	if opts.Ref == "" {
		opts.Ref = "main"
	}
	opts.Path = strings.Trim(path.Clean("/"+filepath.ToSlash(opts.Path)), "/")
	if opts.TokenUser == "" {
		opts.TokenUser = "git"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Minute
	}
	if opts.SSHKeyFile != "" && opts.KnownHostsFile == "" {
		return nil, errors.New("configsrc: an SSH key file needs a known_hosts file to verify the server")
	}
	if opts.SpreadFraction == 0 {
		opts.SpreadFraction = schedule.DefaultSpreadFraction
	}
	if err := schedule.ValidateSpreadFraction(opts.SpreadFraction); err != nil {
		return nil, fmt.Errorf("configsrc: %w", err)
	}
	if opts.CacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		opts.CacheDir = filepath.Join(base, "hunt-runner", "git")
	}
	sum := sha256.Sum256([]byte(opts.URL))
	return &gitSource{opts: opts, repoDir: filepath.Join(opts.CacheDir, "repo-"+hex.EncodeToString(sum[:8]))}, nil
}

func (g *gitSource) String() string {
	s := "git:" + g.opts.URL + "@" + g.opts.Ref
	if g.opts.Path != "" {
		s += ":" + g.opts.Path
	}
	return s
}

func (g *gitSource) auth() (transport.AuthMethod, error) {
	switch {
	case g.opts.TokenFile != "":
		b, err := os.ReadFile(g.opts.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("read git token file: %w", err)
		}
		return &githttp.BasicAuth{Username: g.opts.TokenUser, Password: strings.TrimSpace(string(b))}, nil
	case g.opts.SSHKeyFile != "":
		user := "git"
		if u, err := url.Parse(g.opts.URL); err == nil && u.User != nil && u.User.Username() != "" {
			user = u.User.Username()
		}
		keys, err := gitssh.NewPublicKeysFromFile(user, g.opts.SSHKeyFile, "")
		if err != nil {
			return nil, fmt.Errorf("read git SSH key file: %w", err)
		}
		cb, err := gitssh.NewKnownHostsCallback(g.opts.KnownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("read known_hosts file: %w", err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	}
	return nil, nil
}

func (g *gitSource) Load(ctx context.Context) (*Set, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	defer cancel()
	auth, err := g.auth()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, g, err)
	}
	commit, err := g.fetch(ctx, auth)
	if errors.Is(err, errLocal) {
		// The remote answered but the cached clone could not take the fetch (a shallow
		// history broken by a force-push, a corrupt cache): start from a fresh clone.
		if rmErr := os.RemoveAll(g.repoDir); rmErr == nil {
			commit, err = g.fetch(ctx, auth)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, g, err)
	}
	files, err := g.readCommit(commit)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: commit %s: %w", ErrUnavailable, g, commit.Hash, err)
	}
	return buildSet(files, g.opts.SpreadFraction, g.opts.Policy, g.String(), commit.Hash.String()), nil
}

// errLocal marks a fetch failure after the remote was reached.
var errLocal = errors.New("local clone")

// fetch brings the ref's commit into the cache (depth 1) and returns it.
func (g *gitSource) fetch(ctx context.Context, auth transport.AuthMethod) (*object.Commit, error) {
	repo, err := git.PlainOpen(g.repoDir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		if err := os.MkdirAll(g.repoDir, 0o700); err != nil {
			return nil, fmt.Errorf("create cache dir: %w", err)
		}
		repo, err = git.PlainInit(g.repoDir, true)
		if err == nil {
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{g.opts.URL}})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: open cache %s: %w", errLocal, g.repoDir, err)
	}
	remote, err := repo.Remote("origin")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errLocal, err)
	}
	if cfg := remote.Config(); len(cfg.URLs) != 1 || cfg.URLs[0] != g.opts.URL {
		return nil, fmt.Errorf("%w: cache %s belongs to another URL", errLocal, g.repoDir)
	}

	var spec config.RefSpec
	if shaRe.MatchString(g.opts.Ref) {
		spec = config.RefSpec(g.opts.Ref + ":" + string(targetRef))
	} else {
		refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
		if err != nil {
			return nil, fmt.Errorf("list remote refs: %w", err)
		}
		src, err := matchRef(refs, g.opts.Ref)
		if err != nil {
			return nil, err
		}
		spec = config.RefSpec("+" + string(src) + ":" + string(targetRef))
	}
	err = repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{spec},
		Depth: 1, Auth: auth, Tags: git.NoTags, Force: true})
	if errors.Is(err, git.ErrExactSHA1NotSupported) {
		// The server cannot serve a commit by SHA: fetch every branch and tag, then look it up.
		err = repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", Auth: auth, Force: true, Tags: git.AllTags,
			RefSpecs: []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*"}})
		if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
			err = repo.Storer.SetReference(plumbing.NewHashReference(targetRef, plumbing.NewHash(g.opts.Ref)))
		}
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if ctx.Err() != nil || isNetworkErr(err) {
			return nil, fmt.Errorf("fetch %s: %w", g.opts.Ref, err)
		}
		return nil, fmt.Errorf("%w: fetch %s: %w", errLocal, g.opts.Ref, err)
	}
	ref, err := repo.Reference(targetRef, true)
	if err != nil {
		return nil, fmt.Errorf("%w: resolve %s: %w", errLocal, g.opts.Ref, err)
	}
	hash := ref.Hash()
	if tag, err := repo.TagObject(hash); err == nil { // annotated tag: peel to its commit
		c, err := tag.Commit()
		if err != nil {
			return nil, fmt.Errorf("tag %s does not point at a commit: %w", g.opts.Ref, err)
		}
		return c, nil
	}
	c, err := repo.CommitObject(hash)
	if err != nil {
		return nil, fmt.Errorf("%w: commit %s: %w", errLocal, hash, err)
	}
	return c, nil
}

// isNetworkErr tells remote-side failures (kept as "unavailable") from a broken local cache
// (worth a fresh clone).
func isNetworkErr(err error) bool {
	return errors.Is(err, transport.ErrRepositoryNotFound) || errors.Is(err, transport.ErrAuthenticationRequired) ||
		errors.Is(err, transport.ErrAuthorizationFailed) || errors.Is(err, transport.ErrEmptyRemoteRepository) ||
		errors.Is(err, git.NoMatchingRefSpecError{}) || strings.Contains(err.Error(), "connection refused") ||
		strings.Contains(err.Error(), "no such host") || strings.Contains(err.Error(), "timeout")
}

// matchRef finds the remote reference a short name means: a branch first, then a tag.
func matchRef(refs []*plumbing.Reference, name string) (plumbing.ReferenceName, error) {
	candidates := []plumbing.ReferenceName{plumbing.NewBranchReferenceName(name), plumbing.NewTagReferenceName(name)}
	if strings.HasPrefix(name, "refs/") {
		candidates = []plumbing.ReferenceName{plumbing.ReferenceName(name)}
	}
	for _, c := range candidates {
		for _, r := range refs {
			if r.Name() == c {
				return c, nil
			}
		}
	}
	return "", fmt.Errorf("ref %q is neither a branch nor a tag of the remote", name)
}

// readCommit reads the hunt files under opts.Path of a commit's tree.
func (g *gitSource) readCommit(c *object.Commit) ([]rawFile, error) {
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	if g.opts.Path != "" {
		if tree, err = tree.Tree(g.opts.Path); err != nil {
			return nil, fmt.Errorf("path %q: %w", g.opts.Path, err)
		}
	}
	var files []rawFile
	err = tree.Files().ForEach(func(f *object.File) error {
		if !isHuntFile(f.Name) || f.Mode == filemode.Symlink || f.Mode == filemode.Submodule {
			return nil
		}
		for _, part := range strings.Split(f.Name, "/") {
			if hidden(part) {
				return nil
			}
		}
		if f.Size > maxFileSize {
			files = append(files, rawFile{rel: f.Name, problem: fmt.Sprintf("file is %d bytes; a hunt file may be at most %d", f.Size, maxFileSize)})
			return nil
		}
		r, err := f.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		files = append(files, rawFile{rel: f.Name, data: data})
		return nil
	})
	return files, err
}

// checkGitURL refuses a git URL carrying credentials: any user part on http(s) (a token there
// is the common mistake), a password on any scheme, and any query string or fragment. A user name alone is fine for ssh
// (ssh://git@host/… and the scp-like git@host:path). The URL is never quoted in the error,
// and so never reaches a log line or hunt_publish.source.
func checkGitURL(raw string) error {
	refuse := errors.New("configsrc: the git URL carries credentials in its user part; remove them and give the token with --git-token-file (or an SSH key with --git-ssh-key-file)")
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			if strings.Contains(raw, "@") {
				return refuse
			}
			return errors.New("configsrc: the git URL does not parse; URL-encode special characters")
		}
		if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			// A git remote needs neither; a token in ?access_token= would be printed and stored.
			return errors.New("configsrc: the git URL has a query string or fragment, which a git remote does not need (a token there would be logged); remove it and give the token with --git-token-file")
		}
		if u.User == nil {
			return nil
		}
		_, hasPassword := u.User.Password()
		switch strings.ToLower(u.Scheme) {
		case "ssh", "git+ssh", "ssh+git":
			if !hasPassword {
				return nil
			}
		}
		return refuse
	}
	// scp-like user@host:path, or a local path.
	if at := strings.Index(raw, "@"); at >= 0 {
		if colon := strings.Index(raw, ":"); colon >= 0 && colon < at {
			return refuse // user:password@host:path
		}
	}
	return nil
}
