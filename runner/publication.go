package runner

import (
	"context"
	"log/slog"
	"sync"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// publication compares, every CheckEvery ticks, the loaded set with the one materialise
// published, and reads the replica delay. Both are best effort: a failure is logged and
// counted, never fatal. Safe for concurrent use: the tick checks, metrics read the hash.
type publication struct {
	opts *Options
	log  *slog.Logger

	mu     sync.Mutex
	hash   string // hash materialise published, "" unknown
	logged string // the published/loaded pair already logged as a mismatch
}

func (p *publication) published() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hash
}

func (p *publication) check(ctx context.Context, set *hunt.Set) {
	m := p.opts.Metrics
	if p.opts.PublishedHash != nil {
		pub, err := p.opts.PublishedHash(ctx)
		if err != nil {
			m.clickhouseError(ctx, stagePublishedHash)
			p.log.Warn("reading the published set hash failed", "error", err)
		} else {
			p.mu.Lock()
			p.hash = pub
			logIt := pub != set.Hash && p.logged != pub+"/"+set.Hash
			if logIt {
				p.logged = pub + "/" + set.Hash
			}
			p.mu.Unlock()
			if logIt {
				p.log.Warn("loaded hunt set differs from the one materialise published: the due backlog "+
					"(autoscaling) counts the published schedule; run `hunt-runner materialise`",
					"loaded_hash", set.Hash, "published_hash", pub)
			}
		}
	}
	if p.opts.ReplicaDelay != nil {
		d, err := p.opts.ReplicaDelay(ctx)
		if err != nil {
			m.clickhouseError(ctx, stageReplicaDelay)
			p.log.Warn("reading the replica delay failed", "error", err)
			return
		}
		m.setReplicaDelay(d)
		if p.opts.Settle > 0 && d > p.opts.Settle/2 {
			p.log.Warn("replica delay exceeds settle/2: the one-winner guarantee of the lease protocol no longer holds "+
				"(outputs stay idempotent); raise --settle", "replica_delay", d, "settle", p.opts.Settle)
		}
	}
}
