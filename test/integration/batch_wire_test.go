package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// jsonRequest sends body to an endpoint as a client of another language
// does (JSON, with its Content-Type), and returns the reply's body and
// its error code header ("" for a reply that is not an error).
func jsonRequest(t *testing.T, nc *nats.Conn, endpoint, body string) (data []byte, errorCode string) {
	t.Helper()
	msg := &nats.Msg{Subject: "toolbus.api." + endpoint, Data: []byte(body), Header: nats.Header{"Content-Type": []string{"application/json"}}}
	reply, err := nc.RequestMsgWithContext(testenv.Context(t), msg)
	if err != nil {
		t.Fatalf("%s: %v", endpoint, err)
	}
	return reply.Data, reply.Header.Get("Nats-Service-Error-Code")
}

// TestBatchAsPythonSendsIt plays the Python example of protocol.md over
// JSON: the whole Messages API response (thinking, text and tool_use
// blocks) goes to calls.submit_batch, the reply's calls go back to
// calls.results as they came, and its messages are the next user message:
// a result, and a call that waits for an approval, named by its approval
// ID and not an error. A request that is refused as a whole (an unknown
// format, 65 calls, none, JSON nested too deep) is an error reply with the
// Nats-Service-Error-Code header, and queues nothing.
func TestBatchAsPythonSendsIt(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = mustPolicy(t, batchPolicy) })
	var runs atomic.Int64
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(&runs)})
	nc := testenv.Connect(t, srv.URL())

	// response.model_dump() of a Messages API response with extended thinking.
	response := `{"id":"msg_01Xq7pT3mVb9cN2kR8sLw4Hd","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",
	  "content":[{"type":"thinking","thinking":"Add, then wipe.","signature":"EqQBCkgIARABGAIiQL"},
	    {"type":"text","text":"Adding, then wiping.","citations":null},
	    {"type":"tool_use","id":"toolu_01Pq8rS7tU6vW5xY4zA3bC2d","name":"t-add","input":{"a":2,"b":3}},
	    {"type":"tool_use","id":"toolu_01Ef9gH8iJ7kL6mN5oP4qR3s","name":"t-wipe","input":{}}],
	  "stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":512,"output_tokens":96,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"service_tier":"standard"}}`
	data, code := jsonRequest(t, nc, "calls.submit_batch", `{"format":"anthropic","agent":"support-bot","turn":"t-py","tool_calls":`+response+`}`)
	if code != "" {
		t.Fatalf("submit_batch refused (%s): %s", code, data)
	}
	var batch struct {
		Calls json.RawMessage `json:"calls"`
	}
	if err := json.Unmarshal(data, &batch); err != nil {
		t.Fatal(err)
	}
	// A reply that waited for the call awaiting an approval would come
	// only when the wait ends: anything sooner did not wait for it, however
	// busy the machine.
	const wait = 2 * time.Minute
	begin := time.Now()
	data, code = jsonRequest(t, nc, "calls.results", fmt.Sprintf(`{"format":"anthropic","calls":%s,"wait_ms":%d}`, batch.Calls, wait.Milliseconds()))
	if code != "" {
		t.Fatalf("results refused (%s): %s", code, data)
	}
	if took := time.Since(begin); took >= wait {
		t.Errorf("calls.results took %v: it waited for the call that awaits an approval", took)
	}
	var res struct {
		Messages []any `json:"messages"`
		Calls    []struct {
			CallID   string `json:"call_id"`
			State    string `json:"state"`
			Approval *struct {
				ApprovalID string `json:"approval_id"`
				Reason     string `json:"reason"`
			} `json:"approval"`
		} `json:"calls"`
		Complete bool `json:"complete"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Complete || len(res.Calls) != 2 || res.Calls[0].State != "completed" || res.Calls[1].State != "awaiting_approval" ||
		res.Calls[1].Approval == nil || res.Calls[1].Approval.ApprovalID == "" || res.Calls[1].Approval.Reason != "wiping needs a person" {
		t.Fatalf("results: %s", data)
	}
	expectLen(t, res.Messages, 1)
	msg := res.Messages[0]
	expect(t, msg, "user", "role")
	expectLen(t, jsonAt(msg, "content"), 2)
	expect(t, msg, "toolu_01Pq8rS7tU6vW5xY4zA3bC2d", "content", 0, "tool_use_id")
	expect(t, msg, `{"sum":5}`, "content", 0, "content", 0, "text")
	expect(t, msg, false, "content", 0, "is_error")
	expect(t, msg, "toolu_01Ef9gH8iJ7kL6mN5oP4qR3s", "content", 1, "tool_use_id")
	expect(t, msg, "The call waits for a person's approval (approval ID "+res.Calls[1].Approval.ApprovalID+"): wiping needs a person. It has not run; it runs once approved.", "content", 1, "content", 0, "text")
	expect(t, msg, false, "content", 1, "is_error")
	if runs.Load() != 1 {
		t.Errorf("%d runs, want 1 (the add)", runs.Load())
	}

	var blocks []string
	for i := range messages.MaxBatchCalls + 1 {
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d","name":"t-add","input":{"a":1,"b":1}}`, i))
	}
	queued := queuedCallsOn(t, nc)
	for name, body := range map[string]string{
		"an unknown format": `{"format":"cohere","turn":"t-py","tool_calls":` + response + `}`,
		"65 tool calls":     `{"format":"anthropic","turn":"t-py","tool_calls":[` + strings.Join(blocks, ",") + `]}`,
		"no tool call":      `{"format":"anthropic","turn":"t-py","tool_calls":{"role":"assistant","content":"Done."}}`,
		"tool_calls nesting too deep": `{"format":"anthropic","turn":"t-py","tool_calls":[{"type":"tool_use","id":"toolu_d","name":"t-add","input":` +
			strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 300) + `}]}`,
	} {
		data, code := jsonRequest(t, nc, "calls.submit_batch", body)
		var e messages.Error
		if err := json.Unmarshal(data, &e); err != nil || code != "400" || e.Code != messages.CodeBadRequest {
			t.Errorf("%s: header %q, reply %.300s", name, code, data)
		}
		if name == "an unknown format" && !strings.Contains(e.Message, `unknown format "cohere"`) {
			t.Errorf("%s: %q does not name the field that holds it", name, e.Message)
		}
	}
	if got := queuedCallsOn(t, nc); got != queued {
		t.Errorf("refused batches queued %d calls", got-queued)
	}
}

