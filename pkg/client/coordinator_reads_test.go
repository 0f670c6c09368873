package client_test

import (
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
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
