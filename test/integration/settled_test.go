package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestCallSettledWithoutAResultIsEnded: a call whose work item its
// namespace's consumer settled without a result — as when its deliveries
// run out and the max-deliveries advisory reaches no coordinator, or a
// worker lets it go without writing one — is ended by the coordinators'
// sweep, not left running for ever. The test terminates the work item
// itself, as a worker would, with no coordinator listening for an
// advisory in the way.
func TestCallSettledWithoutAResultIsEnded(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	url := srv.URL()
	testenv.Coordinator(t, url, func(cfg *coordinator.Config) { cfg.SweepInterval = 50 * time.Millisecond })
	c := testenv.Client(t, url, client.Options{Agent: "bot"})
	settledWithoutResult(t, url, c, "lost")
}

// settledWithoutResult makes a call of namespace ns that its queue settles
// without a result (its worker stops, and the delivery is terminated), and
// waits for a coordinator's sweep of settled calls to end it.
func settledWithoutResult(t *testing.T, url string, c *client.Client, ns string) {
	t.Helper()
	ctx := testenv.Context(t)
	echo := worker.Func("echo", "Echoes.", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	w := testenv.Worker(t, url, worker.Config{}, worker.Namespace{Name: ns, Tools: []worker.Tool{echo}})
	if res, err := c.Call(ctx, ns+"-echo", map[string]string{"text": "served"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("a call while the worker serves: %+v %v", res, err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: ns + "-echo", Arguments: messages.JSON(`{"text":"lost"}`)})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(testenv.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	consumer, _ := names.Consumers().Durable(ns)
	cons, err := js.Consumer(ctx, names.EventsStream(), consumer)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(testenv.Patience))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg.Subject(), reply.CallID) {
		t.Fatalf("delivered %s, not the call %s", msg.Subject(), reply.CallID)
	}
	if err := msg.Term(); err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, reply.CallID)
	if err != nil {
		t.Fatalf("a call settled without a result did not end: %v", err)
	}
	if res.Status != messages.StateFailed || res.Error == nil || res.Error.Code != messages.ResultAttempts {
		t.Fatalf("result %+v, want failed with %s", res, messages.ResultAttempts)
	}
}
