package testenv

import (
	"testing"
	"time"
)

// Eventually calls cond every interval until it reports true, and fails the test when
// timeout has passed, saying what it waited for and the state cond last reported.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state != "" {
				t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, state)
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}
