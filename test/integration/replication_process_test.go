package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
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
	for _, stream := range []string{names.EventsStream(), names.Audit().Stream(), "KV_" + names.CatalogBucket(), "KV_" + names.IndexBucket()} {
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

// TestReconfigureOnAClusterAsDocumented follows docs/operations.md's
// "Replication" on a three-node cluster with the real commands: an
// installation created at 1 replica is raised with one coordinator started
// with --replicas 3 --reconfigure, which updates every stream and bucket
// (the index bucket included) and serves; a namespace's existing results
// store keeps its replication; the namespace's consumer follows its
// stream; a coordinator started later without the flag adopts 3, and one
// started with --replicas 1 is refused.
func TestReconfigureOnAClusterAsDocumented(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	urls := testenv.Cluster(t, 3)
	coordinator := testenv.Binary(t, "./cmd/coordinator")
	first := testenv.Start(t, coordinator, "--server", urls)
	first.WaitLine(t, "coordinator started")
	w := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", urls, "--demo", "--id", "w1")
	w.WaitLine(t, "worker w1 ready")
	c := testenv.Client(t, urls, client.Options{})
	ctx := testenv.Context(t)
	if res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "at R1"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a call at R1: %+v %v", res, err)
	}
	if err := first.Interrupt(t); err != nil {
		t.Fatal(err)
	}

	raise := testenv.Start(t, coordinator, "--server", urls, "--replicas", "3", "--reconfigure")
	raise.WaitLine(t, "coordinator started")
	js, err := jetstream.New(testenv.Connect(t, urls))
	if err != nil {
		t.Fatal(err)
	}
	names, _ := messages.NewNames(messages.DefaultPrefix)
	results, _ := names.NamespaceResultsBucket("demo")
	want := map[string]int{
		names.EventsStream(): 3, names.Audit().Stream(): 3,
		"KV_" + names.CatalogBucket(): 3, "KV_" + names.TurnsBucket(): 3, "KV_" + names.ApprovalsBucket(): 3, "KV_" + names.IndexBucket(): 3,
		"OBJ_" + results: 1,
	}
	for stream, replicas := range want {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Errorf("stream %s: %v", stream, err)
			continue
		}
		if got := s.CachedInfo().Config.Replicas; got != replicas {
			t.Errorf("after --replicas 3 --reconfigure, %s has %d replicas, want %d", stream, got, replicas)
		}
	}
	consumer, err := names.Consumers().Durable("demo")
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; {
		info, err := js.Consumer(ctx, names.EventsStream(), consumer)
		if err != nil {
			t.Fatal(err)
		}
		ci := info.CachedInfo()
		if ci.Cluster != nil && len(ci.Cluster.Replicas)+1 == 3 {
			break
		}
		if time.Since(start) > testenv.Patience {
			t.Errorf("the consumer %s did not follow its stream to 3 replicas: %+v %+v", consumer, ci.Cluster, ci.Config.Replicas)
			break
		}
		time.Sleep(100 * time.Millisecond) // the server scales the consumer after its stream, and says nothing when done
	}
	if res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "at R3"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a call at R3: %+v %v", res, err)
	}

	adopts := testenv.Start(t, coordinator, "--server", urls)
	adopts.WaitLine(t, "coordinator started")
	refused := testenv.Start(t, coordinator, "--server", urls, "--replicas", "1")
	if err := refused.Wait(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("a coordinator with --replicas 1 on an R3 installation: %v, want a refusal\n%s", err, refused.Output())
	}
	if out := refused.Output(); !strings.Contains(out, "asked for 1") || !strings.Contains(out, "has 3") {
		t.Errorf("the refusal does not name both replications:\n%s", out)
	}
}
