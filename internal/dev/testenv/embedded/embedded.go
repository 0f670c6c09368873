// Package embedded starts an embedded NATS server with JetStream for a
// test and stops it when the test ends. It imports of Toolbus only
// internal/wire/natsserver, so that the tests of the packages testenv imports
// (the coordinator, the ledger, the transport), which cannot import
// testenv, start their servers with it too; testenv's servers are its.
package embedded

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/natsserver"
)

// Server starts an embedded server on a free port with its store in a
// temporary directory.
func Server(t testing.TB) *natsserver.Server {
	t.Helper()
	return ServerWith(t, natsserver.Config{})
}

// ServerWith starts an embedded server configured by cfg (a
// configuration file, a port, a store to restart on), with its store in a
// temporary directory unless cfg names one.
func ServerWith(t testing.TB, cfg natsserver.Config) *natsserver.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	srv, err := natsserver.Start(cfg)
	if err != nil {
		t.Fatalf("start NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// Connect opens a connection that reconnects without end and is closed
// when the test ends.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
