package testenv

import (
	"testing"
	"time"
)

// Patience bounds a test's wait for something that happens unless the
// code under test is wrong: a message, an election, a line of a child
// process, a state that sends no signal when it changes. The tests run
// under the race detector on two cores shared with other work, where a
// step that takes milliseconds alone can take seconds, so it is generous
// on purpose; reaching it fails the test, and no test measures speed
// with it.
const Patience = 2 * time.Minute

// contextLife bounds Context: a whole test's work, setup included, on a
// busy machine.
const contextLife = 5 * time.Minute

// deadlineMargin is how long before the test binary's own deadline
// (go test -timeout) Context ends, so that a test whose work never ends
// fails with its own message rather than the binary's panic.
const deadlineMargin = 30 * time.Second

// Eventually polls check until it holds, and fails the test after
// Patience. It is for state that sends no signal when it changes;
// anything that does is waited for on its signal.
func Eventually(t testing.TB, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, Patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Receive waits for a value on ch, and fails the test after Patience.
func Receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Patience)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("gave up waiting for %s after %v", what, Patience)
		panic("unreachable")
	}
}
