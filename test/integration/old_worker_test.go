package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// v3Worker takes one call as a worker of an earlier release of version 3
// does, from docs/protocol.md: it pulls the queued event, reads whether
// the call has a result and, if not, runs it (ran reports it) and writes
// its result, first write winning. hold runs between the pull and the
// read.
func v3Worker(t *testing.T, js jetstream.JetStream, cons jetstream.Consumer, hold func()) (callID string, ran bool) {
	t.Helper()
	ctx := testenv.Context(t)
	msg, err := cons.Next(jetstream.FetchMaxWait(testenv.Patience))
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	var queued messages.CallEvent
	if _, err := messages.Decode(messages.Header(msg.Headers()), msg.Data(), &queued); err != nil || queued.Request == nil {
		t.Fatalf("a worker of version 3 cannot read the queued event (Toolbus-Version %q): %v", msg.Headers().Get(messages.HeaderVersion), err)
	}
	req := queued.Request
	hold()
	bucket := names.Events().Bucket(msg.Subject())
	resultSubject, err := names.Events().Subject(bucket, req.CallID, messages.EventResult, req.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, resultSubject); err == nil {
		if err := msg.Ack(); err != nil {
			t.Fatal(err)
		}
		return req.CallID, false
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	res := &messages.CallResult{CallID: req.CallID, Tool: req.Tool, Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("done")},
		Attempt: 1, Worker: "v3", QueuedAt: req.QueuedAt, StartedAt: now, FinishedAt: now}
	data, err := messages.Msgpack.Marshal(&messages.CallEvent{CallID: req.CallID, Kind: messages.EventResult, Time: now, Attempt: 1, Worker: "v3", Result: res})
	if err != nil {
		t.Fatal(err)
	}
	out := &nats.Msg{Subject: resultSubject, Header: nats.Header(messages.Msgpack.NewHeader()), Data: data}
	out.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if _, err := js.PublishMsg(ctx, out); err != nil {
		t.Fatalf("write the result: %v", err)
	}
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
	return req.CallID, true
}

// TestOldWorkerWithNewCoordinators: a worker of an earlier release of
// version 3, which reads every call's result before running it, keeps
// working with coordinators that label queued events 3.1 and send cancel
// notices first: it reads their queued events, runs their calls, and
// never runs a call whose cancel answered `cancelled`; a call it holds
// when the cancel comes is answered `cancelling` and may run to its end.
func TestOldWorkerWithNewCoordinators(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	// A worker of this release registers the tool, and stops.
	first := testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{newCounter().tool()}})
	if err := first.Stop(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	submit := func(label string) string {
		r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{"label":"` + label + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return r.CallID
	}
	cons, err := js.Consumer(ctx, names.EventsStream(), "ns_t")
	if err != nil {
		t.Fatal(err)
	}

	// A call runs.
	id := submit("runs")
	if got, ran := v3Worker(t, js, cons, func() {}); got != id || !ran {
		t.Fatalf("the old worker took %s (ran %v), want %s run", got, ran, id)
	}
	if res, err := c.Wait(ctx, id); err != nil || res.Status != messages.StateCompleted || res.Worker != "v3" {
		t.Fatalf("result %+v %v", res, err)
	}

	// A call cancelled before any worker took it is not run.
	id = submit("cancelled in the queue")
	reply, err := c.Cancel(ctx, id, "no longer needed")
	if err != nil || reply.Outcome != messages.CancelDone {
		t.Fatalf("cancel of a queued call: %+v %v", reply, err)
	}
	if got, ran := v3Worker(t, js, cons, func() {}); got != id || ran {
		t.Fatalf("the old worker took %s (ran %v), want %s not run", got, ran, id)
	}

	// A call the worker holds when the cancel comes: `cancelling`, and
	// this worker, which reads only the result, runs it.
	id = submit("cancelled in hand")
	var held *messages.CancelReply
	if got, ran := v3Worker(t, js, cons, func() {
		if held, err = c.Cancel(ctx, id, "too late for this worker"); err != nil {
			t.Fatal(err)
		}
	}); got != id || !ran {
		t.Fatalf("the old worker took %s (ran %v), want %s run", got, ran, id)
	}
	if held.Outcome != messages.CancelSignalled || held.State != messages.StateQueued {
		t.Fatalf("cancel of a call a worker holds: %+v, want cancelling while queued", held)
	}
	if res, err := c.Wait(ctx, id); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("result %+v %v", res, err)
	}
}
