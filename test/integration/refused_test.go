package integration

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestQueuedCallIsNotReportedRefused: a call is queued by its quiet
// submit, and then no coordinator listens any more (a node of the cluster
// restarting, the coordinators reconnecting). Its caller, who follows
// calls through the coordinators (an agent's user with identities), can
// then neither read the call nor submit it again, and is told nothing
// either way; Call keeps waiting within its context, and returns the
// call's result once it is stored, rather than a refusal that would make
// its caller run the tool a second time.
func TestQueuedCallIsNotReportedRefused(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	url := srv.URL()
	coord := testenv.Coordinator(t, url)
	g := newGate()
	testenv.Worker(t, url, worker.Config{}, worker.Namespace{Name: "g", Tools: []worker.Tool{g.tool()}})
	c := testenv.Client(t, url, client.Options{Codec: messages.JSONCodec, Agent: "bot", CoordinatorReads: true, Route: "refusedroute0000000001"})
	ctx := testenv.Context(t)
	type outcome struct {
		res *messages.CallResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Call(ctx, "g-gate", map[string]any{})
		done <- outcome{res, err}
	}()
	callID := receive(t, g.started, "the call's start")
	if err := coord.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The caller now finds no coordinator, whatever it sends: nothing
	// says the call was queued, nor that it was refused. Call must go on
	// waiting; an SDK that gives up does so within seconds (its lookup
	// after 2s, then six submits that no coordinator receives), so the
	// tool is let finish only after 10s.
	select {
	case o := <-done:
		t.Fatalf("Call ended while no coordinator listened and its tool still ran: %+v %v", o.res, o.err)
	case <-time.After(10 * time.Second):
	}
	close(g.release)
	select {
	case o := <-done:
		if o.err != nil || o.res == nil || o.res.Status != messages.StateCompleted || o.res.CallID != callID {
			t.Fatalf("Call of a call that was queued and ran: %+v %v", o.res, o.err)
		}
	case <-time.After(testenv.Patience):
		t.Fatal("Call did not return the result stored")
	}
}
