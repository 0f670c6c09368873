// Package leaks checks that a test binary, or a test, left no goroutine
// running, as goleak does, with the time that goroutines on their way
// out take on a busy machine: goleak's own retries last under half a
// second, after which a goroutine that was ending, not leaked, fails the
// check. It imports nothing of Toolbus, so that the tests of any package
// may use it.
package leaks

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// patience is how long the goroutines still running may take to end.
const patience = time.Minute

// VerifyTestMain runs the tests, then, if they passed, fails the binary
// when goroutines other than those options ignore still run after
// patience.
func VerifyTestMain(m *testing.M, options ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := find(options...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// VerifyNone fails the test when goroutines other than those options
// ignore still run after patience.
func VerifyNone(t testing.TB, options ...goleak.Option) {
	t.Helper()
	if err := find(options...); err != nil {
		t.Error(err)
	}
}

func find(options ...goleak.Option) error {
	deadline := time.Now().Add(patience)
	for {
		err := goleak.Find(options...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
