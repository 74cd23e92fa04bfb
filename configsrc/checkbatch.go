package configsrc

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// CheckConcurrencyDefault is how many hunts a loader has the server parse at once when it
// checks a load (one EXPLAIN AST each: the server parses one statement per request).
const CheckConcurrencyDefault = 8

// checkRevision names the rules of CheckWithServer. Change it whenever a change to the check
// could refuse a query it used to accept: every cached "passed" is then asked again.
const checkRevision = "server-check/1"

// CheckCache remembers which hunt revisions (Hunt.Hash) the server's check accepted under a
// scope: the digest of everything else the verdict depends on (CheckScope). A runner with one
// skips the check of definitions already accepted under the same scope, so a restart with
// 100,000 unchanged hunts parses none of them. Only acceptances are kept; a refusal is asked
// again. store.Store implements it over hunt_check.
type CheckCache interface {
	// CheckedHunts is the set of hunt hashes recorded as accepted under scope.
	CheckedHunts(ctx context.Context, scope string) (map[string]bool, error)
	// RecordChecked records hashes as accepted under scope.
	RecordChecked(ctx context.Context, scope string, hashes []string) error
}

// WithCheckCache has a loader built WithServerCheck skip the hunts c holds as accepted under
// the current scope, and record the ones it accepts. A cache that cannot be read or written is
// logged and the hunts are checked: the cache only ever saves work.
func WithCheckCache(c CheckCache) LoaderOption {
	return func(l *Loader) { l.cache = c }
}

// CheckScope is the digest a cached verdict is valid under: the check's revision, the server's
// version (its parser is the authority, and a new one may parse differently), the policy, the
// default allowlists compiled into this binary and the wrapper every query is checked inside.
// A verdict is reused only for the same Hunt.Hash under the same scope, so a changed hunt, a
// changed --allow-* flag, another coordination database or an upgraded server is checked
// again.
func CheckScope(serverVersion string, p Policy) string {
	b, err := json.Marshal(struct {
		Revision, Server, Wrapper, Rules string
		Policy                           Policy
		Functions, TableFunctions        []string
	}{checkRevision, serverVersion, FindingsQuery("\x00"), compiledRules, p, DefaultFunctions(), DefaultTableFunctions()})
	if err != nil {
		panic(err) // plain strings and slices always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// compiledRules prints the check's other built-in lists (fmt prints maps sorted), so that a
// binary whose rules differ never reuses another's verdicts.
var compiledRules = fmt.Sprint(allowedSettings, offServer, leftOut, selectKinds, hiddenKinds, aggregateCombinators,
	syntaxFunctions, MaxGeneratedRows)

// serverChecker is the check a loader applies (WithServerCheck).
type serverChecker struct {
	conn        driver.Conn
	policy      Policy
	concurrency int
}

// verdicts checks every hunt of hunts not in known (verdicts by hash from the previous load)
// and not accepted in cache, and returns the verdict of each hunt by hash (nil: accepted). The
// wrapper's reference tree is asked once, and the hunts are parsed concurrently.
func (c *serverChecker) verdicts(ctx context.Context, hunts []hunt.Hunt, known map[string]error, cache CheckCache, log *slog.Logger) map[string]error {
	out := make(map[string]error, len(hunts))
	var todo []hunt.Hunt
	for _, h := range hunts {
		if err, seen := known[h.Hash]; seen {
			out[h.Hash] = err
			continue
		}
		if _, queued := out[h.Hash]; !queued {
			out[h.Hash] = nil // placeholder until checked below
			todo = append(todo, h)
		}
	}
	if len(todo) == 0 {
		return out
	}
	scope := ""
	if cache != nil {
		scope = c.scope(ctx, log)
	}
	if scope != "" {
		passed, err := cache.CheckedHunts(ctx, scope)
		if err != nil {
			log.Warn("cannot read the hunts the server already accepted; checking every hunt", "error", err)
		}
		kept := todo[:0]
		for _, h := range todo {
			if !passed[h.Hash] {
				kept = append(kept, h)
			}
		}
		todo = kept
	}
	if len(todo) == 0 {
		return out
	}
	ref, err := referenceTree(ctx, c.conn)
	if err != nil {
		for _, h := range todo {
			out[h.Hash] = err
		}
		return out
	}
	results := make([]error, len(todo))
	var wg sync.WaitGroup
	sem := make(chan struct{}, cmp.Or(c.concurrency, CheckConcurrencyDefault))
	for i, h := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = checkWithServer(ctx, c.conn, h, c.policy, ref)
		}()
	}
	wg.Wait()
	var accepted []string
	for i, h := range todo {
		out[h.Hash] = results[i]
		if results[i] == nil {
			accepted = append(accepted, h.Hash)
		}
	}
	if scope != "" && len(accepted) > 0 {
		if err := cache.RecordChecked(ctx, scope, accepted); err != nil {
			log.Warn("cannot record the hunts the server accepted; the next start checks them again", "error", err)
		}
	}
	return out
}

// scope reads the server's version and returns the CheckScope, or "" (no cache this load)
// when the version cannot be read.
func (c *serverChecker) scope(ctx context.Context, log *slog.Logger) string {
	var version string
	if err := c.conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		log.Warn("cannot read the server's version; checking every hunt", "error", fmt.Errorf("read version(): %w", err))
		return ""
	}
	return CheckScope(version, c.policy)
}
