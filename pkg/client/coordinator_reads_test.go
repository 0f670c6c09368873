package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestCoordinatorReadsFollowACall: with CoordinatorReads, Watch yields a
// running call's events live and in order through calls.events, each
// step as the tool takes it, and Wait and Call get results through
// calls.get, on a route and with an idempotency key.
func TestCoordinatorReadsFollowACall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	b.serve(t)
	c := newClient(t, testenv.Connect(t, b.srv.URL()), client.Options{CoordinatorReads: true})

	sub, err := c.Submit(b.ctx, messages.SubmitRequest{Tool: "t-steps"})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan *messages.CallEvent, 64)
	watchErr := make(chan error, 1)
	go func() {
		defer close(events)
		for ev, err := range c.Watch(b.ctx, sub.CallID) {
			if err != nil {
				watchErr <- err
				return
			}
			events <- ev
		}
	}()
	var seen []string
	next := func() *messages.CallEvent {
		t.Helper()
		ev := receive(t, b.ctx, events, "event")
		if ev == nil { // closed
			t.Fatalf("the watch ended after %v: %v", seen, <-watchErr)
		}
		name := string(ev.Kind)
		if ev.Log != nil {
			name += " " + ev.Log.Message
		}
		seen = append(seen, name)
		return ev
	}
	// Each step is yielded before the tool may take the next: the long
	// poll answers as the event is stored.
	for step := 1; step <= 3; step++ {
		b.steps <- struct{}{}
		for ev := next(); ev.Log == nil; ev = next() {
		}
	}
	for ev := next(); ev.Kind != messages.EventResult; ev = next() {
	}
	want := []string{"queued", "started", "log step 1", "log step 2", "log step 3", "result"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("the watch yielded %v, want %v", seen, want)
	}
	if _, ok := <-events; ok {
		t.Fatal("the watch went on after the result")
	}
	if res, err := c.Wait(b.ctx, sub.CallID); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("Wait: %+v %v", res, err)
	}
	if res, err := c.Call(b.ctx, "t-count", labelArgs{Label: "routed"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("Call on a route: %+v %v", res, err)
	}
	if res, err := c.Call(b.ctx, "t-count", labelArgs{Label: "keyed"}, client.WithIdempotencyKey("k")); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("Call with a key: %+v %v", res, err)
	}
}

// TestCallEventsRepliesFitInAMessage: events too large for one reply
// together come in several, each under the server's maximum message, and
// Watch yields them all.
func TestCallEventsRepliesFitInAMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testenv.Coordinator(t, b.srv.URL())
	const lines, size = 12, 200 << 10
	loud := worker.Func("log", "Logs large lines.", func(ctx context.Context, in struct{}) (string, error) {
		for range lines {
			worker.Log(ctx, "info", strings.Repeat("x", size))
		}
		return "logged", nil
	})
	testenv.Worker(t, b.srv.URL(), worker.Config{}, worker.Namespace{Name: "big", Tools: []worker.Tool{loud}})
	nc := testenv.Connect(t, b.srv.URL())
	c := newClient(t, nc, client.Options{CoordinatorReads: true})

	sub, err := c.Submit(b.ctx, messages.SubmitRequest{Tool: "big-log"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(b.ctx, sub.CallID); err != nil {
		t.Fatal(err)
	}
	logs, replies := 0, 0
	var after uint64
	for finished := false; !finished; replies++ {
		var reply messages.CallEventsReply
		if err := request(b.ctx, nc, messages.EndpointCallsEvents, &messages.CallEventsRequest{CallID: sub.CallID, After: after, Max: messages.MaxCallEvents}, &reply); err != nil {
			t.Fatal(err)
		}
		if len(reply.Events) == 0 {
			t.Fatalf("reply %d holds no event after %d", replies, after)
		}
		for _, ev := range reply.Events {
			if ev.Log != nil {
				logs++
			}
		}
		after, finished = reply.Last, reply.Finished
	}
	if logs != lines || replies < 2 {
		t.Fatalf("%d log events in %d replies, want %d in several", logs, replies, lines)
	}
	watched := 0
	for ev, err := range c.Watch(b.ctx, sub.CallID) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Log != nil {
			watched++
		}
	}
	if watched != lines {
		t.Fatalf("Watch yielded %d log events, want %d", watched, lines)
	}
}

// request sends one API request in MessagePack, as a client in another
// language would, and decodes its reply.
func request(ctx context.Context, nc *nats.Conn, endpoint string, in, out any) error {
	data, err := messages.Msgpack.Marshal(in)
	if err != nil {
		return err
	}
	reply, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: "toolbus.api." + endpoint, Data: data})
	if err != nil {
		return err
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("%s: %s", code, reply.Header.Get("Nats-Service-Error"))
	}
	_, err = messages.Decode(messages.Header(reply.Header), reply.Data, out)
	return err
}
