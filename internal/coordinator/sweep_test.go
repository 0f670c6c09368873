package coordinator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/natsserver"
	"github.com/toolbus/toolbus/internal/resources"
	"github.com/toolbus/toolbus/internal/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// jetStreamEnv is an embedded server with Toolbus's streams and buckets.
func jetStreamEnv(t *testing.T) (*natsserver.Server, *nats.Conn, jetstream.JetStream, messages.Names) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
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

func (f *flakyCommitter) Commit(_ context.Context, _ string, res *messages.CallResult, _ string) (bool, error) {
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
	stream, err := js.Stream(ctx, names.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := names.CallSubject(messages.ToolName{Namespace: "t", Method: "echo"})
	call := &messages.CallRequest{CallID: "exhausted1", Tool: "t-echo", Namespace: "t", Method: "echo", QueuedAt: time.Now().UTC()}
	msg, err := newMsg(subject, call)
	if err != nil {
		t.Fatal(err)
	}
	msg.Header.Set(messages.HeaderMsgID, call.CallID)
	ack, err := js.PublishMsg(ctx, msg)
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
	adv := maxDeliveriesAdvisory{Stream: names.CallsStream(), StreamSeq: ack.Sequence, Deliveries: 4}

	s.endExhausted(ctx, adv)
	if len(ledger.committed) != 0 || s.pendingExhausted() != 1 {
		t.Fatalf("committed %d, pending %d; want the call kept for the next sweep", len(ledger.committed), s.pendingExhausted())
	}
	if _, err := stream.GetMsg(ctx, ack.Sequence); err != nil {
		t.Fatalf("the call left the queue without its failure recorded: %v", err)
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
	if _, err := stream.GetMsg(ctx, ack.Sequence); err == nil {
		t.Error("the failed call is still in the queue")
	}
}