// TestBatchRefusesCallsOneByOne: each call that cannot run is refused on
// its own, with its code, and rendered as an error result the model can
// read, under the tool-call ID the model gave, while the others run (an
// arguments string nesting deeper than a message may, or larger than a
// submit takes, is refused alone);
// calls.results renders the batch's reply as it came. A tool-call ID
// used again in the turn with other arguments is an idempotency_conflict.
func TestBatchRefusesCallsOneByOne(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = mustPolicy(t, batchPolicy) })
	var runs atomic.Int64
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(&runs)})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	if err := c.Operator().SetToolEnabled(ctx, "t-chart", false, "charts are off"); err != nil {
		t.Fatal(err)
	}
	longID := strings.Repeat("x", 10_000)
	call := func(id, typ, name, args string) string {
		return fmt.Sprintf(`{"id":%q,"type":%q,"function":{"name":%q,"arguments":%q}}`, id, typ, name, args)
	}
	toolCalls := `{"role":"assistant","content":null,"tool_calls":[` + strings.Join([]string{
		call("call_1", "function", "t:add", `{"a":1,"b":2}`),
		call("call_2", "function", "t.add", `{"a":2,"b":2}`),
		call("call_3", "function", "T-ADD!", `{}`),
		call("call_4", "function", "t-nope", `{}`),
		call("call_5", "function", "t-chart", `{"title":"sales"}`),
		call(longID, "function", "t-add", `{"a":1,"b":1}`),
		call("call_1", "function", "t-add", `{"a":1,"b":2}`),
		call("call_7", "custom", "t-add", `{}`),
		call("call_8", "function", "t-add", `{"a":1,"b":`),
		call("call_9", "function", "t-secret", `{}`),
		call("call_10", "function", "t-add", `{"a":1,"b":2,"c":`+strings.Repeat(`[`, 300)+strings.Repeat(`]`, 300)+`}`),
		call("call_11", "function", "t-add", `{"a":1,"b":2,"pad":"`+strings.Repeat("p", 300_000)+`"}`),
		call("call_12", "function", "t-add", `[1,2]`),
	}, ",") + `]}`
	batch, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "openai-chat", Turn: "turn-refusals", ToolCalls: messages.JSON(toolCalls), WaitMS: 30_000})
	if err != nil {
		t.Fatal(err)
	}
	// The reply repeats a tool-call ID cut to its bound.
	ids := []string{"call_1", "call_2", "call_3", "call_4", "call_5", longID[:messages.MaxToolCallIDLength], "call_1", "call_7", "call_8", "call_9", "call_10", "call_11", "call_12"}
	codes := []messages.ErrorCode{"", "", messages.CodeInvalidName, messages.CodeToolNotFound, messages.CodeToolDisabled, messages.CodeBadRequest,
		messages.CodeBadRequest, messages.CodeBadRequest, messages.CodeInvalidArguments, messages.CodeDenied, messages.CodeBadRequest,
		messages.CodePayloadTooLarge, messages.CodeInvalidArguments}
	if len(batch.Calls) != len(ids) || batch.Results == nil {
		t.Fatalf("reply %+v", batch)
	}
	msgs := decodeMessages(t, batch.Results.Messages)
	expectLen(t, msgs, len(ids))
	for i, bc := range batch.Calls {
		expect(t, msgs[i], ids[i], "tool_call_id")
		content, _ := jsonAt(msgs[i], "content").(string)
		if codes[i] == "" {
			if bc.Error != nil || bc.CallID == "" {
				t.Errorf("call %d: %+v %v", i, bc, bc.Error)
			}
			continue
		}
		if bc.Error == nil || bc.Error.Code != codes[i] || bc.CallID != "" {
			t.Errorf("call %d is %+v %v, want refused with %s", i, bc, bc.Error, codes[i])
			continue
		}
		if content != refusalOf(bc.Error) {
			t.Errorf("call %d reads %q, want %q", i, content, refusalOf(bc.Error))
		}
	}
	expect(t, msgs[0], `{"sum":3}`, "content")
	expect(t, msgs[1], `{"sum":4}`, "content")
	if name := batch.Calls[0].Name; name != "t:add" {
		t.Errorf("the name as the model wrote it is %q", name)
	}
	if !strings.Contains(batch.Calls[6].Error.Message, "appears twice") || !strings.Contains(batch.Calls[5].Error.Message, "at most 120") {
		t.Errorf("refusals of the IDs: %v; %v", batch.Calls[6].Error, batch.Calls[5].Error)
	}
	rendered, err := c.Results(ctx, messages.ResultsRequest{Format: "openai-chat", Calls: batch.Calls})
	if err != nil {
		t.Fatalf("calls.results of the batch's reply: %v", err)
	}
	if !reflect.DeepEqual(decodeMessages(t, rendered.Messages), msgs) {
		t.Errorf("calls.results renders\n%s\nthe batch's reply\n%s", rendered.Messages, batch.Results.Messages)
	}

	// A name of 250 KB, repeated in full in the calls, the results and
	// the refusal, would make a reply too large to send.
	huge, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "openai-chat", Turn: "turn-refusals", WaitMS: 30_000,
		ToolCalls: messages.JSON(`[` + call("call_big", "function", "t-"+strings.Repeat("n", 250_000), `{}`) + `]`)})
	if err != nil {
		t.Fatalf("a batch with a name of 250 KB: %v", err)
	}
	if bc := huge.Calls[0]; bc.Error == nil || bc.Error.Code != messages.CodeInvalidName || len(bc.Name) != messages.MaxToolCallNameLength || huge.Results == nil {
		t.Errorf("the call with a name of 250 KB: %v %v, name of %d bytes", bc.Error, huge.Results, len(bc.Name))
	}

	again, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "openai-chat", Turn: "turn-refusals", ToolCalls: messages.JSON(`[` + call("call_1", "function", "t-add", `{"a":5,"b":5}`) + `]`)})
	if err != nil {
		t.Fatal(err)
	}
	if bc := again.Calls[0]; bc.Error == nil || bc.Error.Code != messages.CodeIdempotencyConflict || bc.CallID != "" {
		t.Errorf("call_1 of the turn with other arguments: %+v %v", bc, bc.Error)
	}
	if runs.Load() != 2 {
		t.Errorf("%d runs, want 2", runs.Load())
	}
}

