package coordinator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// catalogBucket returns the catalog bucket a started coordinator made.
func catalogBucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(testenv.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	names, err := messages.NewNames(messages.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(testenv.Context(t), names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func putTools(t *testing.T, store *catalog.Store, ns string, methods ...string) {
	t.Helper()
	for _, m := range methods {
		def := &messages.ToolDefinition{Namespace: ns, Method: m, Name: ns + "-" + m, Description: "a tool", InputSchema: messages.JSON(`{"type":"object"}`)}
		if err := store.PutTool(testenv.Context(t), def); err != nil {
			t.Fatal(err)
		}
	}
}

func TestToolsRemove(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.NoBuiltinTools = true })
	kv := catalogBucket(t, srv.URL())
	store := catalog.NewStore(kv)
	putTools(t, store, "stale", "one", "two")
	putTools(t, store, "old", "a", "b")
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	ctx := testenv.Context(t)

	reply, err := c.Operator().RemoveTools(ctx, "stale-one", "its worker is gone")
	if err != nil || len(reply.Removed) != 1 || reply.Removed[0] != "stale-one" {
		t.Fatalf("remove stale-one: %+v, %v", reply, err)
	}
	if _, err := kv.Get(ctx, "tools.stale.one"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("stale-one is still in the catalog: %v", err)
	}
	reply, err = c.Operator().RemoveTools(ctx, "old", "")
	if err != nil || len(reply.Removed) != 2 {
		t.Fatalf("remove namespace old: %+v, %v", reply, err)
	}
	if _, err := c.Operator().RemoveTools(ctx, "stale-one", ""); !errors.Is(err, messages.ErrToolNotFound) {
		t.Fatalf("removing a removed tool: %v, want tool_not_found", err)
	}
	if _, err := kv.Get(ctx, "tools.stale.two"); err != nil {
		t.Fatalf("stale-two was removed with stale-one: %v", err)
	}
	// A namespace is a name, not a pattern of keys.
	for _, ns := range []string{"stale.>", "*", "st ale"} {
		var coded *messages.Error
		if _, err := c.Operator().RemoveTools(ctx, ns, ""); !errors.As(err, &coded) || coded.Code != messages.CodeInvalidName {
			t.Errorf("removing namespace %q: %v, want invalid_name", ns, err)
		}
	}
	if _, err := kv.Get(ctx, "tools.stale.two"); err != nil {
		t.Fatalf("stale-two was removed by a pattern: %v", err)
	}
}

// TestStaleToolsAreSwept checks that the tools of a namespace without a
// live worker are removed once StaleToolTTL has passed, and those of a
// namespace with one are kept.
func TestStaleToolsAreSwept(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) {
		c.NoBuiltinTools = true
		c.StaleToolTTL = 300 * time.Millisecond
		c.SweepInterval = 50 * time.Millisecond
	})
	kv := catalogBucket(t, srv.URL())
	store := catalog.NewStore(kv)
	ctx := testenv.Context(t)
	watcher, err := kv.Watch(ctx, "tools.gone.*", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()
	hb := &messages.WorkerHeartbeat{WorkerID: "w1", Namespace: "alive", Slots: 1, Time: time.Now(), IntervalMS: time.Hour.Milliseconds()}
	if err := store.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	putTools(t, store, "alive", "echo")
	putTools(t, store, "gone", "echo")
	putTools(t, store, "gone", "other")
	<-watcher.Updates() // the two puts
	<-watcher.Updates()
	deleted := 0
	for deleted < 2 {
		select {
		case e := <-watcher.Updates():
			if e.Operation() == jetstream.KeyValueDelete || e.Operation() == jetstream.KeyValuePurge {
				deleted++
			}
		case <-ctx.Done():
			t.Fatalf("the tools of namespace gone were not swept")
		}
	}
	if _, err := kv.Get(ctx, "tools.alive.echo"); err != nil {
		t.Fatalf("the tool of a namespace with a live worker was swept: %v", err)
	}
}
