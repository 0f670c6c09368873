package resources_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/testenv/leaks"
)

// The tests stop every server they start, but a stopped nats-server leaves
// two kinds of its own goroutines to end a little later: the flush loops
// of its file stores, and its shared clock. They are the server's, not
// this package's.
func TestMain(m *testing.M) {
	leaks.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}
