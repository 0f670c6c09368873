package cluster

import (
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

func TestMain(m *testing.M) { leaks.Main(m, testenv.CleanupBinaries) }
