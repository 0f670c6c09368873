// Package leaks is the TestMain of every package with tests: it runs the
// tests and fails the binary when they passed but left a goroutine
// running, as goleak does, with the time that goroutines on their way out
// take on a busy machine: goleak's own retries last under half a second,
// after which a goroutine that was ending, not leaked, fails the check.
// The goroutines it lets outlive the tests are in one list, notOurs.
//
// It imports nothing of Toolbus, so that the tests of any package may use
// it, those of the packages testenv itself imports included.
package leaks

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// patience is how long the goroutines still running may take to end.
const patience = time.Minute

// notOurs are the goroutines that may outlive a package's tests, each
// with a comment saying whose it is and why it may: one a library starts
// for the life of the process, say. A goroutine of Toolbus never belongs
// here; it is stopped by the test that started it, or the code that
// started it is fixed. With patience, what a stopped nats-server leaves
// ending (its file stores' last flush, its shared clock, the goroutine
// that waited for its start) has ended, but for one case: a clustered
// node stopped while it still applies a stream's assignment can open that
// stream's file store after its JetStream stopped the streams it had, and
// nothing stops the store's flush loop, nor the shared access-time clock
// the store keeps registered. A server left running leaves its accept,
// read and write loops besides, which this list does not cover.
var notOurs = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
	goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	// nats.go's object store Put (a worker storing a large result) makes a
	// JetStream context of its own and, when the Put ends, clears the
	// connection-status channel its async publisher's goroutine reads. When
	// that goroutine had not yet read the channel (a busy machine), it
	// reads the cleared one, nil, and waits forever: nats.go v1.55.0,
	// jetstream/object.go and publish.go's resetPendingAcksOnReconnect.
	goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
}

// Main is every package's TestMain: it runs the tests, then cleanups
// (such as testenv.CleanupBinaries), and exits with the tests' status,
// or, when they passed, with a failure naming the goroutines other than
// notOurs still running after patience.
func Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, cleanup := range cleanups {
		cleanup()
	}
	if code == 0 {
		if err := find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// VerifyNone fails the test when goroutines other than notOurs and those
// options ignore (such as goleak.IgnoreCurrent(), taken as the test
// starts) still run after patience.
func VerifyNone(t testing.TB, options ...goleak.Option) {
	t.Helper()
	if err := find(options...); err != nil {
		t.Error(err)
	}
}

func find(options ...goleak.Option) error {
	options = append(options, notOurs...)
	deadline := time.Now().Add(patience)
	for {
		// The default HTTP client keeps a connection it used open, with
		// two goroutines, until the server closes it: what a test leaves
		// there was closed with the test's server, and is let go here.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		err := goleak.Find(options...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
