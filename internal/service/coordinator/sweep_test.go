package coordinator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// jetStreamEnv is an embedded server with Toolbus's streams and buckets.
func jetStreamEnv(t *testing.T) (*natsserver.Server, *nats.Conn, jetstream.JetStream, messages.Names) {
	t.Helper()
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := messages.NewNames(messages.DefaultPrefix)
	if err := resources.Ensure(context.Background(), js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	return srv, nc, js, names
}

// flakyCommitter fails every commit while down, as a ledger whose events
// stream has no leader does.
type flakyCommitter struct {
	mu        sync.Mutex
	down      bool
	attempts  int
	committed []*messages.CallResult
}

func (f *flakyCommitter) Commit(_ context.Context, _, _ string, res *messages.CallResult, _ string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.down {
		return false, fmt.Errorf("store result event of call %s: %w", res.CallID, transport.ErrNoResponders)
	}
	f.committed = append(f.committed, res)
	return true, nil
}

func (f *flakyCommitter) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func TestExhaustedCallIsFailedOnceTheLedgerAnswersAgain(t *testing.T) {
	_, nc, js, names := jetStreamEnv(t)
	ctx := context.Background()
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	call := &messages.CallRequest{CallID: "exhausted1", Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: time.Now().UTC()}
	ack, err := js.PublishMsg(ctx, queuedEventMsg(t, names, call))
	if err != nil {
		t.Fatal(err)
	}
	ledger := &flakyCommitter{down: true}
	s := &sweeper{
		stream:          &callStream{nc: nc, names: names, stream: stream, log: discardLogger()},
		ledger:          ledger,
		unavailableWait: 20 * time.Millisecond,
		log:             discardLogger(),
	}
	adv := maxDeliveriesAdvisory{Stream: names.EventsStream(), StreamSeq: ack.Sequence, Deliveries: 4}

	s.endExhausted(ctx, adv)
	if len(ledger.committed) != 0 || s.pendingExhausted() != 1 {
		t.Fatalf("committed %d, pending %d; want the call kept for the next sweep", len(ledger.committed), s.pendingExhausted())
	}

	s.retryExhausted(ctx) // a sweep while the ledger still has no leader
	if s.pendingExhausted() != 1 {
		t.Fatal("the call was dropped from the retries while its failure is not recorded")
	}

	ledger.setDown(false)
	s.retryExhausted(ctx)
	if s.pendingExhausted() != 0 {
		t.Error("the call is still pending once its failure is recorded")
	}
	if len(ledger.committed) != 1 || ledger.committed[0].Status != messages.StateFailed || ledger.committed[0].Error.Code != messages.ResultAttempts || ledger.committed[0].CallID != call.CallID {
		t.Errorf("committed %+v, want the call failed for its attempts", ledger.committed)
	}
	if _, err := stream.GetMsg(ctx, ack.Sequence); err != nil {
		t.Errorf("the failed call's queued event, its record, is gone: %v", err)
	}
}

// TestSweepEndsQueuedCallsPastTheirDeadline: a namespace's queued calls
// that no worker took are its consumer's pending queued events; the sweep
// ends those whose deadline passed more than the grace ago, leaves the
// others (and calls awaiting approval), and does not read the ended ones
// again.
func TestSweepEndsQueuedCallsPastTheirDeadline(t *testing.T) {
	_, nc, js, names := jetStreamEnv(t)
	ctx := context.Background()
	if err := resources.CreateNamespaceConsumer(ctx, js, names, resources.DefaultNamespaceConsumer("t")); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, call := range []*messages.CallRequest{
		{CallID: "expired1", Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: now.Add(-2 * time.Hour), Deadline: now.Add(-time.Hour)},
		{CallID: "current1", Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: now, Deadline: now.Add(time.Hour)},
		{CallID: "expired2", Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: now.Add(-2 * time.Hour), Deadline: now.Add(-time.Hour)},
		// Past its deadline, but not by the grace yet.
		{CallID: "recent1", Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: now, Deadline: now.Add(-time.Second)},
	} {
		if _, err := js.PublishMsg(ctx, queuedEventMsg(t, names, call)); err != nil {
			t.Fatal(err)
		}
	}
	// A call awaiting approval past its deadline: the approvals' sweep's.
	l := ledger.New(nc, js, names)
	defer l.Close()
	if _, err := l.Hold(ctx, &messages.CallRequest{CallID: "held1", Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: now.Add(-time.Hour), Deadline: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// Another namespace's queued call, without a consumer: nobody's work.
	other := &messages.CallRequest{CallID: "other1", Tool: "u-echo", Namespace: "u", Method: "echo", QueuedAt: now.Add(-time.Hour), Deadline: now.Add(-time.Minute)}
	if _, err := js.PublishMsg(ctx, queuedEventMsg(t, names, other)); err != nil {
		t.Fatal(err)
	}
	// The sweep passes over a namespace whose consumer shows nothing
	// pending, and the server counts a stored call there a moment later on
	// a busy machine: the sweep is tried once the five calls of t show.
	consumerName, err := names.Consumers().Durable("t")
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := stream.Consumer(ctx, consumerName)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(patience); ; {
		info, err := consumer.Info(ctx)
		if err == nil && info.NumPending == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer shows %+v (%v), want 5 calls pending", info, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	committer := &flakyCommitter{}
	// The grace leaves recent1 unswept however long a busy machine took
	// to get here, and is well short of the others' time past deadline.
	s := &sweeper{stream: &callStream{nc: nc, names: names, stream: stream, log: discardLogger()}, ledger: committer, grace: 10 * time.Minute, unavailableWait: 20 * time.Millisecond, log: discardLogger()}
	if err := s.sweepCalls(ctx); err != nil {
		t.Fatal(err)
	}
	var ended []string
	for _, res := range committer.committed {
		if res.Status != messages.StateTimedOut || res.Error.Code != messages.ResultTimedOut {
			t.Errorf("call %s ended %s (%+v), want timed out", res.CallID, res.Status, res.Error)
		}
		ended = append(ended, res.CallID)
	}
	if fmt.Sprint(ended) != "[expired1 expired2]" {
		t.Fatalf("the sweep ended %v, want [expired1 expired2]", ended)
	}
	if got := s.sweptUpTo("t"); got != 1 {
		t.Errorf("swept up to %d, want 1: the first call not ended stops the cursor", got)
	}
	// The next sweep reads from past the first, which it does not end again.
	committer.committed = nil
	if err := s.sweepCalls(ctx); err != nil {
		t.Fatal(err)
	}
	if len(committer.committed) != 1 || committer.committed[0].CallID != "expired2" {
		t.Errorf("the second sweep committed %v, want expired2 again only (its commit finds the result)", committer.committed)
	}
}
