package configsrc

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// CheckConcurrencyDefault is how many EXPLAIN AST requests (batches, CheckBatchDefault) a loader
// has in flight when it checks a load: a server with cores to spare parses them side by side.
const CheckConcurrencyDefault = 8

// CheckBatchDefault is how many queries (hunts' and their where: checks) one EXPLAIN AST asks
// the server to parse together when a loader checks a load: on the embedded engine a request
// costs about 2 ms, so a cold start of 100,000 new hunts is about 400 requests instead of
// 100,000, and what is left is each query's parse in the batch wrapper (batchFindingsQuery).
const CheckBatchDefault = 256

// checkBatchBytes bounds a batch's statement under the server's default max_query_size (256 KiB),
// so that a batch of long hunts is split before the server refuses it as too long.
const checkBatchBytes = 240 << 10

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
	batch       int // queries per EXPLAIN AST: 0 is CheckBatchDefault, 1 one statement each
	// batchWrap is the statement a batch parses for a query: nil is batchFindingsQuery. The
	// benchmark sets FindingsQuery to measure the two side by side, the tests a wrapper whose
	// skeleton differs.
	batchWrap func(query string) string
}

// verdicts checks every hunt of hunts not in known (verdicts by hash from the previous load)
// and not accepted in cache, and returns the verdict of each hunt by hash (nil: accepted). The
// wrapper's reference tree is asked once, and the hunts' queries are parsed in batches
// (queryVerdicts), concurrently.
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
	var queries []string
	for _, h := range todo {
		queries = append(queries, h.Query)
		// The where: checks, listed by the very walk that judges them below.
		_ = exceptionsVerdict(h, func(q string) error { queries = append(queries, q); return nil })
	}
	byQuery := c.queryVerdicts(ctx, queries, ref)
	lookup := func(q string) error { return byQuery[q] }
	var accepted []string
	for _, h := range todo {
		err := lookup(h.Query)
		if err == nil {
			err = exceptionsVerdict(h, lookup)
		}
		out[h.Hash] = err
		if err == nil {
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

// queryVerdicts returns, by query, the verdict checkQueryWithServer gives each distinct query of
// queries in a statement of its own, asking the server to parse up to c.batch of them in one
// EXPLAIN AST (checkBatch), CheckConcurrencyDefault batches at a time.
func (c *serverChecker) queryVerdicts(ctx context.Context, queries []string, ref *astNode) map[string]error {
	out := make(map[string]error, len(queries))
	var todo []string
	for _, q := range queries {
		if _, dup := out[q]; dup {
			continue
		}
		out[q] = identifiersReadable(q) // what the server could not print on one line never joins a batch
		if out[q] == nil {
			todo = append(todo, q)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, cmp.Or(c.concurrency, CheckConcurrencyDefault))
	for batch := range batches(todo, cmp.Or(c.batch, CheckBatchDefault)) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			v := c.checkBatch(ctx, batch, ref, checkBatchHints)
			mu.Lock()
			defer mu.Unlock()
			for i, q := range batch {
				out[q] = v[i]
			}
		}()
	}
	wg.Wait()
	return out
}

// batches cuts queries into runs of at most size queries whose batch statement stays within
// checkBatchBytes (a longer query is a run of its own).
func batches(queries []string, size int) iter.Seq[[]string] {
	return func(yield func([]string) bool) {
		start, bytes := 0, 0
		for i, q := range queries {
			n := len(FindingsQuery(q)) + batchItemOverhead
			if i > start && (i-start == size || bytes+n > checkBatchBytes) {
				if !yield(queries[start:i]) {
					return
				}
				start, bytes = i, 0
			}
			bytes += n
		}
		if start < len(queries) {
			yield(queries[start:])
		}
	}
}

// batchItemOverhead is a generous bound on what batchStatement adds around each query.
const batchItemOverhead = 64

// checkBatch returns the verdict of each query as checkQueryWithServer would give it alone. The
// server parses them in one statement (batchStatement), each in the batch wrapper
// (batchFindingsQuery), after the wrapper's skeleton (the batch wrapper around a trivial query);
// a query whose place in the tree is its own and reads as the skeleton around a hunt's subtree is
// judged there (judgeHunt: the same subtree, the same verdict), any other alone. The batch is
// trusted only if its skeleton parses, from FROM on, as ref, the full wrapper's tree, does
// (sameSkeleton); else every query is asked alone. A batch that fails to parse has the query its
// error is placed in asked alone and the others again without it, up to hints times; a batch
// that still fails, or whose tree does not split into one place per query between its markers,
// is cut in two and each half asked again, down to single queries asked alone. So one bad query
// never refuses its neighbours, and every refusal the server's parser makes is placed as alone.
// A failure to reach the server is every query's, as it would be alone.
func (c *serverChecker) checkBatch(ctx context.Context, queries []string, ref *astNode, hints int) []error {
	out := make([]error, len(queries))
	if len(queries) == 1 {
		_, out[0] = checkQueryWithServer(ctx, c.conn, queries[0], c.policy, ref)
		return out
	}
	wrap := c.batchWrap
	if wrap == nil {
		wrap = batchFindingsQuery
	}
	stmt, marker, ends := batchStatement(queries, wrap)
	tree, err := explain(ctx, c.conn, stmt)
	var places []*astNode
	if err == nil {
		places = splitBatch(tree, marker, len(queries)+1)
	}
	if err != nil && !isServerException(err) && !errors.Is(err, ErrQueryRefused) {
		for i := range out {
			out[i] = fmt.Errorf("ask the server to parse the query: %w", err)
		}
		return out
	}
	if places == nil {
		if k := culprit(err, ends); k >= 0 && hints > 0 {
			_, alone := checkQueryWithServer(ctx, c.conn, queries[k], c.policy, ref)
			rest := slices.Concat(queries[:k], queries[k+1:])
			return slices.Insert(c.checkBatch(ctx, rest, ref, hints-1), k, alone)
		}
		half := len(queries) / 2
		return append(c.checkBatch(ctx, queries[:half], ref, hints), c.checkBatch(ctx, queries[half:], ref, hints)...)
	}
	var skeleton *astNode
	if places[0].label == "Subquery" && len(places[0].kids) == 1 && sameSkeleton(ref, places[0].kids[0]) {
		skeleton = places[0].kids[0]
	}
	for i, q := range queries {
		if p := places[i+1]; skeleton != nil && p.label == "Subquery" && len(p.kids) == 1 {
			if sub, err := matchWrapper(skeleton, p.kids[0]); err == nil {
				out[i] = judgeHunt(ctx, c.conn, FindingsQuery(q), sub, c.policy)
				continue
			}
		}
		_, out[i] = checkQueryWithServer(ctx, c.conn, q, c.policy, ref)
	}
	return out
}

// checkBatchHints is how many queries a batch's parse errors may name and have taken out before
// the rest is cut in two: taking out the one query an error is in costs one request more, where
// cutting in two costs about two for each halving; but a batch of many bad queries, or one whose
// error lands past the query that left a bracket or comment open, is better cut in two.
const checkBatchHints = 4

// culprit is the index of the query holding the position a batch's parse error names (ends are
// the offsets in the statement where each query's part ends), or -1.
func culprit(err error, ends []int) int {
	if err == nil || !isServerException(err) {
		return -1
	}
	m := failedAtRe.FindStringSubmatch(serverMessage(err))
	if m == nil {
		return -1
	}
	pos, convErr := strconv.Atoi(m[1])
	off := pos - 1 - len(explainPrefix) // the position counts from 1, in what was sent
	if convErr != nil || off < 0 {
		return -1
	}
	// ends[0] is the skeleton's: an error there is no query's.
	if k, _ := slices.BinarySearch(ends, off+1); k > 0 && k < len(ends) {
		return k - 1
	}
	return -1
}

// batchStatement is one SELECT of the skeleton (wrap, batchFindingsQuery, around
// batchSkeletonQuery) and then every query's batch statement, each as a scalar subquery, each
// between two markers: string literals holding a random nonce, which no hunt can know and so
// none can forge. Whatever a query's text does to the brackets, strings or comments around it,
// the server's tree has each marker in its place only if the text between two markers was read
// as one expression of its own; marker(0) names the literal before the skeleton, marker(i+1) the
// one before query i (and marker(len(queries)+1) the last), ends[0] is the offset where the
// skeleton's part ends and ends[i+1] where query i's does.
func batchStatement(queries []string, wrap func(string) string) (stmt string, marker func(int) string, ends []int) {
	nonce := rand.Text()
	marker = func(i int) string { return "'hr_check_" + nonce + "_" + strconv.Itoa(i) + "'" }
	var b strings.Builder
	b.WriteString("SELECT ")
	ends = make([]int, len(queries)+1)
	for i, q := range slices.Concat([]string{batchSkeletonQuery}, queries) {
		b.WriteString(marker(i) + ", (\n" + wrap(q) + "\n), ")
		ends[i] = b.Len()
	}
	b.WriteString(marker(len(queries) + 1))
	return b.String(), marker, ends
}

// batchSkeletonQuery is the trivial query of the skeleton, the same the full wrapper's reference
// tree is asked around (referenceTree), so that the two trees can be compared node for node.
const batchSkeletonQuery = "SELECT 1"

// batchFindingsQuery is the statement a batch parses for a query: FindingsQuery's text from its
// last "FROM (" to its end, the query's own text and everything after it byte for byte, cut out
// of FindingsQuery itself, behind a select list of one column instead of the wrapper's. The
// wrapper's select list was most of a hunt's parse: measured side by side in one run, in
// batches of 256, 1.32 ms a hunt in FindingsQuery, 0.48 in this, 0.24 bare.
//
// Why a breakout shows in it exactly as in FindingsQuery: what the server makes of the query's
// text depends only on what the lexer and parser carry to the query's first byte, and the text
// from there on. The lexer reads every token from its own start, looking back only at the
// previous token (whether a "." before digits is a dot, after a closing bracket or a name, or
// starts a number), which is the same "(" in both; so the tokens from "FROM (" to the end, the
// query's and the wrapper's closing ones, are the same tokens. The parser reaches that FROM in both as the FROM of an outer SELECT whose SELECT
// keyword came first, after a select list that ends in "AS hr_before" and has no DISTINCT,
// DISTINCT ON or TOP: ParserSelectQuery carries nothing else of a SELECT's head into its later
// clauses (not the WITH list, not the select list's expressions), and those three only ever
// refuse or rewrite what follows. So it reads the same tokens with the same rules into the same
// clauses: the query's subtree and everything outside it from FROM on. The only other
// difference is the statement's length and depth, bounded by max_query_size, max_parser_depth
// and max_parser_backtracks, which turn a parse into an error (then asked alone, in
// FindingsQuery), never into another tree. The skeleton checks the premise on the server
// itself, once per batch (sameSkeleton), and a query that does not read as the skeleton around
// one subquery is asked alone, in FindingsQuery, as before.
func batchFindingsQuery(query string) string {
	return batchHead + TrimQuery(query) + findingsTail
}

var (
	findingsHead, findingsTail, _ = strings.Cut(FindingsQuery("\x00"), "\x00")
	// batchHead keeps the hr_before alias before FROM, the last thing FindingsQuery's select list
	// ends in.
	batchHead = "SELECT 0 AS hr_before" + findingsHead[batchHeadFrom(findingsHead):]
)

// batchHeadFrom is where FindingsQuery's head reaches the FROM that opens the query's
// subquery, after the select list's last alias.
func batchHeadFrom(head string) int {
	i := strings.LastIndex(head, " AS hr_before\nFROM (\n")
	if i < 0 || !strings.HasSuffix(head, "\nFROM (\n") || strings.Count(head[i:], "\n") != 2 {
		panic("FindingsQuery no longer ends its select list in AS hr_before before FROM (: change batchFindingsQuery with it")
	}
	return i + len(" AS hr_before")
}

// sameSkeleton reports whether the batch's skeleton tree parses, from the outer SELECT's FROM
// on, node for node as full, the server's tree of FindingsQuery around the same trivial query:
// the same outer SELECT, whose last children (the FROM with its subquery, and the clauses the
// wrapper closes the query with) are the same trees, and one child before them, its select
// list. So the text the two share is read into the same clauses on this server.
func sameSkeleton(full, skeleton *astNode) bool {
	f, s := outerSelect(full), outerSelect(skeleton)
	if f == nil || s == nil || len(s.kids) < 2 || len(f.kids) < len(s.kids) || f.label != s.label {
		return false
	}
	return s.kids[0].kind() == "ExpressionList" && slices.EqualFunc(f.kids[len(f.kids)-len(s.kids)+1:], s.kids[1:], sameTree)
}

// outerSelect is the SelectQuery of a tree that is one SELECT (no UNION), or nil.
func outerSelect(n *astNode) *astNode {
	for _, label := range []string{"SelectWithUnionQuery", "ExpressionList"} {
		if n.label != label || len(n.kids) != 1 {
			return nil
		}
		n = n.kids[0]
	}
	if n.label != "SelectQuery" {
		return nil
	}
	return n
}

func sameTree(a, b *astNode) bool {
	return a.label == b.label && slices.EqualFunc(a.kids, b.kids, sameTree)
}

// splitBatch returns each query's place in the tree of a batchStatement of n queries (the node
// between its two markers), or nil unless the tree is one SELECT of exactly the markers, in
// order, each alone and with one node between each two.
func splitBatch(tree *astNode, marker func(int) string, n int) []*astNode {
	list := tree
	for _, label := range []string{"SelectWithUnionQuery", "ExpressionList", "SelectQuery"} {
		if list.label != label || len(list.kids) != 1 {
			return nil
		}
		list = list.kids[0]
	}
	if list.label != "ExpressionList" || len(list.kids) != 2*n+1 {
		return nil
	}
	places := make([]*astNode, n)
	for i, k := range list.kids {
		if i%2 == 1 {
			places[i/2] = k
		} else if k.label != "Literal "+marker(i/2) || len(k.kids) != 0 {
			return nil
		}
	}
	return places
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
