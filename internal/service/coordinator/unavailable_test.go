package coordinator

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// startCoordinator runs a coordinator on the connection until the test ends.
func startCoordinator(t *testing.T, nc *nats.Conn) *Coordinator {
	t.Helper()
	c, err := New(Config{Conn: nc, NoBuiltinTools: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return c
}

// unanswered stands in for the streams of the subjects while they do not
// exist, as a stream without a leader: every publish to them is answered
// 503. The first one also recreates the streams, after which it stops
// answering. It returns how many publishes it answered, and a channel
// closed once the streams are back.
func unanswered(t *testing.T, nc *nats.Conn, js jetstream.JetStream, names messages.Names, subjects ...string) (*atomic.Int32, <-chan struct{}) {
	t.Helper()
	var (
		answered atomic.Int32
		once     sync.Once
		subs     []*nats.Subscription
		mu       sync.Mutex
		back     = make(chan struct{})
	)
	handler := func(msg *nats.Msg) {
		answered.Add(1)
		reply := nats.NewMsg(msg.Reply)
		reply.Header.Set("Status", "503")
		_ = msg.RespondMsg(reply)
		once.Do(func() {
			go func() {
				defer close(back)
				if err := resources.Ensure(context.Background(), js, names, resources.Config{}); err != nil {
					t.Error(err)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, sub := range subs {
					_ = sub.Unsubscribe()
				}
			}()
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, subject := range subjects {
		sub, err := nc.Subscribe(subject, handler)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &answered, back
}

func TestSubmitWaitsOutStreamsThatDoNotAnswer(t *testing.T) {
	_, nc, js, names := jetStreamEnv(t)
	ctx := context.Background()
	c := startCoordinator(t, nc)
	catalogKV, err := js.KeyValue(ctx, names.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	def := tool("t-echo", "").Definition
	if err := catalog.NewStore(catalogKV).PutTool(ctx, &def); err != nil {
		t.Fatal(err)
	}

	// The stream the submit writes to is gone until the first write to it
	// is refused. (The namespace's consumer is taken to exist: it is
	// created once per namespace, and this test is about the write.)
	c.submitter.queue.consumers.Store("t", struct{}{})
	if err := js.DeleteStream(ctx, names.EventsStream()); err != nil {
		t.Fatal(err)
	}
	answered, back := unanswered(t, nc, js, names, names.EventsSubjects())

	sctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	reply, err := c.Submit(sctx, &messages.SubmitRequest{Tool: "t-echo"}, nil)
	if answered.Load() == 0 {
		t.Fatal("no write was refused: the test did not make the streams unavailable")
	}
	<-back
	if err != nil {
		t.Fatalf("submit refused while the streams came back: %v", err)
	}
	if reply.State != messages.StateQueued || reply.Duplicate {
		t.Errorf("reply %+v, want queued", reply)
	}
	info, err := c.calls.get(sctx, &messages.GetCallRequest{CallID: reply.CallID})
	if err != nil {
		t.Fatalf("calls.get of the queued call: %v", err)
	}
	if info.State != messages.StateQueued || info.Tool != "t-echo" {
		t.Errorf("calls.get = %+v, want the queued call of t-echo", info)
	}
	stream, err := js.Stream(sctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	if si, err := stream.Info(sctx); err != nil || si.State.Msgs != 1 {
		t.Errorf("events stream holds %v messages (%v), want the queued event once", si.State.Msgs, err)
	}
}

func TestConcurrentIdempotentSubmitsAreOneCall(t *testing.T) {
	_, nc, _, _ := jetStreamEnv(t)
	ctx := context.Background()
	c := startCoordinator(t, nc)
	var runs atomic.Int32
	w, err := worker.New(worker.Config{Conn: nc, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	count := worker.Func("count", "Counts its runs.", func(context.Context, struct{}) (int32, error) {
		return runs.Add(1), nil
	})
	if err := w.Serve(worker.Namespace{Name: "t", Tools: []worker.Tool{count}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		_ = w.Stop(sctx)
	})

	const submits = 50
	sctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	replies := make([]*messages.SubmitReply, submits)
	errs := make([]error, submits)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range submits {
		wg.Go(func() {
			<-start
			replies[i], errs[i] = c.Submit(sctx, &messages.SubmitRequest{Tool: "t-count", Agent: "a", IdempotencyKey: "once"}, nil)
		})
	}
	close(start)
	wg.Wait()

	callID := messages.IdempotentCallID("a", "once")
	firsts := 0
	for i := range submits {
		if errs[i] != nil {
			t.Fatalf("submit %d: %v", i, errs[i])
		}
		if replies[i].CallID != callID {
			t.Errorf("submit %d answered call %s, want %s", i, replies[i].CallID, callID)
		}
		if !replies[i].Duplicate {
			firsts++
		}
	}
	if firsts > 1 {
		t.Errorf("%d submits were answered as the first", firsts)
	}
	res, err := c.ledger.AwaitResult(sctx, "", "", callID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateCompleted {
		t.Errorf("result %s (%+v), want completed", res.Status, res.Error)
	}
	// A second run would have to be delivered again after the result;
	// the worker is stopped before counting.
	sctx2, cancel2 := context.WithTimeout(context.Background(), patience)
	defer cancel2()
	if err := w.Stop(sctx2); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
}
