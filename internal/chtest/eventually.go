package chtest

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds, and fails the test if it does not within d. Tests
// wait on what they can observe (a row, a counter, a log line) with it, never on a fixed
// sleep: a loaded machine is slow, not wrong. Polls start at 10 ms and back off to 250 ms.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	wait := 10 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(wait)
		wait = min(2*wait, 250*time.Millisecond)
	}
}
