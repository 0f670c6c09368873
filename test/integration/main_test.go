package integration

import (
	"os"
	"testing"

	"github.com/toolbus/toolbus/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.CleanupBinaries()
	removeInstallation()
	removeInstalled()
	os.Exit(code)
}
