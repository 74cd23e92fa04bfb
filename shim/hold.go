package shim

import (
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// entry is the state of one (query, canonical params): the last good value and whether the shim
// is holding it. All fields are guarded by the cache's mutex.
type entry struct {
	query  *Query
	params string // canonical, for logs and metric labels

	value  float64
	good   bool
	goodAt time.Time

	holding     bool
	reason      string
	since       time.Time // holding started
	failedAt    time.Time // last failure, for the retry backoff
	staleLogged bool
	lastUsed    time.Time
}

// answer is what one request gets.
type answer struct {
	Value  float64
	Held   bool
	Cold   bool      // held with no good value yet: cold_hold
	Reason string    // why held
	GoodAt time.Time // when the held value was read; zero when cold
	Stale  bool      // held past max_stale
}

// cache keeps one entry per (query, canonical params). The entry of a query without
// parameters (the backlog KEDA scales on) is never evicted: there is one per such query in the
// catalogue, so they are bounded without a cap, and no request can push them out. Entries of
// parameterised queries, whose values come from whoever sends requests, are capped per query
// and in all; a full query evicts only its own entries, so a flood of one query's parameter
// values cannot touch another query's.
type cache struct {
	mu       sync.Mutex
	entries  map[string]*entry
	perQuery map[string]int // parameterised entries of each query
	params   int            // parameterised entries in all
	max      int            // bound on params
	maxQuery int            // bound on each perQuery
	// logged is when each query last logged each holding edge above Debug (edgeLevel).
	logged map[string]time.Time
}

func newCache(max, maxQuery int) *cache {
	return &cache{entries: map[string]*entry{}, perQuery: map[string]int{}, max: max, maxQuery: min(max, maxQuery),
		logged: map[string]time.Time{}}
}

// edgeLogEvery bounds how often one query logs holding edges above Debug: a caller that sends
// a new parameter value with every request, during an outage, must not turn each into a log line.
const edgeLogEvery = time.Minute

// edgeLevel is the level of edge ("query/started", …) at now (c.mu held): level the first
// time in edgeLogEvery, Debug after that.
func (c *cache) edgeLevel(edge string, now time.Time, level slog.Level) slog.Level {
	if last, ok := c.logged[edge]; ok && now.Sub(last) < edgeLogEvery {
		return slog.LevelDebug
	}
	c.logged[edge] = now
	return level
}

// canonicalParams renders params sorted by name, URL-escaped, so that equal requests share an
// entry whatever their order.
func canonicalParams(params map[string]string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(k))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(params[k]))
	}
	return b.String()
}

func cacheKey(q *Query, canon string) string { return q.Name + "?" + canon }

// pinned tells an entry that is never evicted: its query takes no parameters.
func (e *entry) pinned() bool { return len(e.query.Params) == 0 }

// get returns the entry of key, creating it, and evicting first when its query, or the cache,
// is full (evictLocked says which entry goes).
func (c *cache) get(key string, q *Query, canon string, now time.Time) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		e = &entry{query: q, params: canon}
		if !e.pinned() {
			switch {
			case c.perQuery[q.Name] >= c.maxQuery:
				c.evictLocked(q.Name)
			case c.params >= c.max:
				c.evictLocked("")
			}
			c.perQuery[q.Name]++
			c.params++
		}
		c.entries[key] = e
	}
	e.lastUsed = now
	return e
}

// evictLocked drops one parameterised entry, of query (every query when ""): the least
// recently used that is not holding; else, as a held value protects a scaling decision, the
// least recently used cold hold (no good value yet: a value first asked for during an outage,
// like a flood of made-up parameters); else the least recently used.
func (c *cache) evictLocked(query string) {
	rank := func(e *entry) int {
		switch {
		case !e.holding:
			return 0
		case !e.good:
			return 1
		}
		return 2
	}
	var victimKey string
	var victim *entry
	for k, e := range c.entries {
		if e.pinned() || (query != "" && e.query.Name != query) {
			continue
		}
		if victim == nil || rank(e) < rank(victim) || (rank(e) == rank(victim) && e.lastUsed.Before(victim.lastUsed)) {
			victimKey, victim = k, e
		}
	}
	if victim == nil {
		return
	}
	delete(c.entries, victimKey)
	c.perQuery[victim.query.Name]--
	c.params--
}

// heldAnswerLocked is the answer while holding: the last good value, or cold_hold.
func (e *entry) heldAnswerLocked(now time.Time) answer {
	a := answer{Held: true, Reason: e.reason}
	if e.good {
		a.Value, a.GoodAt = e.value, e.goodAt
		a.Stale = now.Sub(e.goodAt) > e.query.MaxStale
	} else {
		a.Value, a.Cold = e.query.ColdHold, true
		a.Stale = now.Sub(e.since) > e.query.MaxStale
	}
	return a
}

// held summarises the entries being held per (query, cold), for the age and stale gauges:
// one series per query and kind, never per parameter value (values come from requests, and
// would make the metrics as large as the cache). age is the oldest held value's.
func (c *cache) held(now time.Time) []heldInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	type key struct {
		query string
		cold  bool
	}
	byKey := map[key]*heldInfo{}
	for _, e := range c.entries {
		if !e.holding {
			continue
		}
		age := now.Sub(e.since)
		if e.good {
			age = now.Sub(e.goodAt)
		}
		k := key{e.query.Name, !e.good}
		h := byKey[k]
		if h == nil {
			h = &heldInfo{query: k.query, cold: k.cold}
			byKey[k] = h
		}
		h.age = max(h.age, age)
		h.stale = h.stale || age > e.query.MaxStale
	}
	out := make([]heldInfo, 0, len(byKey))
	for _, h := range byKey {
		out = append(out, *h)
	}
	return out
}

type heldInfo struct {
	query       string
	cold, stale bool
	age         time.Duration // the oldest held value's
}
