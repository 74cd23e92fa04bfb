package runner

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// Writes that arrive while one is in flight go out together in the next writes, oldest batch
// first, never more than maxGroup at a time; a batch the server refuses is written again row
// by row, so only the bad row's writer gets the error, and every other row lands once.
func TestGroupBatchesWritesInFlight(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var batches [][]int
	landed := map[int]int{}
	boom := errors.New("boom")
	g := newGroup(together(func(_ context.Context, items []int) error {
		mu.Lock()
		batches = append(batches, slices.Clone(items))
		first := len(batches) == 1
		mu.Unlock()
		if first {
			<-release // hold the first write until every other writer is queued behind it
		}
		if slices.Contains(items, 7) {
			return boom
		}
		mu.Lock()
		for _, it := range items {
			landed[it]++
		}
		mu.Unlock()
		return nil
	}), refusedWhole)
	const n = 2*maxGroup + 10
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = g.write(context.Background(), 0) })
	chtest.Eventually(t, 10*time.Second, "the first write in flight", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(batches) == 1
	})
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = g.write(context.Background(), i) })
	}
	chtest.Eventually(t, 10*time.Second, "every writer queued", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		queued := 0
		for _, b := range g.pending {
			queued += len(b.items)
		}
		return queued == n-1
	})
	close(release)
	wg.Wait()

	for _, b := range batches {
		if len(b) > maxGroup {
			t.Errorf("a write of %d items, more than %d", len(b), maxGroup)
		}
	}
	// Oldest first: the two batches that filled up, then the open one (single-row writes
	// are 0's and the failed batch's rows, written again one by one).
	var sizes []int
	for _, b := range batches {
		if len(b) > 1 {
			sizes = append(sizes, len(b))
		}
	}
	if want := []int{maxGroup, maxGroup, n - 1 - 2*maxGroup}; !slices.Equal(sizes, want) {
		t.Errorf("grouped writes of %v rows, want %v (oldest first)", sizes, want)
	}
	for i := range n {
		want := 1
		if i == 7 {
			want = 0
		}
		if landed[i] != want {
			t.Errorf("item %d landed %d times, want %d", i, landed[i], want)
		}
		if (errs[i] != nil) != (i == 7) {
			t.Errorf("item %d: error %v", i, errs[i])
		}
	}
}

// The write runs under the group's own deadline, not the context of the writer that sends
// it: that writer may have spent its own time waiting for the write before.
func TestGroupWriteOutlivesTheWritersContext(t *testing.T) {
	var flushErr error
	g := newGroup(together(func(ctx context.Context, _ []int) error {
		flushErr = ctx.Err()
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		return ctx.Err()
	}), refusedWhole)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.write(ctx, 1); err != nil || flushErr != nil {
		t.Fatalf("write with a cancelled writer's context: %v (flush saw %v)", err, flushErr)
	}
}
