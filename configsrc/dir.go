package configsrc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hunt-runner/hunt-runner/schedule"
)

// Options configure a directory source (and the parsing shared with the git source).
type Options struct {
	// SpreadFraction spreads phase offsets over this share of each interval; 0 means
	// schedule.DefaultSpreadFraction. Must be in (0, 1] and equal in every command.
	SpreadFraction float64
	// Settle is how long a file must stay unchanged before it is trusted, so that a file being
	// written is never loaded half-written. A file that reads the same on two consecutive loads
	// is trusted at once. 0 means DefaultSettle; negative disables the check (one-shot reads
	// such as validate, where nothing is writing). Not used for ConfigMap volumes, whose ..data
	// swap is atomic.
	Settle time.Duration
	// Now is the clock used for Settle; nil means time.Now.
	Now func() time.Time
	// Policy is what hunt queries may use beyond plain table reads (checked offline here,
	// and by CheckWithServer with the same value).
	Policy Policy
}

// DefaultSettle is the default Options.Settle.
const DefaultSettle = 2 * time.Second

func (o *Options) normalise() error {
	if o.SpreadFraction == 0 {
		o.SpreadFraction = schedule.DefaultSpreadFraction
	}
	if err := schedule.ValidateSpreadFraction(o.SpreadFraction); err != nil {
		return err
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

type dirSource struct {
	dir  string
	opts Options

	mu   sync.Mutex
	seen map[string]seenFile // each file's content on the previous load, by path
}

// seenFile is a file's content hash and when this load sequence first saw that content.
type seenFile struct {
	sum   [32]byte
	since time.Time
}

// NewDir returns a source reading *.yaml and *.yml files under dir, recursively, skipping
// hidden entries. dir may itself be a symlink (git-sync swaps one) and may be a ConfigMap
// volume (read through its ..data link).
func NewDir(dir string, opts Options) (Source, error) {
	if dir == "" {
		return nil, errors.New("configsrc: directory is empty")
	}
	if err := opts.normalise(); err != nil {
		return nil, fmt.Errorf("configsrc: %w", err)
	}
	return &dirSource{dir: dir, opts: opts, seen: map[string]seenFile{}}, nil
}

func (d *dirSource) String() string { return "dir:" + d.dir }

func (d *dirSource) Load(ctx context.Context) (*Set, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		root, err := filepath.EvalSymlinks(d.dir)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, d.dir, err)
		}
		if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%w: %s is not a directory", ErrUnavailable, d.dir)
		}
		// A ConfigMap volume: every key is a symlink through ..data to a timestamped
		// directory the kubelet replaces in one rename. Reading the resolved target gives a
		// consistent snapshot; if it vanishes mid-read (a swap), start again.
		dataLink := filepath.Join(root, "..data")
		if fi, err := os.Lstat(dataLink); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(dataLink)
			if err != nil {
				lastErr = err // its target was replaced between the two calls
				continue
			}
			files, err := readTree(root, target, nil)
			if now, _ := filepath.EvalSymlinks(dataLink); now != target {
				// Swapped while reading: the old directory may have been half deleted.
				lastErr = fmt.Errorf("..data changed while reading")
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, d.dir, err)
			}
			return buildSet(files, d.opts.SpreadFraction, d.opts.Policy, d.String(), ""), nil
		}
		files, err := readTree(root, root, d.settled)
		if err != nil {
			lastErr = err
			continue
		}
		d.remember(files, d.opts.Now())
		if hasUnsettled(files) {
			// Typically a git-sync or editor write just happened: wait out Settle once and
			// read again, so one reload yields a clean set instead of a burst of problems.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(d.opts.Settle):
			}
			if again, err := readTree(root, root, d.settled); err == nil {
				files = again
				d.remember(files, d.opts.Now())
			}
		}
		return buildSet(files, d.opts.SpreadFraction, d.opts.Policy, d.String(), ""), nil
	}
	return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, d.dir, lastErr)
}

