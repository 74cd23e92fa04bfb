package chtest

import (
	"testing"
	"time"
)

// Poll reports whether cond holds within d. Tests wait on what they can observe (a row, a
// counter, a log line) with it, never on a fixed sleep: a loaded machine is slow, not wrong.
// Polls start at 10 ms and back off to 250 ms; cond is asked once more after d has passed, so
// a slow last sleep never costs the answer. A caller that has more to say on a timeout than
// Eventually does (the last thing seen, a log) uses Poll and fails with that itself.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	wait := 10 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		wait = min(2*wait, 250*time.Millisecond)
	}
	return true
}

// Eventually polls cond as Poll does, and fails the test if it does not hold within d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}
