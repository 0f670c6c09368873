package worker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// A worker that has a result keeps trying to store it, its lease renewed,
// while the events stream is away (here deleted, then created again, as a
// stream without a leader refuses writes): the call is not handed back, so
// its tool does not run a second time.
func TestAResultNotStoredAtFirstIsRetriedAndTheToolRunsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Renewed every third of it: long enough that a busy machine's late
	// wake-ups do not let the lease lapse between two renewals.
	const ackWait = 3 * time.Second
	w := b.worker(t, worker.Config{AckWait: ackWait}, 2)
	id := b.submit(t, "t-stubborn")
	receive(t, b.tools.started, "the call to start")

	nc := testenv.Connect(t, b.url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	stream, err := js.Stream(b.ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	if err := js.DeleteStream(b.ctx, cfg.Name); err != nil {
		t.Fatal(err)
	}
	close(b.tools.stubborn)
	receive(t, b.tools.returned, "the tool to return")
	// Retried for longer than AckWait: the lease must be renewed meanwhile.
	start := time.Now()
	testenv.Eventually(t, "the result's write to be retried for twice AckWait", func() bool {
		return worker.CommitRetries(w) >= 3 && time.Since(start) > 2*ackWait
	})
	if _, err := js.CreateStream(b.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// The recreated stream has lost the call's queued event, which names
	// its namespace: the reader names it.
	res, err := ledger.New(nc, js, names).AwaitResult(b.ctx, messages.TurnBucket(""), "t", id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateCompleted || res.IsError || res.Attempt != 1 || res.Worker != w.ID() {
		t.Fatalf("result stored after retries: %+v", res)
	}
	allFree(t, w)
	if n := b.tools.runsOf(id); n != 1 {
		t.Fatalf("the tool ran %d times; want once", n)
	}
}
