package resources_test

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// A namespace's results store is created on first use with the events
// stream's retention, is found again on the next, and is the
// namespace's own.
func TestEnsureResultsBucketIsCreatedOnceWithTheEventsRetention(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	if err := resources.Ensure(ctx, js, names, resources.Config{EventsMaxAge: 5 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		obj, err := resources.EnsureResultsBucket(ctx, js, names, "demo")
		if err != nil {
			t.Fatal(err)
		}
		status, err := obj.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if status.Bucket() != "toolbus_results_demo" || status.TTL() != 5*time.Hour || status.Replicas() != 1 {
			t.Fatalf("results store %s, TTL %v, %d replicas", status.Bucket(), status.TTL(), status.Replicas())
		}
	}
	if _, err := resources.EnsureResultsBucket(ctx, js, names, "de.mo"); err == nil {
		t.Fatal("a results store for an invalid namespace")
	}
}
