package ledger_test

import (
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

// CleanupBinaries removes the nats-server that testenv.Cluster builds.
// TestMain is in ledger_test, not ledger: testenv imports ledger.
func TestMain(m *testing.M) { leaks.Main(m, testenv.CleanupBinaries) }
