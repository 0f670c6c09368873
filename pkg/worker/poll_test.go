package worker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// A pull request the worker took as lost may still be answered, as after a
// consumer leader change: the call then arrives with every slot taken. It
// is kept, leased, and run once a slot frees, as the same attempt; handed
// back, it would spend a delivery without running, and with MaxAttempts 1
// fail with max_attempts.
func TestACallDeliveredWithoutAFreeSlotWaitsForOneWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Leases are renewed every third of it: long enough that a busy
	// machine's late wake-ups do not let one lapse between two renewals.
	const ackWait = 3 * time.Second
	w := testenv.Worker(t, b.url, worker.Config{AckWait: ackWait},
		worker.Namespace{Name: "t", Tools: b.tools.list(), Slots: 1, MaxAttempts: 1})
	busy := b.submit(t, "t-stubborn")
	receive(t, b.tools.started, "the call that takes the only slot")
	waiting := b.submit(t, "t-quick")

	// The stale request: one more call, to the inbox of the worker's requests.
	names := messages.MustNames("")
	durable, _ := names.Consumers().Durable("t")
	nc := testenv.Connect(t, b.url)
	body := transport.AppendPullRequest(nil, 1, 5*time.Second, 0)
	if err := nc.PublishRequest(transport.PullSubject(names.EventsStream(), durable), worker.PullInbox(w, "t")+".1", body); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the call to be held for a slot", func() bool {
		held, _ := worker.Held(w, "t")
		return held == 1
	})
	// Held past its AckWait, its lease renewed meanwhile: not delivered again.
	testenv.Eventually(t, "the held call's lease to be renewed past AckWait", func() bool {
		_, renewals := worker.Held(w, "t")
		return time.Duration(renewals)*ackWait/3 > 2*ackWait
	})
	if held, _ := worker.Held(w, "t"); held != 1 {
		t.Fatalf("%d calls held; want the one delivered without a slot", held)
	}

	close(b.tools.stubborn)
	if res := b.wait(t, busy); res.Status != messages.StateCompleted {
		t.Fatalf("call in the slot: %+v", res)
	}
	res := b.wait(t, waiting)
	if res.Status != messages.StateCompleted || res.IsError || res.Attempt != 1 || res.Worker != w.ID() {
		t.Fatalf("held call: %+v; want completed at its first attempt", res)
	}
	if held, _ := worker.Held(w, "t"); held != 0 {
		t.Fatalf("%d calls still held", held)
	}
	allFree(t, w)
}

// JetStream counts every delivery, run or not. A call whose only allowed
// attempt was spent by a consumer that handed it back unrun (as a worker
// that stops while holding it does) still runs, on the consumer's extra
// delivery, since no attempt of it started.
func TestACallWhoseDeliveriesNeverStartedRunsOnItsLastDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := testenv.Worker(t, b.url, worker.Config{},
		worker.Namespace{Name: "t", Tools: b.tools.list(), Slots: 1, MaxAttempts: 1})
	busy := b.submit(t, "t-stubborn")
	receive(t, b.tools.started, "the call that takes the only slot")
	id := b.submit(t, "t-quick")

	names := messages.MustNames("")
	durable, _ := names.Consumers().Durable("t")
	nc := testenv.Connect(t, b.url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := js.Consumer(b.ctx, names.EventsStream(), durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := consumer.Fetch(1, jetstream.FetchMaxWait(testenv.Patience))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		if err := msg.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}

	body := transport.AppendPullRequest(nil, 1, 5*time.Second, 0)
	if err := nc.PublishRequest(transport.PullSubject(names.EventsStream(), durable), worker.PullInbox(w, "t")+".1", body); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the call's second delivery to be held for a slot", func() bool {
		held, _ := worker.Held(w, "t")
		return held == 1
	})
	close(b.tools.stubborn)
	b.wait(t, busy)
	res := b.wait(t, id)
	if res.Status != messages.StateCompleted || res.IsError || res.Attempt != 2 {
		t.Fatalf("call whose first delivery never ran: %+v; want completed on delivery 2", res)
	}
	allFree(t, w)
}
