//go:build unix

package natsserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the file in a data directory whose lock says a server uses
// the directory's store.
const lockFile = "toolbus.lock"

// lockDataDir takes the data directory for this process: two servers on
// one JetStream store would each take the other's files for their own.
// The lock goes with the process, however it ends.
func lockDataDir(dir string) (*os.File, error) {
	// A directory that cannot hold the lock cannot hold the store either:
	// the server says why better than this would.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := ""
		if data, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); perr == nil {
				holder = fmt.Sprintf(" (process %d)", pid)
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("natsserver: data directory %s is in use by another server%s: give each its own directory (toolbus dev --data DIR)", dir, holder)
		}
		return nil, fmt.Errorf("natsserver: lock data directory %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
