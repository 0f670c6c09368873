package integration

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestKilledWorkersCallRunsElsewhere kills a worker process in the middle
// of a call; another worker process finishes it, as the second attempt.
func TestKilledWorkersCallRunsElsewhere(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	bin := testenv.Binary(t, "./cmd/worker")
	first := testenv.Start(t, bin, "--server", srv.URL(), "--demo", "--id", "first", "--ack-wait", "1s")
	first.WaitLine(t, "worker first ready")
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, c, r.CallID, messages.EventProgress)
	first.Kill()
	second := testenv.Start(t, bin, "--server", srv.URL(), "--demo", "--id", "second", "--ack-wait", "1s")
	second.WaitLine(t, "worker second ready")
	evs := collect(t, c, r.CallID)
	res := evs[len(evs)-1].Result
	if res.Status != messages.StateCompleted || res.Worker != "second" || res.Attempt != 2 {
		t.Fatalf("result %+v", res)
	}
	var starts []string
	results := 0
	for _, ev := range evs {
		switch ev.Kind {
		case messages.EventStarted:
			starts = append(starts, ev.Worker)
		case messages.EventResult:
			results++
		}
	}
	if len(starts) != 2 || starts[0] != "first" || starts[1] != "second" || results != 1 {
		t.Fatalf("starts %v, %d results", starts, results)
	}
}

// TestCoordinatorRestartLosesNothing kills the coordinator in the middle of
// a call and starts a new one: the watcher goes on, the turn is intact.
func TestCoordinatorRestartLosesNothing(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	g := newGate()
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{g.tool()}}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	bin := testenv.Binary(t, "./cmd/coordinator")
	first := testenv.Start(t, bin, "--server", srv.URL())
	first.WaitLine(t, "coordinator started")
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	running, err := c.Submit(ctx, messages.SubmitRequest{Tool: "t-gate", Turn: "turn-1"})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"before"}`), Turn: "turn-1", Wait: true})
	if err != nil || done.Result == nil {
		t.Fatalf("%+v %v", done, err)
	}
	receive(t, g.started, "the gated call to start")
	results := make(chan *messages.CallResult, 1)
	go func() {
		res, err := c.Wait(context.Background(), running.CallID)
		if err != nil {
			t.Error(err)
		}
		results <- res
	}()
	first.Kill()
	second := testenv.Start(t, bin, "--server", srv.URL())
	second.WaitLine(t, "coordinator started")
	close(g.release)
	res := receive(t, results, "the result after the restart")
	if res == nil || res.Status != messages.StateCompleted {
		t.Fatalf("result %+v", res)
	}
	turn, err := c.Turn(ctx, "turn-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(turn.Calls) != 2 || turn.Calls[0].CallID != running.CallID || turn.Calls[1].CallID != done.CallID {
		t.Fatalf("turn %+v", turn)
	}
	for _, call := range turn.Calls {
		if call.State != messages.StateCompleted || call.Result == nil {
			t.Fatalf("call %+v", call)
		}
	}
	if res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "after"}); err != nil || res.Content[0].Text != "after" {
		t.Fatalf("call after restart: %+v %v", res, err)
	}
}
