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

// Writes that arrive while one is in flight go out together in the next write, each exactly
// once, never more than maxGroup at a time, and each writer gets its own batch's error.
func TestGroupBatchesWritesInFlight(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var batches [][]int
	boom := errors.New("boom")
	g := newGroup(func(_ context.Context, items []int) error {
		mu.Lock()
		batches = append(batches, slices.Clone(items))
		first := len(batches) == 1
		mu.Unlock()
		if first {
			<-release // hold the first write until every other writer is queued behind it
			return nil
		}
		if slices.Contains(items, 7) {
			return boom
		}
		return nil
	})
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
		return len(g.next.items) == (n-1)%maxGroup // full batches were set aside
	})
	close(release)
	wg.Wait()

	seen := map[int]int{}
	for _, b := range batches {
		if len(b) > maxGroup {
			t.Errorf("a write of %d items, more than %d", len(b), maxGroup)
		}
		for _, it := range b {
			seen[it]++
		}
	}
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("item %d written %d times", i, seen[i])
		}
	}
	if len(batches) > 1+(n-1+maxGroup-1)/maxGroup {
		t.Errorf("%d writes for %d items behind one in flight, want them grouped", len(batches), n)
	}
	var sevensBatch []int
	for _, b := range batches {
		if slices.Contains(b, 7) {
			sevensBatch = b
		}
	}
	for i := range n {
		if want := slices.Contains(sevensBatch, i); (errs[i] != nil) != want {
			t.Errorf("item %d: error %v, its batch failed: %v", i, errs[i], want)
		}
	}
}
