package leaks_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

// leakingRun makes the test binary, run again by
// TestMainFailsARunThatLeftAGoroutine, leave a goroutine running.
const leakingRun = "LEAKS_TEST_LEAVE_A_GOROUTINE"

// cleanupMark names the file that Main's cleanup of the test binary, run
// again by TestMainPassesACleanRunAfterItsCleanups, writes.
const cleanupMark = "LEAKS_TEST_CLEANUP_MARK"

func TestMain(m *testing.M) {
	if os.Getenv(leakingRun) == "1" {
		never := make(chan struct{})
		go leftRunning(never)
	}
	leaks.Main(m, func() {
		if mark := os.Getenv(cleanupMark); mark != "" {
			_ = os.WriteFile(mark, nil, 0o600)
		}
	})
}

func leftRunning(never chan struct{}) { <-never }

// A run whose tests pass but that leaves a goroutine running fails, and
// names the goroutine.
func TestMainFailsARunThatLeftAGoroutine(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the goroutine as long as Main does, a minute")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), leakingRun+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("a run that left a goroutine: %v, want exit status 1\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "leaks_test.leftRunning") {
		t.Fatalf("the failure does not name the goroutine:\n%s", stderr.String())
	}
}

// A run that leaves nothing passes, and Main runs its cleanups.
func TestMainPassesACleanRunAfterItsCleanups(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "cleaned")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cleanupMark+"="+mark)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("a clean run: %v\n%s", err, out)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the cleanup did not run: %v", err)
	}
}
