package runner

import (
	"context"
	"sync"
)

// maxGroup bounds the rows of one grouped write (its parameters travel in the request URL).
const maxGroup = 64

// group turns writes that arrive while one is in flight into the next single write (a group
// commit). A write waits for at most the write in flight and its own, and under load n rows
// cost one statement instead of n: on a busy runner every run that overran writes hunt_state,
// and that was one statement in seven per fire.
type group[T any] struct {
	flush func(context.Context, []T) error

	mu       sync.Mutex
	cond     *sync.Cond
	flushing bool
	next     *groupBatch[T]
}

type groupBatch[T any] struct {
	items []T
	done  bool
	err   error
}

func newGroup[T any](flush func(context.Context, []T) error) *group[T] {
	g := &group[T]{flush: flush, next: &groupBatch[T]{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// write adds item to the next batch and returns once that batch is written, with its error.
// The first writer to find no write in flight writes the batch, with its own ctx.
func (g *group[T]) write(ctx context.Context, item T) error {
	g.mu.Lock()
	b := g.next
	b.items = append(b.items, item)
	if len(b.items) >= maxGroup {
		g.next = &groupBatch[T]{}
	}
	for g.flushing && !b.done {
		g.cond.Wait()
	}
	if b.done {
		g.mu.Unlock()
		return b.err
	}
	g.flushing = true
	if g.next == b {
		g.next = &groupBatch[T]{}
	}
	g.mu.Unlock()

	err := g.flush(ctx, b.items)

	g.mu.Lock()
	b.done, b.err, g.flushing = true, err, false
	g.cond.Broadcast()
	g.mu.Unlock()
	return err
}
