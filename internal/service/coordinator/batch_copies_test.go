package coordinator

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestCopySubject: the events stream republishes the committed result of
// a batch's call (an idempotent call ID, without a route) to the subject
// a batch with wait_ms subscribes to, under the namespace that wrote it,
// and to no subject of another namespace.
func TestCopySubject(t *testing.T) {
	t.Parallel()
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	names := messages.MustNames("")
	if _, err := js.CreateStream(ctx, resources.EventsStreamConfig(names, resources.Config{})); err != nil {
		t.Fatal(err)
	}
	l := ledger.New(nc, js, names)
	t.Cleanup(l.Close)
	callID := messages.IdempotentCallID("bot", "turn-1/toolu_1")
	subject, ok := copySubject(names, callID, "t")
	if !ok {
		t.Fatalf("no copy subject for %s", callID)
	}
	other, _ := copySubject(names, callID, "u")
	copies := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(subject, copies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	strays := make(chan *nats.Msg, 4)
	otherSub, err := nc.ChanSubscribe(other, strays)
	if err != nil {
		t.Fatal(err)
	}
	defer otherSub.Unsubscribe()
	if _, err := l.Commit(ctx, messages.TurnBucket("turn-1"), "t", &messages.CallResult{CallID: callID, Tool: "t-add", Status: messages.StateCompleted}, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-copies:
		var ev messages.CallEvent
		if _, err := messages.DecodeStored(messages.Header(msg.Header), msg.Data, &ev); err != nil || ev.Result == nil || ev.Result.CallID != callID {
			t.Errorf("copy on %s: %+v %v", msg.Subject, ev, err)
		}
	case <-ctx.Done():
		t.Fatalf("no copy of the result on %s", subject)
	}
	// Stored after the result, so its copy is sent after the result's.
	if _, err := l.Commit(ctx, messages.TurnBucket("turn-1"), "t", &messages.CallResult{CallID: messages.IdempotentCallID("bot", "turn-1/toolu_2"), Tool: "t-add", Status: messages.StateCompleted}, ""); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-strays:
		t.Errorf("a copy on another namespace's subject %s", msg.Subject)
	default:
	}
	if _, ok := copySubject(names, "short", "t"); ok {
		t.Error("a copy subject for a call ID no longer than a route")
	}
}
