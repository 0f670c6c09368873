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
// returns once it is gone.
func TestStoppingAStdioServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode     string
		min, max time.Duration
	}{
		{"polite", 0, stopGrace},                   // ends at the end of its input
		{"deaf", stopGrace, 2 * stopGrace},         // ends at SIGTERM
		{"stubborn", 2 * stopGrace, 3 * stopGrace}, // ends at SIGKILL
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
			took := time.Since(began)
			if took < tc.min || took > tc.max {
				t.Errorf("Stop took %v, want between %v and %v", took, tc.min, tc.max)
			}
			if _, err := os.Stat(mark); err != nil {
				t.Errorf("the server's input was not closed: %v", err)
			}
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("process %d after Stop: %v", pid, err)
			}
		})
	}
}
