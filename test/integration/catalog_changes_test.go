package integration

import (
	"context"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestCatalogChangesAreFollowed: a client following the catalog sees a
// worker join with its tools, a tool disabled and enabled again, a tool
// removed, and the worker leave when it stops.
func TestCatalogChangesAreFollowed(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	ctx, cancel := context.WithTimeout(testenv.Context(t), time.Minute)
	defer cancel()
	changes := make(chan messages.CatalogChange, 64)
	followed := make(chan error, 1)
	follow, err := c.CatalogChanges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ch, err := range follow {
			if err != nil {
				followed <- err
				return
			}
			changes <- ch
		}
		followed <- nil
	}()
	// Waits for a change of kind on the tool or worker, skipping the others.
	await := func(kind messages.CatalogChangeKind, match func(messages.CatalogChange) bool) messages.CatalogChange {
		t.Helper()
		for {
			select {
			case ch := <-changes:
				if ch.Kind == kind && match(ch) {
					return ch
				}
			case err := <-followed:
				t.Fatalf("following ended before a %s change: %v", kind, err)
			case <-ctx.Done():
				t.Fatalf("no %s change", kind)
			}
		}
	}
	tool := func(name string) func(messages.CatalogChange) bool {
		return func(ch messages.CatalogChange) bool { return ch.Tool == name }
	}
	if err := c.Operator().SetToolEnabled(ctx, "demo-echo", false, "warming up"); err != nil {
		t.Fatal(err)
	}
	await(messages.CatalogDisabled, tool("demo-echo"))

	echo := worker.Func("echo", "Says it again.", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	w := testenv.Worker(t, srv.URL(), worker.Config{ID: "w-changes"}, worker.Namespace{Name: "extra", Tools: []worker.Tool{echo}})
	added := await(messages.CatalogToolAdded, tool("extra-echo"))
	if added.Definition == nil || added.Definition.Name != "extra-echo" {
		t.Errorf("tool added without its definition: %+v", added)
	}
	await(messages.CatalogWorkerJoined, func(ch messages.CatalogChange) bool { return ch.WorkerID == "w-changes" && ch.Namespace == "extra" })

	if err := c.Operator().SetToolEnabled(ctx, "demo-echo", true, ""); err != nil {
		t.Fatal(err)
	}
	await(messages.CatalogEnabled, tool("demo-echo"))
	if err := c.Operator().SetToolEnabled(ctx, "demo-echo", false, "returns garbage"); err != nil {
		t.Fatal(err)
	}
	if off := await(messages.CatalogDisabled, tool("demo-echo")); off.Reason != "returns garbage" {
		t.Errorf("disabled with reason %q", off.Reason)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	await(messages.CatalogWorkerLeft, func(ch messages.CatalogChange) bool { return ch.WorkerID == "w-changes" })
	if _, err := c.Operator().RemoveTools(ctx, "demo-sleep", "retired"); err != nil {
		t.Fatal(err)
	}
	await(messages.CatalogToolRemoved, tool("demo-sleep"))
}
