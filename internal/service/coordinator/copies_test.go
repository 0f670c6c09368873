package coordinator_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestCopiesOfAHeldSubmitAreAnsweredByTheFirst: copies of a submit that
// waits for its result, sent to the first's reply subject while the
// coordinator handles the first (as a client copies a request it has no
// receipt for), are not handled again: the call's queued event is
// written once, and one answer, the result, comes to the reply subject.
// A copy to another reply subject (a new attempt) is answered on its own.
func TestCopiesOfAHeldSubmitAreAnsweredByTheFirst(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	coord := testenv.Coordinator(t, srv.URL())
	started, release := make(chan struct{}, 1), make(chan struct{})
	hold := worker.Func("hold", "Waits to be released.", func(ctx context.Context, _ struct{}) (string, error) {
		started <- struct{}{}
		select {
		case <-release:
			return "released", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "slow", Tools: []worker.Tool{hold}})
	ctx := testenv.Context(t)
	nc := testenv.Connect(t, srv.URL())

	route := nuid.Next()
	callID := route + nuid.Next()
	writes, err := nc.SubscribeSync("toolbus.events.*." + callID + ".queued.>")
	if err != nil {
		t.Fatal(err)
	}
	answers, err := nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	attempt, err := nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"tool":"slow-hold","arguments":{},"route":"` + route + `","call_id":"` + callID + `","wait":true}`)
	submit := func(reply string) {
		msg := nats.NewMsg("toolbus.api.calls.submit")
		msg.Header.Set("Content-Type", "application/json")
		msg.Reply, msg.Data = reply, body
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	submit(answers.Subject)
	testenv.Receive(t, started, "the tool's start")
	const copies = 5
	for range copies {
		submit(answers.Subject)
	}
	testenv.Eventually(t, "the copies left to the first's answer", func() bool {
		return coord.CopiesLeftToTheirFirst() == copies
	})
	submit(attempt.Subject)
	close(release)

	for _, sub := range []*nats.Subscription{answers, attempt} {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var reply messages.SubmitReply
		if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.CallID != callID || reply.Result == nil || reply.Result.Status != messages.StateCompleted {
			t.Fatalf("answer on %s: %s (%v)", sub.Subject, msg.Data, err)
		}
	}
	if _, err := writes.NextMsgWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	// Flushed after the answers: anything the copies had sent would have
	// come by now.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := answers.Pending(); n != 0 {
		t.Fatalf("%d more answers to the first's reply subject, want none", n)
	}
	if n, _, _ := writes.Pending(); n > 1 {
		t.Fatalf("the call's queued event was written %d more times, want at most once more (the new attempt's)", n)
	}
}
