package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/urfave/cli/v2"

	"github.com/hunt-runner/hunt-runner/configsrc"
)

// defaultDiffDays is how far back diff previews by default: a week of history.
const defaultDiffDays = 7

func diffCommand() *cli.Command {
	return &cli.Command{
		Name:      "diff",
		Usage:     "preview each changed hunt old and new over recent history and report the findings a change adds and removes",
		ArgsUsage: "[DIR]",
		Description: "Compares the hunts in DIR (default --hunts-dir, else .) with those at --base REF (a git\n" +
			"revision of the repository DIR is in: main, origin/main, a commit) or in --base-dir DIR. Each\n" +
			"hunt whose definition changed is previewed old and new over the last --days days (as preview\n" +
			"does: window by window, on the configured ClickHouse, as --hunts-user, writing nothing), and the\n" +
			"findings the change adds and removes are reported, as Markdown for a pull-request comment or as\n" +
			"--json. New hunts are previewed and reported as new; deleted (or disabled) ones as deleted.\n" +
			"Findings are compared over the whole range, not window by window.\n\n" +
			"Exit status: 0 reported (changes or not), 1 error (a hunt that could not be previewed is\n" +
			"reported, and exits 1), 2 usage. In CI: hunt-runner diff --base origin/main hunts/ > diff.md",
		Flags: concat([]cli.Flag{
			&cli.StringFlag{Name: "base", Usage: "git revision to compare with (branch, tag or commit of the repository DIR is in)"},
			&cli.StringFlag{Name: "base-dir", Usage: "directory of the hunts to compare with, instead of --base"},
			&cli.IntFlag{Name: "days", Value: defaultDiffDays, Usage: "days of history to preview, ending now"},
			&cli.BoolFlag{Name: "json", EnvVars: envFor("json"), Usage: "print the report as JSON instead of Markdown"},
		}, previewFlags(), interactiveClickhouseFlags(), huntsFlags(), sourceFlags()),
		Action: diffAction,
	}
}

func diffAction(c *cli.Context) error {
	log := newLogger(c)
	dir := c.String("hunts-dir")
	switch {
	case c.NArg() > 1:
		return cli.Exit("diff takes one DIR", exitUsage)
	case c.NArg() == 1:
		dir = c.Args().First()
	case dir == "":
		dir = "."
	}
	base, baseDir := c.String("base"), c.String("base-dir")
	if (base == "") == (baseDir == "") {
		return cli.Exit("give --base REF (a git revision) or --base-dir DIR, one of them", exitUsage)
	}
	if c.Int("days") < 1 {
		return cli.Exit("--days must be at least 1", exitUsage)
	}
	if base != "" {
		staged, err := stageRevision(dir, base)
		if err != nil {
			return cli.Exit(fmt.Sprintf("--base %s: %v", base, err), exitUsage)
		}
		defer os.RemoveAll(staged)
		baseDir = staged
	}
	load := func(d string) (*configsrc.Set, error) {
		src, err := huntSourceWith(c, log, d, -1)
		if err != nil {
			return nil, err
		}
		set, err := src.Load(c.Context)
		if err != nil {
			return nil, cli.Exit(fmt.Sprintf("read hunts in %s: %v", d, err), exitError)
		}
		return set, nil
	}
	old, err := load(baseDir)
	if err != nil {
		return err
	}
	cur, err := load(dir)
	if err != nil {
		return err
	}
	p, closeConns, err := newPreviewer(c, log)
	if err != nil {
		return err
	}
	defer closeConns()
	to := time.Now().UTC().Truncate(time.Second)
	from := to.Add(-time.Duration(c.Int("days")) * 24 * time.Hour)
	d := p.Diff(c.Context, old, cur, from, to)
	for i := range d.Problems {
		d.Problems[i].File = filepath.Join(dir, filepath.FromSlash(d.Problems[i].File))
	}
	for i := range d.Hunts {
		d.Hunts[i].File = filepath.ToSlash(d.Hunts[i].File)
	}
	if c.Bool("json") {
		if err := d.WriteJSON(c.App.Writer); err != nil {
			return err
		}
	} else {
		d.WriteMarkdown(c.App.Writer)
	}
	for _, h := range d.Hunts {
		if h.Error != "" {
			return cli.Exit("", exitError)
		}
	}
	return nil
}

// stageRevision writes the hunt files of dir as they are at rev, in the git repository dir is
// in, into a temporary directory. A dir that did not exist at rev gives an empty directory:
// every hunt is new.
func stageRevision(dir, rev string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	repo, err := git.PlainOpenWithOptions(abs, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return "", fmt.Errorf("%s is not in a git repository: %w", dir, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", err
	}
	root, err := filepath.EvalSymlinks(wt.Filesystem.Root())
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return "", err
	}
	hash, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", fmt.Errorf("not a revision of %s: %w", root, err)
	}
	commit, err := repo.CommitObject(*hash)
	if err != nil {
		return "", err
	}
	tree, err := commit.Tree()
	if err != nil {
		return "", err
	}
	out, err := os.MkdirTemp("", "hunt-runner-diff-")
	if err != nil {
		return "", err
	}
	if rel != "." {
		sub, err := tree.Tree(filepath.ToSlash(rel))
		if errors.Is(err, object.ErrDirectoryNotFound) {
			return out, nil
		}
		if err != nil {
			os.RemoveAll(out)
			return "", err
		}
		tree = sub
	}
	err = tree.Files().ForEach(func(f *object.File) error {
		ext := path.Ext(f.Name)
		if f.Mode != filemode.Regular && f.Mode != filemode.Executable || (ext != ".yaml" && ext != ".yml") || configsrc.IsTestFile(f.Name) {
			return nil
		}
		r, err := f.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		p := filepath.Join(out, filepath.FromSlash(f.Name))
		if !strings.HasPrefix(p, out+string(filepath.Separator)) {
			return nil // a name that climbs out (git does not write these; be sure)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		w, err := os.Create(p)
		if err != nil {
			return err
		}
		if _, err := io.Copy(w, io.LimitReader(r, 2<<20)); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	})
	if err != nil {
		os.RemoveAll(out)
		return "", err
	}
	return out, nil
}
