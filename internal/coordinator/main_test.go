package coordinator

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds a wait for something that happens unless the code is
// wrong, as testenv.Patience does for the tests that can import testenv:
// generous, for the race detector on two cores shared with other work.
const patience = 2 * time.Minute
