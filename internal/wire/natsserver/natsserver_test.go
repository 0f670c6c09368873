package natsserver

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
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

// TestADataDirectoryServesOneServer: a second server on a data directory
// in use is refused, naming the directory and the process that holds it;
// once the first has stopped, the directory can be used again.
func TestADataDirectoryServesOneServer(t *testing.T) {
	dir := t.TempDir()
	first, err := Start(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	second, err := Start(Config{DataDir: dir})
	if err == nil {
		second.Stop()
		first.Stop()
		t.Fatal("a second server started on a data directory in use")
	}
	if !strings.Contains(err.Error(), "data directory "+dir+" is in use by another server (process "+strconv.Itoa(os.Getpid())+")") {
		t.Errorf("second server: %v", err)
	}
	first.Stop()
	again, err := Start(Config{DataDir: dir})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	again.Stop()
}
