package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestProcessesRefuseAnotherReplication checks docs/operations.md's
// "Replication" on the commands: on an installation created at 1 replica
// by a coordinator started without --replicas, a coordinator and an
// indexer started with --replicas 3 log that they refuse, exit with an
// error naming both values, and change nothing; a worker started with the
// installation's value, and a coordinator started with --replicas 1,
// start as usual.
func TestProcessesRefuseAnotherReplication(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	url := srv.URL()
	first := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", url)
	first.WaitLine(t, "coordinator started")

	ctx := testenv.Context(t)
	for _, cmd := range []string{"./cmd/coordinator", "./cmd/indexer"} {
		p := testenv.Start(t, testenv.Binary(t, cmd), "--server", url, "--replicas", "3")
		err := p.Wait(ctx)
		if err == nil || ctx.Err() != nil {
			t.Fatalf("%s --replicas 3 on an R1 installation: %v, want an exit status other than 0\n%s", cmd, err, p.Output())
		}
		out := p.Output()
		if !strings.Contains(out, "refusing to start: the installation has another replication") {
			t.Errorf("%s does not log its refusal:\n%s", cmd, out)
		}
		if !strings.Contains(out, "asked for 3") || !strings.Contains(out, "has 1") {
			t.Errorf("%s's error does not name both replications:\n%s", cmd, out)
		}
	}

	js, err := jetstream.New(testenv.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	names, _ := messages.NewNames(messages.DefaultPrefix)
	for _, stream := range []string{names.EventsStream(), names.AuditStream(), "KV_" + names.CatalogBucket(), "KV_" + names.IndexBucket()} {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Replicas; got != 1 {
			t.Errorf("stream %s has %d replicas after the refusals, want 1", stream, got)
		}
	}

	same := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", url, "--replicas", "1")
	same.WaitLine(t, "coordinator started")
	w := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", url, "--demo", "--id", "adopts")
	w.WaitLine(t, "worker adopts ready")
	c := testenv.Client(t, url, client.Options{})
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if res, err := c.Call(callCtx, "demo-echo", map[string]string{"text": "R1"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a call after the refusals: %+v %v", res, err)
	}
}
