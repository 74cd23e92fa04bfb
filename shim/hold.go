package shim

import (
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

// cache keeps one entry per (query, canonical params), bounded by max entries.
type cache struct {
	mu      sync.Mutex
	entries map[string]*entry
	max     int
}

func newCache(max int) *cache {
	return &cache{entries: map[string]*entry{}, max: max}
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

// get returns the entry of key, creating it; when the cache is full the least recently used
// entry that is not holding goes first (a held value is what protects the scaling decision).
func (c *cache) get(key string, q *Query, canon string, now time.Time) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		if len(c.entries) >= c.max {
			c.evictLocked()
		}
		e = &entry{query: q, params: canon}
		c.entries[key] = e
	}
	e.lastUsed = now
	return e
}

func (c *cache) evictLocked() {
	var oldestKey string
	var oldest *entry
	for k, e := range c.entries {
		if e.holding {
			continue
		}
		if oldest == nil || e.lastUsed.Before(oldest.lastUsed) {
			oldestKey, oldest = k, e
		}
	}
	if oldest == nil { // everything is holding: drop the least recently used anyway
		for k, e := range c.entries {
			if oldest == nil || e.lastUsed.Before(oldest.lastUsed) {
				oldestKey, oldest = k, e
			}
		}
	}
	delete(c.entries, oldestKey)
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

// held lists the entries being held, for the age and stale gauges.
func (c *cache) held(now time.Time) []heldInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []heldInfo
	for _, e := range c.entries {
		if !e.holding {
			continue
		}
		h := heldInfo{query: e.query.Name, params: e.params, cold: !e.good}
		if e.good {
			h.age = now.Sub(e.goodAt)
		} else {
			h.age = now.Sub(e.since)
		}
		h.stale = h.age > e.query.MaxStale
		out = append(out, h)
	}
	return out
}

type heldInfo struct {
	query, params string
	cold, stale   bool
	age           time.Duration
}