// TestBatchWaitEnds: a call still running when the wait ends, bounded by
// the coordinator's maximum wait whatever wait_ms asks, is rendered as
// such, not as an error, and complete is false; calls.results renders
// its result once it has ended.
func TestBatchWaitEnds(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	const maxWait = 500 * time.Millisecond
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.MaxWait = maxWait })
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	started := make(chan struct{}, 1)
	hold := worker.Func("hold", "Holds until the test lets go.", func(ctx context.Context, in struct{}) (string, error) {
		started <- struct{}{}
		select {
		case <-release:
			return "let go", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{hold}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)

	begin := time.Now()
	batch, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "gemini", Turn: "turn-hold", WaitMS: 60_000,
		ToolCalls: messages.JSON(`{"role":"model","parts":[{"functionCall":{"id":"g-1","name":"t-hold","args":{}}}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Held for the 60 s asked, the reply would take all of them (the tool
	// is let go only after it): anything sooner was bounded by the
	// coordinator's maximum wait, however busy the machine.
	if took := time.Since(begin); took >= time.Minute {
		t.Errorf("the batch waited %v; the coordinator waits at most %v", took, maxWait)
	}
	res := batch.Results
	if res == nil || res.Complete || len(res.Calls) != 1 {
		t.Fatalf("results %+v", res)
	}
	bc := res.Calls[0]
	if bc.State != messages.StateQueued && bc.State != messages.StateRunning {
		t.Fatalf("the held call is %s", bc.State)
	}
	msgs := decodeMessages(t, res.Messages)
	expectLen(t, msgs, 1)
	expect(t, msgs[0], "g-1", "parts", 0, "functionResponse", "id")
	expect(t, msgs[0], "t-hold", "parts", 0, "functionResponse", "name")
	expect(t, msgs[0], fmt.Sprintf("The call %s is still %s; its result is not available yet.", bc.CallID, bc.State), "parts", 0, "functionResponse", "response", "output")
	expect(t, msgs[0], nil, "parts", 0, "functionResponse", "response", "error")

	<-started
	once.Do(func() { close(release) })
	done, err := c.AwaitResults(ctx, "gemini", res.Calls)
	if err != nil || !done.Complete {
		t.Fatalf("after the call ended: %+v %v", done, err)
	}
	expect(t, decodeMessages(t, done.Messages)[0], "let go", "parts", 0, "functionResponse", "response", "output")
}

// TestBatchWaitCountsAgainstTheUsersWaits: under identities, a batch with
// wait_ms holds one of its user's long waits; at the user's limit it is
// refused with too_many_requests before any call is checked or written.
func TestBatchWaitCountsAgainstTheUsersWaits(t *testing.T) {
	t.Parallel()
	srv, as := identityDeploy(t, func(cfg *coordinator.Config) { cfg.MaxWaitsPerUser = 1 })
	ctx := testenv.Context(t)
	connA := as("agent_a")
	a := agentClient(t, connA, "support-bot")
	operator := agentClient(t, as("operator"), "")

	held := holdForApproval(t, ctx, a)
	waited := make(chan messages.ErrorCode, 1)
	go func() {
		for {
			code, err := rawWait(ctx, connA, "calls.get", map[string]any{"call_id": held.CallID, "wait_ms": 60_000})
			if err == nil && code == messages.CodeTooManyRequests {
				continue // the probe below held the place for a moment
			}
			if err != nil {
				t.Errorf("A's wait: %v", err)
			}
			waited <- code
			return
		}
	}()
	testenv.Eventually(t, "A's wait to hold its only place", func() bool {
		code, err := rawWait(ctx, connA, "calls.events", map[string]any{"call_id": held.CallID, "after": 1 << 40, "wait_ms": 1})
		return err == nil && code == messages.CodeTooManyRequests
	})
	streams := []string{"TOOLBUS_EVENTS", "KV_toolbus_turns", "KV_toolbus_approvals"}
	before := snapshot(t, srv, streams...)
	toolCalls := messages.JSON(`[{"type":"tool_use","id":"toolu_1","name":"demo-word_count","input":{"text":"two words"}}]`)
	_, err := a.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", Turn: "turn-waits", ToolCalls: toolCalls, WaitMS: 10_000})
	if !isCode(err, messages.CodeTooManyRequests) {
		t.Errorf("a batch with wait_ms at the user's limit: err = %v, want too_many_requests", err)
	}
	if after := snapshot(t, srv, streams...); !reflect.DeepEqual(before, after) {
		t.Errorf("the refused batch changed the streams:\nbefore %v\nafter  %v", before, after)
	}

	if _, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: held.Approval.ApprovalID, Decision: messages.DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	if code := <-waited; code != "" {
		t.Errorf("A's held wait answered %s", code)
	}
	batch, err := a.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", Turn: "turn-waits", ToolCalls: toolCalls, WaitMS: 20_000})
	if err != nil || batch.Results == nil || !batch.Results.Complete {
		t.Fatalf("the batch once the place is free: %+v %v", batch, err)
	}
}

// TestBatchCallIDsAsDocumented: a call's ID is "i" + hex(sha256(agent +
// "\x00" + key))[0:32], its key "<turn>/<tool-call ID>", or, for a call
// without an ID, "<turn>/#" + hex(sha256(response_id + "\x00" + position
// + "\x00" + name + "\x00" + arguments digest))[0:32], position counting
// the batch's tool calls (not the parts around them) from 0 and the
// response ID taken from a whole Gemini response.
func TestBatchCallIDsAsDocumented(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(new(atomic.Int64))})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	hexSum := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	callID := func(key string) string { return "i" + hexSum("bot\x00" + key)[:32] }

	batch, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "gemini", Turn: "turn-ids", ToolCalls: messages.JSON(`{"responseId":"resp-7",
	  "candidates":[{"content":{"role":"model","parts":[{"text":"Adding."},{"functionCall":{"name":"t-add","args":{"b":2,"a":1}}},{"functionCall":{"id":"fc-9","name":"t-add","args":{"a":3,"b":4}}}]}}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	// The canonical arguments: keys in order, no spaces.
	digest := hexSum(`{"a":1,"b":2}`)
	if want := callID("turn-ids/#" + hexSum("resp-7\x000\x00t-add\x00" + digest)[:32]); batch.Calls[0].CallID != want {
		t.Errorf("call without an ID is %s, want %s", batch.Calls[0].CallID, want)
	}
	if want := callID("turn-ids/fc-9"); batch.Calls[1].CallID != want {
		t.Errorf("call fc-9 is %s, want %s", batch.Calls[1].CallID, want)
	}
}

// TestBatchNotifyAndTimeout: a batch's notify subject gets each call's
// result, and its timeout_ms is each call's deadline: a call that outlives
// it ends timed_out, read by the model as an error that says so.
func TestBatchNotifyAndTimeout(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	hold := worker.Func("hold", "Holds until its deadline.", func(ctx context.Context, in struct{}) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	var runs atomic.Int64
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: append(batchTools(&runs), hold)})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)
	copies := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe("_INBOX.batch-notify", copies)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	// Each call's deadline: the hold's end, and room for the add to run
	// first on a busy machine.
	batch, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "openai-chat", Turn: "turn-notify", Notify: "_INBOX.batch-notify", TimeoutMS: 10_000, WaitMS: 120_000,
		ToolCalls: messages.JSON(`[{"id":"call_a","type":"function","function":{"name":"t-add","arguments":"{\"a\":1,\"b\":1}"}},{"id":"call_h","type":"function","function":{"name":"t-hold","arguments":"{}"}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if batch.Results == nil || !batch.Results.Complete || batch.Results.Calls[1].State != messages.StateTimedOut {
		t.Fatalf("results %+v", batch.Results)
	}
	msgs := decodeMessages(t, batch.Results.Messages)
	expect(t, msgs[0], `{"sum":2}`, "content")
	expectPrefix(t, msgs[1], "Error: ", "content")
	if got, _ := jsonAt(msgs[1], "content").(string); !strings.Contains(got, "deadline") {
		t.Errorf("the timed-out call reads %q", got)
	}
	notified := map[string]bool{}
	for len(notified) < 2 {
		select {
		case m := <-copies:
			var ev messages.CallEvent
			if _, err := messages.Decode(messages.Header(m.Header), m.Data, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Kind != messages.EventResult || ev.Result == nil {
				t.Fatalf("notified of %+v", ev)
			}
			notified[ev.CallID] = true
		case <-ctx.Done():
			t.Fatalf("notified of %v, want both calls", notified)
		}
	}
	for _, bc := range batch.Calls {
		if !notified[bc.CallID] {
			t.Errorf("call %s not notified", bc.CallID)
		}
	}
}

// TestRunToolCallsBeyondTheMaxWait: RunToolCalls asks again for calls
// that outlast the coordinator's maximum wait, and returns once none is
// queued or running; a call that waits for an approval is not waited for.
func TestRunToolCallsBeyondTheMaxWait(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	const maxWait = 200 * time.Millisecond
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.MaxWait = maxWait
		cfg.Policy = mustPolicy(t, batchPolicy)
	})
	// The tool works for five of the coordinator's waits.
	slow := worker.Func("slow", "Takes a while.", func(ctx context.Context, in struct{}) (string, error) {
		select {
		case <-time.After(5 * maxWait):
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	var runs atomic.Int64
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: append(batchTools(&runs), slow)})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)

	res, err := c.RunToolCalls(ctx, "anthropic", `[{"type":"tool_use","id":"toolu_s","name":"t-slow","input":{}}]`, client.WithTurn("turn-slow"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete || res.Calls[0].State != messages.StateCompleted {
		t.Fatalf("RunToolCalls returned %+v", res)
	}
	expect(t, decodeMessages(t, res.Messages)[0], "done", "content", 0, "content", 0, "text")

	res, err = c.RunToolCalls(ctx, "anthropic", `[{"type":"tool_use","id":"toolu_w","name":"t-wipe","input":{}}]`, client.WithTurn("turn-slow"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Complete || res.Calls[0].State != messages.StateAwaitingApproval || res.Calls[0].Approval == nil {
		t.Fatalf("RunToolCalls of a call awaiting approval returned %+v", res)
	}
}

// TestBatchResultsFitInOneReply: a result cut to its tool's maximum size
// says so; eight results of 200 KB each, every one under its tool's
// maximum size, do not fit in one NATS message (1 MiB by default):
// RunToolCalls still gets them, each cut to fit and saying so, and
// calls.results for one call alone renders it whole.
func TestBatchResultsFitInOneReply(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	const size = 200_000
	big := worker.Func("big", "Returns 200 KB.", func(ctx context.Context, in struct{}) (string, error) {
		return strings.Repeat("b", size), nil
	})
	capped := worker.Func("capped", "Returns 200 KB, cut to 1 KB.", func(ctx context.Context, in struct{}) (string, error) {
		return strings.Repeat("c", size), nil
	}, worker.WithMaxResultSize(1000))
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{big, capped}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	nc := testenv.Connect(t, srv.URL())
	ctx := testenv.Context(t)
	one, err := c.RunToolCalls(ctx, "openai-chat", `[{"id":"call_c","type":"function","function":{"name":"t-capped","arguments":"{}"}}]`, client.WithTurn("turn-big"))
	if err != nil {
		t.Fatal(err)
	}
	content, _ := jsonAt(decodeMessages(t, one.Messages)[0], "content").(string)
	if len(content) > 1200 || !strings.HasSuffix(content, "\n[The result was cut to the tool's maximum result size.]") {
		t.Errorf("a result cut to its tool's maximum size reads %q", content)
	}

	var calls []string
	for i := range 8 {
		calls = append(calls, fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d","name":"t-big","input":{}}`, i))
	}
	res, err := c.RunToolCalls(ctx, "anthropic", "["+strings.Join(calls, ",")+"]", client.WithTurn("turn-big"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete || len(res.Messages) != 1 || len(res.Messages[0]) > int(nc.MaxPayload()) {
		t.Fatalf("complete %v, %d messages, the first of %d bytes", res.Complete, len(res.Messages), len(res.Messages[0]))
	}
	results := jsonAt(decodeMessages(t, res.Messages)[0], "content").([]any)
	expectLen(t, results, 8)
	for i := range results {
		text, _ := jsonAt(results, i, "content", 0, "text").(string)
		note, _ := jsonAt(results, i, "content", 1, "text").(string)
		if len(text) >= size || !strings.Contains(text, "bytes cut") || !strings.HasPrefix(note, "[The result was cut to fit in one reply") {
			t.Errorf("result %d: %d bytes of text, then %q", i, len(text), note)
		}
	}
	alone, err := c.Results(ctx, messages.ResultsRequest{Format: "anthropic", Calls: res.Calls[:1]})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, decodeMessages(t, alone.Messages)[0], strings.Repeat("b", size), "content", 0, "content", 0, "text")
}

// TestBatchCallOutsideTheAgentsTools: a call of a tool the agent's
// exposure rules exclude is refused alone with not_admitted, and the
// model reads why; the agent's other call runs.
func TestBatchCallOutsideTheAgentsTools(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agents", "narrow.yaml"), `
id: narrow
tool:
  items:
    - name: "demo"
      exclude: ["demo:sha256"]
`)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.WorkspaceDir = dir })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "narrow"})
	ctx := testenv.Context(t)
	res, err := c.RunToolCalls(ctx, "openai-responses", `[{"type":"function_call","call_id":"call_s","name":"demo-sha256","arguments":"{\"text\":\"x\"}"},
		{"type":"function_call","call_id":"call_e","name":"demo-echo","arguments":"{\"text\":\"ok\"}"}]`, client.WithTurn("turn-narrow"))
	if err != nil {
		t.Fatal(err)
	}
	if bc := res.Calls[0]; bc.Error == nil || bc.Error.Code != messages.CodeNotAdmitted {
		t.Fatalf("the excluded call: %+v %v", bc, bc.Error)
	}
	msgs := decodeMessages(t, res.Messages)
	expectLen(t, msgs, 2)
	expect(t, msgs[0], "call_s", "call_id")
	expect(t, msgs[0], refusalOf(res.Calls[0].Error), "output")
	expect(t, msgs[1], "call_e", "call_id")
	if res.Calls[1].State != messages.StateCompleted {
		t.Errorf("the admitted call: %+v", res.Calls[1])
	}
}
