package runner

import (
	"context"
	"sync"
	"time"
)

const (
	// maxGroup bounds the rows of one grouped write (its parameters travel in the request URL).
	maxGroup = 64
	// groupTimeout bounds one grouped write. It is the group's own, not the context of the
	// writer that happens to send it: that writer may have spent its own attempt's time
	// waiting for the write before.
	groupTimeout = 10 * time.Second
)

// group turns writes that arrive while one is in flight into the next single write (a group
// commit): under load n rows cost one statement instead of n. On a busy runner every run that
// overran writes hunt_state, which was one statement in seven per fire. Batches are written
// oldest first, one at a time; a writer waits for the batches before its own and its own. A
// batch the server refuses is written again row by row, so one bad row fails only its writer.
type group[T any] struct {
	flush func(context.Context, []T) error

	mu       sync.Mutex
	cond     *sync.Cond
	flushing bool
	pending  []*groupBatch[T] // oldest first; the last one is open while it has room
}

type groupBatch[T any] struct {
	items []T
	errs  []error
	done  bool
}

func newGroup[T any](flush func(context.Context, []T) error) *group[T] {
	g := &group[T]{flush: flush}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// write adds item to the open batch and returns once that batch is written, with the error of
// item's row. The first writer to find no write in flight writes the oldest batch, under the
// group's own timeout (ctx's values, not its deadline or cancellation); a writer waits at most
// for the batches queued before its own, each bounded by that timeout.
func (g *group[T]) write(ctx context.Context, item T) error {
	g.mu.Lock()
	if n := len(g.pending); n == 0 || len(g.pending[n-1].items) >= maxGroup {
		g.pending = append(g.pending, &groupBatch[T]{})
	}
	b := g.pending[len(g.pending)-1]
	i := len(b.items)
	b.items = append(b.items, item)
	for !b.done {
		if g.flushing {
			g.cond.Wait()
			continue
		}
		next := g.pending[0]
		g.pending = g.pending[1:]
		g.flushing = true
		g.mu.Unlock()
		errs := g.write1(ctx, next.items)
		g.mu.Lock()
		next.errs, next.done, g.flushing = errs, true, false
		g.cond.Broadcast()
	}
	g.mu.Unlock()
	return b.errs[i]
}

// write1 writes one batch and returns an error per item: the batch's, or, when a batch of
// several rows fails, each row's own, written alone.
func (g *group[T]) write1(ctx context.Context, items []T) []error {
	errs := make([]error, len(items))
	err := g.flushTimed(ctx, items)
	if err == nil || len(items) == 1 {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i := range items {
		errs[i] = g.flushTimed(ctx, items[i:i+1])
	}
	return errs
}

func (g *group[T]) flushTimed(ctx context.Context, items []T) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
	defer cancel()
	return g.flush(ctx, items)
}
