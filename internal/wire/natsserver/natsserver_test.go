package natsserver

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStartSaysWhy: a server that cannot start says why at once, as the
// server said it: a port another process listens on (which matches
// syscall.EADDRINUSE), a store directory that cannot be one.
func TestStartSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Start(Config{DataDir: t.TempDir(), Port: ln.Addr().(*net.TCPAddr).Port})
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("a taken port: %v", err)
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Start(Config{DataDir: filepath.Join(file, "store")})
	if err == nil || errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "JetStream") {
		t.Fatalf("a store under a file: %v", err)
	}

	srv, err := Start(Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
}
