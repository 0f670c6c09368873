package integration

import (
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestBatchTurnOfAnotherAgent: a batch claims its turn once for all its
// calls; in a turn another agent named first, each call is refused with
// conflict and nothing is queued, and the turn's owner goes on using it.
func TestBatchTurnOfAnotherAgent(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	var runs atomic.Int64
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(&runs)})
	owner := testenv.Client(t, srv.URL(), client.Options{Agent: "owner"})
	other := testenv.Client(t, srv.URL(), client.Options{Agent: "other"})
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)
	toolCalls := json.RawMessage(`[{"type":"tool_use","id":"toolu_1","name":"t-add","input":{"a":1,"b":1}},{"type":"tool_use","id":"toolu_2","name":"t-add","input":{"a":2,"b":2}}]`)

	first, err := owner.RunToolCalls(ctx, "anthropic", toolCalls, client.WithTurn("turn-owned"))
	if err != nil || !first.Complete {
		t.Fatalf("the owner's batch: %+v %v", first, err)
	}
	queued := queuedCallsOn(t, nc)
	refused, err := other.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", ToolCalls: messages.JSON(`[{"type":"tool_use","id":"toolu_3","name":"t-add","input":{"a":3,"b":3}},{"type":"tool_use","id":"toolu_4","name":"t-add","input":{"a":4,"b":4}}]`), Turn: "turn-owned"})
	if err != nil {
		t.Fatal(err)
	}
	for i, bc := range refused.Calls {
		if bc.CallID != "" || bc.Error == nil || bc.Error.Code != messages.CodeConflict {
			t.Errorf("call %d of another agent's batch in the turn: %+v %v", i, bc, bc.Error)
		}
	}
	if got := queuedCallsOn(t, nc); got != queued {
		t.Errorf("the refused batch queued %d calls", got-queued)
	}
	again, err := owner.RunToolCalls(ctx, "anthropic", json.RawMessage(`[{"type":"tool_use","id":"toolu_5","name":"t-add","input":{"a":5,"b":5}}]`), client.WithTurn("turn-owned"))
	if err != nil || !again.Complete || len(again.Calls) != 1 || again.Calls[0].Error != nil {
		t.Fatalf("the owner's next batch in the turn: %+v %v", again, err)
	}
	if runs.Load() != 3 {
		t.Errorf("%d runs, want 3", runs.Load())
	}
}

// TestBatchInACluster: on streams of three replicas, where a read of a
// replica that finds no call is confirmed with the stream's leader call
// by call, a batch runs its calls once and, sent again, names the same
// calls and queues nothing.
func TestBatchInACluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	_, urls := testenv.Cluster(t, 3)
	testenv.Coordinator(t, urls, func(cfg *coordinator.Config) { cfg.Resources.Replicas = 3 })
	var runs atomic.Int64
	testenv.Worker(t, urls, worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(&runs)})
	c := testenv.Client(t, urls, client.Options{Agent: "bot"})
	nc := testenv.Connect(t, urls)
	ctx := testenv.Context(t)
	req := messages.SubmitBatchRequest{Format: "anthropic", Turn: "turn-cluster", ToolCalls: messages.JSON(`[{"type":"tool_use","id":"toolu_1","name":"t-add","input":{"a":1,"b":1}},{"type":"tool_use","id":"toolu_2","name":"t-add","input":{"a":2,"b":2}}]`)}
	first, err := c.SubmitBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.AwaitResults(ctx, "anthropic", first.Calls)
	if err != nil || !res.Complete {
		t.Fatalf("results: %+v %v", res, err)
	}
	queued := queuedCallsOn(t, nc)
	again, err := c.SubmitBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, bc := range again.Calls {
		if bc.CallID == "" || bc.CallID != first.Calls[i].CallID || !bc.Duplicate {
			t.Errorf("call %d sent again: %+v, first %+v", i, bc, first.Calls[i])
		}
	}
	if got := queuedCallsOn(t, nc); got != queued {
		t.Errorf("the batch sent again queued %d calls", got-queued)
	}
	if runs.Load() != 2 {
		t.Errorf("%d runs, want 2", runs.Load())
	}
}
