package testenv

import (
	"testing"
	"time"
)

// Poll calls cond every interval until it reports true or timeout has passed, and says
// whether it did. It is the one polling loop of the tests: Eventually fails the test on a
// timeout; Poll is for callers that handle the timeout themselves (or expect it).
func Poll(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// Eventually calls cond every interval until it reports true, and fails the test when
// timeout has passed, saying what it waited for and the state cond last reported.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	var state string
	if Poll(timeout, interval, func() bool {
		var ok bool
		ok, state = cond()
		return ok
	}) {
		return
	}
	if state != "" {
		t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, state)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}
