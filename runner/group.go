package runner

import (
	"context"
	"slices"
	"sync"
	"time"
)

// refusedWhole is the split of a write that succeeds or fails whole: a final error.
func refusedWhole(err error) bool { return !retryable(err) }

// together gives every row of a batch the one error of a write that succeeds or fails whole.
func together[T any](write func(context.Context, []T) error) func(context.Context, []T) []error {
	return func(ctx context.Context, items []T) []error {
		err := write(ctx, items)
		errs := make([]error, len(items))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
}

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
// overran writes hunt_state, which was one statement in seven per fire, and every run commits.
// Batches are written oldest first, one at a time; a writer waits for the batches before its
// own and its own. flush gives each row its own error. A batch whose every row failed with an
// error split says the statement failed as a whole for (a final refusal: nothing applied) is
// written again row by row, so one bad row fails only its writer; a batch whose outcome is
// unknown never is, since sending its rows again while they may still be running is what the
// commit path must never do.
type group[T any] struct {
	flush func(context.Context, []T) []error
	split func(error) bool

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

func newGroup[T any](flush func(context.Context, []T) []error, split func(error) bool) *group[T] {
	g := &group[T]{flush: flush, split: split}
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

// write1 writes one batch and returns an error per item: each row's, or, when every row of a
// batch of several failed finally, each row's own, written alone.
func (g *group[T]) write1(ctx context.Context, items []T) []error {
	errs := g.flushTimed(ctx, items)
	if len(items) == 1 || slices.ContainsFunc(errs, func(err error) bool { return err == nil || !g.split(err) }) {
		return errs
	}
	for i := range items {
		errs[i] = g.flushTimed(ctx, items[i:i+1])[0]
	}
	return errs
}

func (g *group[T]) flushTimed(ctx context.Context, items []T) []error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
	defer cancel()
	return g.flush(ctx, items)
}
