package coordinator

import (
	"testing"

	"go.uber.org/goleak"
)

// idleHandlers ignores the goroutines that handled API requests: the
// reuse pool keeps them, idle, for a while after the coordinator stopped,
// and they end on their own.
var idleHandlers = goleak.IgnoreTopFunction("github.com/toolbus/toolbus/internal/reuse.(*Pool).run")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, idleHandlers) }