// remember records the content of every file read, for the settle rule.
func (d *dirSource) remember(files []rawFile, now time.Time) {
	seen := make(map[string]seenFile, len(files))
	for _, f := range files {
		if f.problem == "" || f.unsettled {
			seen[f.rel] = d.observe(f.rel, f.data, now)
		}
	}
	d.seen = seen
}

func (d *dirSource) observe(rel string, data []byte, now time.Time) seenFile {
	sum := sha256.Sum256(data)
	if prev, ok := d.seen[rel]; ok && prev.sum == sum {
		return prev
	}
	return seenFile{sum: sum, since: now}
}

// settled decides whether a file just read may be trusted: its modification time, or the
// moment this source first saw its current content, is at least Settle ago. The second rule
// copes with clocks that disagree (mtimes in the future); both fail only for a writer that
// pauses longer than Settle in the middle of a file.
func (d *dirSource) settled(rel string, data []byte, mod time.Time) bool {
	if d.opts.Settle < 0 {
		return true
	}
	now := d.opts.Now()
	if now.Sub(mod) >= d.opts.Settle {
		return true
	}
	return now.Sub(d.observe(rel, data, now).since) >= d.opts.Settle
}

// readTree reads every hunt file under root. settled, if non-nil, vets files that are not part
// of an atomic snapshot; an unsettled file is reported as a problem, never parsed. A symlinked
// file is read only when it resolves inside within (the resolved hunts directory): a link to a
// secret elsewhere would otherwise be parsed, and its content could reach a message.
func readTree(within, root string, settled func(rel string, data []byte, mod time.Time) bool) ([]rawFile, error) {
	var files []rawFile
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if p != root && hidden(e.Name()) {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if e.IsDir() || !isHuntFile(e.Name()) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if e.Type()&fs.ModeSymlink != 0 {
			// Follow symlinked files (ConfigMap keys, git-sync links), never directories.
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				return nil
			}
			resolved, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil // removed while walking
			}
			if !inside(within, resolved) {
				files = append(files, rawFile{rel: rel, problem: "symlink resolves outside the hunts directory; it is not read (link only to files inside it)"})
				return nil
			}
			p = resolved
		} else if !e.Type().IsRegular() {
			return nil
		}
		f, ok, err := readStable(p, rel)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !ok {
			files = append(files, f)
			return nil
		}
		if settled != nil {
			fi, err := os.Stat(p)
			if err != nil {
				return nil
			}
			if !settled(rel, f.data, fi.ModTime()) {
				f = rawFile{rel: rel, data: f.data, unsettled: true,
					problem: "file changed moments ago and may still be being written; it is read again on the next reload"}
			}
		}
		files = append(files, f)
		return nil
	})
	return files, err
}

// readStable reads a file whose size and modification time are the same before and after the
// read (retrying a few times), so a read racing a writer is caught.
func readStable(p, rel string) (rawFile, bool, error) {
	for i := 0; i < 3; i++ {
		before, err := os.Stat(p)
		if err != nil {
			return rawFile{}, false, err
		}
		if before.Size() > maxFileSize {
			return rawFile{rel: rel, problem: fmt.Sprintf("file is %d bytes; a hunt file may be at most %d", before.Size(), maxFileSize)}, false, nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return rawFile{}, false, err
		}
		after, err := os.Stat(p)
		if err != nil {
			return rawFile{}, false, err
		}
		if before.Size() == after.Size() && before.ModTime().Equal(after.ModTime()) && int64(len(data)) == after.Size() {
			return rawFile{rel: rel, data: bytes.Clone(data)}, true, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return rawFile{rel: rel, problem: "file kept changing while it was read; it is read again on the next reload"}, false, nil
}

func hasUnsettled(files []rawFile) bool {
	for _, f := range files {
		if f.unsettled {
			return true
		}
	}
	return false
}

// inside reports whether path p lies under dir (both resolved, absolute or not alike).
func inside(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
