package coordinator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// consumerRequest sends a ConsumerRequest for namespace ns in JSON and
// returns the reply.
func consumerRequest(t *testing.T, nc *nats.Conn, ns string, req any) *nats.Msg {
	t.Helper()
	names := messages.MustNames(messages.DefaultPrefix)
	subject, err := names.Consumers().RequestSubject(ns)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: subject, Header: nats.Header(messages.JSONCodec.NewHeader()), Data: data}
	reply, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatalf("consumer request for %s: %v", ns, err)
	}
	return reply
}

// A worker's request for its namespace's consumer makes a pull consumer
// with the namespace's filter and the request's settings, and its
// namespace's results store; settings out of range are refused with
// bad_request and change nothing.
func TestCoordinatorConfiguresTheNamespacesConsumer(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames(messages.DefaultPrefix)

	reply := consumerRequest(t, nc, "books", messages.ConsumerRequest{MaxConcurrency: 7, AckWaitMS: 1500, MaxAttempts: 4, Worker: "w-1"})
	var out messages.ConsumerReply
	if reply.Header.Get(micro.ErrorCodeHeader) != "" || json.Unmarshal(reply.Data, &out) != nil || out.Consumer != "ns_books" {
		t.Fatalf("reply %v %s", reply.Header, reply.Data)
	}
	cons, err := js.Consumer(ctx, names.EventsStream(), "ns_books")
	if err != nil {
		t.Fatal(err)
	}
	c := cons.CachedInfo().Config
	if c.DeliverSubject != "" || c.FilterSubject != "toolbus.events.*.*.queued.*.books" || c.MaxAckPending != 7 || c.AckWait != 1500*time.Millisecond || c.MaxDeliver != 5 || c.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("consumer %+v", c)
	}
	store, err := names.NamespaceResultsBucket("books")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.ObjectStore(ctx, store); err != nil {
		t.Fatalf("the namespace's results store: %v", err)
	}

	for what, req := range map[string]any{
		"no concurrency":           messages.ConsumerRequest{AckWaitMS: 1000, MaxAttempts: 1},
		"a lease of 1 ms":          messages.ConsumerRequest{MaxConcurrency: 1, AckWaitMS: 1, MaxAttempts: 1},
		"a thousand and one tries": messages.ConsumerRequest{MaxConcurrency: 1, AckWaitMS: 1000, MaxAttempts: 1001},
		"a worker ID with a dot":   messages.ConsumerRequest{MaxConcurrency: 1, AckWaitMS: 1000, MaxAttempts: 1, Worker: "a.b"},
	} {
		reply := consumerRequest(t, nc, "books", req)
		var e messages.Error
		if reply.Header.Get(micro.ErrorCodeHeader) != "400" || json.Unmarshal(reply.Data, &e) != nil || (e.Code != messages.CodeBadRequest && e.Code != messages.CodeInvalidName) {
			t.Errorf("%s: %v %s", what, reply.Header, reply.Data)
		}
	}
	if cons, err := js.Consumer(ctx, names.EventsStream(), "ns_books"); err != nil || cons.CachedInfo().Config.MaxAckPending != 7 {
		t.Fatalf("after the refused requests: %v", err)
	}
}

// A worker that starts gets its namespace's consumer from the coordinator,
// with its own settings; one that starts where no coordinator listens,
// on a server that lets it, creates the consumer itself.
func TestWorkerGetsItsConsumerWithItsSettings(t *testing.T) {
	t.Parallel()
	noop := worker.Func("noop", "Does nothing.", func(ctx context.Context, in struct{}) (string, error) { return "", nil })
	for _, withCoordinator := range []bool{true, false} {
		srv := testenv.Server(t)
		if withCoordinator {
			testenv.Coordinator(t, srv.URL())
		}
		testenv.Worker(t, srv.URL(), worker.Config{AckWait: 9 * time.Second}, worker.Namespace{Name: "books", Tools: []worker.Tool{noop}, MaxConcurrency: 3, MaxAttempts: 2})
		js, err := jetstream.New(testenv.Connect(t, srv.URL()))
		if err != nil {
			t.Fatal(err)
		}
		cons, err := js.Consumer(testenv.Context(t), messages.MustNames(messages.DefaultPrefix).EventsStream(), "ns_books")
		if err != nil {
			t.Fatalf("with a coordinator %v: %v", withCoordinator, err)
		}
		if c := cons.CachedInfo().Config; c.MaxAckPending != 3 || c.AckWait != 9*time.Second || c.MaxDeliver != 3 || c.DeliverSubject != "" {
			t.Fatalf("with a coordinator %v: consumer %+v", withCoordinator, c)
		}
	}
}
