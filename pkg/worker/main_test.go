package worker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Goroutines of a reuse pool wait a while for more work after a worker or
// a coordinator stops; one that still runs a function has that function on
// top of its stack and is reported.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/toolbus/toolbus/internal/reuse.(*Pool).run"))
}
