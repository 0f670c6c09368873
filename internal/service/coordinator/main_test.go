package coordinator

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

func TestMain(m *testing.M) { leaks.Main(m) }

// patience bounds a wait for something that happens unless the code is
// wrong, as testenv.Patience does for the tests that can import testenv:
// generous, for the race detector on two cores shared with other work.
const patience = 2 * time.Minute
