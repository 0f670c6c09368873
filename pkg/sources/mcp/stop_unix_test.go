//go:build unix

package mcp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestStoppingAStdioServer: Stop closes the server's input, terminates it
// 2s later and kills it 2s after that, as docs/workers.md says, and
// returns once it is gone. What each server saw, and the least time each
// step waits, show it; how much longer a busy machine takes is not
// checked.
func TestStoppingAStdioServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		saw  string
		min  time.Duration
	}{
		{"polite", "end of input\n", 0},                                // ends at the end of its input
		{"deaf", "end of input\nSIGTERM\n", stopGrace},                 // ends at SIGTERM
		{"stubborn", "end of input\nSIGTERM ignored\n", 2 * stopGrace}, // ends at SIGKILL
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			cfg := fakeServer(t, tc.mode)
			mark := filepath.Join(t.TempDir(), "mark")
			cfg.Env = append(cfg.Env, "FAKE_MCP_MARK="+mark)
			_, src, err := startFake(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			pid := src.PID()
			began := time.Now()
			if err := src.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(began); took < tc.min {
				t.Errorf("Stop took %v, want at least %v", took, tc.min)
			}
			saw, err := os.ReadFile(mark)
			if err != nil {
				t.Fatalf("the server's input was not closed: %v", err)
			}
			if string(saw) != tc.saw {
				t.Errorf("the server saw %q, want %q", saw, tc.saw)
			}
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("process %d after Stop: %v", pid, err)
			}
		})
	}
}
