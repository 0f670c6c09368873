package integration

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
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

// TestBatchInACluster: on streams of three replicas, where each call's
// queued event is written only if its call ID has none, a batch runs its
// calls once and, sent again, names the same calls and queues nothing.
func TestBatchInACluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	urls := testenv.Cluster(t, 3)
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

// TestBatchAfterTheDuplicateWindow: a call whose queued event the events
// stream holds under another message ID, as when a batch is sent again
// after the stream's duplicate window forgot the first, is not queued
// again: the queued event is written only if its call ID has none, and
// the batch answers that call as a duplicate.
func TestBatchAfterTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(new(atomic.Int64))})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)

	// The earlier submit's call: toolu_1 of the turn, stored with a
	// message ID the stream no longer knows as the call's.
	const turn = "turn-window"
	callID := messages.IdempotentCallID("bot", turn+"/toolu_1")
	args := messages.JSON(`{"a":1,"b":1}`)
	decoded, err := policy.DecodeArguments(args)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	earlier := &messages.CallRequest{CallID: callID, Tool: "t-add", Namespace: "t", Method: "add", Arguments: args, Agent: "bot", Turn: turn, ArgumentsDigest: policy.DigestOf(decoded), QueuedAt: now, Deadline: now.Add(time.Minute)}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := ledger.New(nc, js, messages.MustNames("")).EventMsg("", "t", &messages.CallEvent{CallID: callID, Kind: messages.EventQueued, Time: now, Request: earlier})
	if err != nil {
		t.Fatal(err)
	}
	msg.Header.Set(messages.HeaderMsgID, "an-earlier-message-id")
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	queued := queuedCallsOn(t, nc)

	req := messages.SubmitBatchRequest{Format: "anthropic", Turn: turn, ToolCalls: messages.JSON(`[{"type":"tool_use","id":"toolu_1","name":"t-add","input":{"a":1,"b":1}},{"type":"tool_use","id":"toolu_2","name":"t-add","input":{"a":2,"b":2}}]`)}
	batch, err := c.SubmitBatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if bc := batch.Calls[0]; bc.CallID != callID || !bc.Duplicate || bc.Error != nil {
		t.Errorf("the earlier call: %+v %v, want call %s as a duplicate", bc, bc.Error, callID)
	}
	if bc := batch.Calls[1]; bc.CallID == "" || bc.Duplicate || bc.Error != nil {
		t.Errorf("the new call: %+v %v", bc, bc.Error)
	}
	if got := queuedCallsOn(t, nc); got != queued+1 {
		t.Errorf("the batch queued %d calls, want 1 (the new one)", got-queued)
	}
}

// TestSubmitBatchWithWait: with wait_ms, calls.submit_batch answers with
// the calls' results rendered, in results_format, as calls.results
// renders them, in one request; without, with none.
func TestSubmitBatchWithWait(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	var runs atomic.Int64
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(&runs)})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	toolCalls := messages.JSON(`[{"type":"tool_use","id":"toolu_1","name":"t-add","input":{"a":1,"b":1}},{"type":"tool_use","id":"toolu_2","name":"t-add","input":{"a":2,"b":2}}]`)

	batch, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", Turn: "turn-wait", ToolCalls: toolCalls, WaitMS: 30_000, ResultsFormat: "openai-chat"})
	if err != nil {
		t.Fatal(err)
	}
	res := batch.Results
	if res == nil || !res.Complete || len(res.Calls) != 2 {
		t.Fatalf("results %+v", res)
	}
	msgs := decodeMessages(t, res.Messages)
	expectLen(t, msgs, 2)
	expect(t, msgs[0], "toolu_1", "tool_call_id")
	expect(t, msgs[0], `{"sum":2}`, "content")
	expect(t, msgs[1], "toolu_2", "tool_call_id")
	expect(t, msgs[1], `{"sum":4}`, "content")
	for i, bc := range res.Calls {
		if bc.CallID != batch.Calls[i].CallID || bc.State != messages.StateCompleted {
			t.Errorf("call %d: %+v", i, bc)
		}
	}
	rendered, err := c.Results(ctx, messages.ResultsRequest{Format: "openai-chat", Calls: batch.Calls})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rendered.Messages {
		if string(rendered.Messages[i]) != string(res.Messages[i]) {
			t.Errorf("calls.results renders message %d as %s, the batch's reply as %s", i, rendered.Messages[i], res.Messages[i])
		}
	}
	if runs.Load() != 2 {
		t.Errorf("%d runs, want 2", runs.Load())
	}

	again, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", Turn: "turn-wait", ToolCalls: toolCalls})
	if err != nil {
		t.Fatal(err)
	}
	if again.Results != nil {
		t.Errorf("a batch without wait_ms carries results: %+v", again.Results)
	}
	// Sent again with wait_ms, the batch is answered as calls.results
	// answers for its calls, which ran once.
	withWait, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", Turn: "turn-wait", ToolCalls: toolCalls, WaitMS: 30_000, ResultsFormat: "openai-chat"})
	if err != nil {
		t.Fatal(err)
	}
	for i, bc := range withWait.Calls {
		if !bc.Duplicate || bc.CallID != batch.Calls[i].CallID || bc.State != messages.StateCompleted {
			t.Errorf("call %d sent again: %+v", i, bc)
		}
	}
	if withWait.Results == nil || !withWait.Results.Complete || len(withWait.Results.Messages) != len(res.Messages) {
		t.Fatalf("results of the batch sent again: %+v", withWait.Results)
	}
	for i := range res.Messages {
		if string(withWait.Results.Messages[i]) != string(res.Messages[i]) {
			t.Errorf("the batch sent again renders message %d as %s, first as %s", i, withWait.Results.Messages[i], res.Messages[i])
		}
	}
	_, err = c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", Turn: "turn-wait", ToolCalls: toolCalls, WaitMS: 10, ResultsFormat: "smoke-signals"})
	if messages.CodeOf(err) != messages.CodeBadRequest {
		t.Errorf("an unknown results_format: %v, want bad_request", err)
	}
}
