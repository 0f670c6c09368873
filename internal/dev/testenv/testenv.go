// Package testenv starts the real parts that tests run against: an
// embedded NATS server with JetStream in a temporary directory, and
// coordinators, workers and SDK clients connected to it. Everything is
// stopped when the test ends.
//
// Only tests import it (TestOnlyTestsImportTestenv keeps it so), so the
// services and the SDK it pulls in reach no binary through it. pkg/client's
// own tests are in package client_test, which may import it.
package testenv

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// Server starts an embedded server on a free port with its store in a temporary directory.
func Server(t testing.TB) *natsserver.Server {
	t.Helper()
	return embedded.Server(t)
}

// ServerIn starts an embedded server with its store in dir, so that a test
// can restart it on the same data.
func ServerIn(t testing.TB, dir string) *natsserver.Server {
	t.Helper()
	return embedded.ServerWith(t, natsserver.Config{DataDir: dir})
}

// ServerWith starts an embedded server configured by cfg (a
// configuration file, a port), with its store in a temporary directory
// unless cfg names one. It is stopped when the test ends.
func ServerWith(t testing.TB, cfg natsserver.Config) *natsserver.Server {
	t.Helper()
	return embedded.ServerWith(t, cfg)
}

// Connect opens a connection that is closed when the test ends.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return embedded.Connect(t, url, opts...)
}

// Logger returns a logger that writes through t.Log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// Coordinator starts a coordinator on its own connection.
func Coordinator(t testing.TB, url string, mutate ...func(*coordinator.Config)) *coordinator.Coordinator {
	t.Helper()
	cfg := coordinator.Config{Logger: Logger(t)}
	for _, m := range mutate {
		m(&cfg)
	}
	if cfg.Conn == nil {
		cfg.Conn = Connect(t, url)
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatalf("new coordinator: %v", err)
	}
	if err := c.Start(Context(t)); err != nil {
		t.Fatalf("start coordinator: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// Worker starts a worker on its own connection serving the namespaces.
func Worker(t testing.TB, url string, cfg worker.Config, nss ...worker.Namespace) *worker.Worker {
	t.Helper()
	if cfg.Conn == nil {
		cfg.Conn = Connect(t, url)
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger(t)
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	for _, ns := range nss {
		if err := w.Serve(ns); err != nil {
			t.Fatalf("serve %s: %v", ns.Name, err)
		}
	}
	if err := w.Start(Context(t)); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// Client returns an SDK client on its own connection, closed when the test ends.
func Client(t testing.TB, url string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(Connect(t, url), opts)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Context returns a context that ends with the test, or after five
// minutes, or half a minute before the test binary's deadline when that
// comes first: time for the slowest test's whole work on a busy machine.
func Context(t testing.TB) context.Context {
	deadline := time.Now().Add(contextLife)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok && end.Add(-deadlineMargin).Before(deadline) {
			deadline = end.Add(-deadlineMargin)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// CatalogFixture is a server's Toolbus resources as a coordinator or an
// indexer holds them: the catalog bucket with a store and a started view,
// and the discovery index bucket.
type CatalogFixture struct {
	JS    jetstream.JetStream
	Store *catalog.Store
	View  *catalog.View
	Index jetstream.KeyValue
}

// Catalog creates the resources on the server at url, on a connection of
// its own, and starts a view of the catalog that lives as long as the test.
func Catalog(t testing.TB, url string) *CatalogFixture {
	t.Helper()
	js, err := jetstream.New(Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	ctx := Context(t)
	names := messages.MustNames("")
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	index, err := resources.EnsureIndexBucket(ctx, js, names, resources.Config{})
	if err != nil {
		t.Fatal(err)
	}
	viewCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	view := catalog.NewView(kv, Logger(t))
	if err := view.Start(viewCtx); err != nil {
		t.Fatal(err)
	}
	return &CatalogFixture{JS: js, Store: catalog.NewStore(kv), View: view, Index: index}
}

// InstallationServer starts a server of an installation of toolbus setup:
// its first node's configuration, on the address the installation lists,
// with a store of the test's. It is stopped when the test ends.
func InstallationServer(t testing.TB, in *setup.Installation) *natsserver.Server {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "n1.conf")
	if err := in.WriteNodeConfig(0, conf, setup.NodePaths{Store: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	return ServerWith(t, natsserver.Config{ConfigFile: conf})
}
