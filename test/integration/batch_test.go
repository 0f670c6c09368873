package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// chartPNG is the image the chart tool returns.
var chartPNG = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0x0d, 'I', 'H', 'D', 'R'}

const batchPolicy = `
default: allow
rules:
  - id: no-secrets
    tool: "t:secret"
    effect: deny
    reason: secrets stay secret
  - id: ask-wipe
    tool: "t:wipe"
    effect: ask
    reason: wiping needs a person
`

type addArgs struct {
	A int `json:"a"`
	B int `json:"b"`
}

type sum struct {
	Sum int `json:"sum"`
}

type chartArgs struct {
	Title string `json:"title"`
}

// batchTools are the tools the recorded responses call; runs counts their executions.
func batchTools(runs *atomic.Int64) []worker.Tool {
	return []worker.Tool{
		worker.Func("add", "Adds two integers.", func(ctx context.Context, in addArgs) (sum, error) {
			runs.Add(1)
			return sum{in.A + in.B}, nil
		}),
		worker.Func("chart", "Draws a chart.", func(ctx context.Context, in chartArgs) ([]messages.ContentBlock, error) {
			runs.Add(1)
			return []messages.ContentBlock{messages.TextBlock("chart of " + in.Title), messages.ImageBlock(chartPNG, "image/png")}, nil
		}),
		worker.Func("secret", "Reads the secret.", func(ctx context.Context, in struct{}) (string, error) {
			runs.Add(1)
			return "s3cret", nil
		}),
		worker.Func("wipe", "Wipes the scratch space.", func(ctx context.Context, in struct{}) (string, error) {
			runs.Add(1)
			return "wiped", nil
		}),
	}
}

// batchCase is one provider's recorded response and what its results render to.
type batchCase struct {
	format string
	// ids are the provider's tool-call IDs, in order.
	ids []string
	// invalid is the start of the refusal of the call with invalid arguments.
	invalid string
	// check asserts the rendered messages.
	check func(t *testing.T, msgs []any, calls []messages.BatchCall)
}

const (
	refusedSecret = `The call was refused (denied): policy denies t-secret to agent "bot": secrets stay secret`
	schemaRefusal = "The call was refused (invalid_arguments): arguments of t-add do not match its input schema"
)

var chartData = base64.StdEncoding.EncodeToString(chartPNG)

func batchCases() []batchCase {
	return []batchCase{
		{
			format:  "openai-chat",
			ids:     []string{"call_8qty38xkV7mqSbBu2kQHE3dS", "call_Jb0yAfkvNfnQgHbBPYsn3TKm", "call_Q9mV2rLk0cZt8WnXo1yHe4Bd", "call_Xw3kP9sQ2mLr7VbN6tYc1HaZ", "call_Lm4nB7vC2xZq9WsE1rTy6UiO"},
			invalid: "The call was refused (invalid_arguments): arguments of t-add are not JSON",
			check: func(t *testing.T, msgs []any, calls []messages.BatchCall) {
				ids := []string{"call_8qty38xkV7mqSbBu2kQHE3dS", "call_Jb0yAfkvNfnQgHbBPYsn3TKm", "call_Q9mV2rLk0cZt8WnXo1yHe4Bd", "call_Xw3kP9sQ2mLr7VbN6tYc1HaZ", "call_Lm4nB7vC2xZq9WsE1rTy6UiO"}
				expectLen(t, msgs, 6)
				for i, id := range ids {
					expect(t, msgs[i], "tool", "role")
					expect(t, msgs[i], id, "tool_call_id")
				}
				expect(t, msgs[0], `{"sum":5}`, "content")
				expect(t, msgs[1], `{"sum":42}`, "content")
				expectPrefix(t, msgs[2], "The call was refused (invalid_arguments): arguments of t-add are not JSON", "content")
				expect(t, msgs[3], "chart of sales\n[image (image/png): in the message after the tool results]", "content")
				expect(t, msgs[4], refusedSecret, "content")
				expect(t, msgs[5], "user", "role")
				expect(t, msgs[5], "text", "content", 0, "type")
				expect(t, msgs[5], "Media returned by tool call call_Xw3kP9sQ2mLr7VbN6tYc1HaZ (t-chart):", "content", 0, "text")
				expect(t, msgs[5], "image_url", "content", 1, "type")
				expect(t, msgs[5], "data:image/png;base64,"+chartData, "content", 1, "image_url", "url")
				expectLen(t, jsonAt(msgs[5], "content"), 2)
			},
		},
		{
			format:  "openai-responses",
			ids:     []string{"call_e2WZfmdPnWbL0fbpH1cYQxLa", "call_S8oDk3Zm4tYq1nVb7cXe2Lw9", "call_Vn5Qp8Rt2Wx6Yz1Ab4Cd7Ef0", "call_Gh3Jk6Lm9Np2Qr5St8Uv1Wx4", "call_Yz7Ab0Cd3Ef6Gh9Ij2Kl5Mn8"},
			invalid: schemaRefusal,
			check: func(t *testing.T, msgs []any, calls []messages.BatchCall) {
				ids := []string{"call_e2WZfmdPnWbL0fbpH1cYQxLa", "call_S8oDk3Zm4tYq1nVb7cXe2Lw9", "call_Vn5Qp8Rt2Wx6Yz1Ab4Cd7Ef0", "call_Gh3Jk6Lm9Np2Qr5St8Uv1Wx4", "call_Yz7Ab0Cd3Ef6Gh9Ij2Kl5Mn8"}
				expectLen(t, msgs, 6)
				for i, id := range ids {
					expect(t, msgs[i], "function_call_output", "type")
					expect(t, msgs[i], id, "call_id")
				}
				expect(t, msgs[0], `{"sum":5}`, "output")
				expect(t, msgs[1], `{"sum":42}`, "output")
				expectPrefix(t, msgs[2], schemaRefusal, "output")
				expect(t, msgs[2], schemaRefusal+": /a: got string, want integer", "output")
				expect(t, msgs[3], "chart of sales\n[image (image/png): in the message after the tool results]", "output")
				expect(t, msgs[4], refusedSecret, "output")
				expect(t, msgs[5], "message", "type")
				expect(t, msgs[5], "user", "role")
				expect(t, msgs[5], "input_text", "content", 0, "type")
				expect(t, msgs[5], "Media returned by tool call call_Gh3Jk6Lm9Np2Qr5St8Uv1Wx4 (t-chart):", "content", 0, "text")
				expect(t, msgs[5], "input_image", "content", 1, "type")
				expect(t, msgs[5], "data:image/png;base64,"+chartData, "content", 1, "image_url")
			},
		},
		{
			format:  "anthropic",
			ids:     []string{"toolu_01A09q90qw90lq917835lq9", "toolu_01B18r81rx81mr826724mr8", "toolu_01C27s72sy72ns735613ns7", "toolu_01D36t63tz63ot644502ot6", "toolu_01E45u54ua54pu553491pu5", "toolu_01F54v45vb45qv462380qv4"},
			invalid: schemaRefusal,
			check: func(t *testing.T, msgs []any, calls []messages.BatchCall) {
				ids := []string{"toolu_01A09q90qw90lq917835lq9", "toolu_01B18r81rx81mr826724mr8", "toolu_01C27s72sy72ns735613ns7", "toolu_01D36t63tz63ot644502ot6", "toolu_01E45u54ua54pu553491pu5", "toolu_01F54v45vb45qv462380qv4"}
				expectLen(t, msgs, 1)
				expect(t, msgs[0], "user", "role")
				results := jsonAt(msgs[0], "content")
				expectLen(t, results, 6)
				for i, id := range ids {
					expect(t, results, "tool_result", i, "type")
					expect(t, results, id, i, "tool_use_id")
					expect(t, results, i == 2 || i == 4, i, "is_error")
				}
				expect(t, results, "text", 0, "content", 0, "type")
				expect(t, results, `{"sum":5}`, 0, "content", 0, "text")
				expect(t, results, `{"sum":42}`, 1, "content", 0, "text")
				expectPrefix(t, results, schemaRefusal, 2, "content", 0, "text")
				expect(t, results, "chart of sales", 3, "content", 0, "text")
				expect(t, results, "image", 3, "content", 1, "type")
				expect(t, results, "base64", 3, "content", 1, "source", "type")
				expect(t, results, "image/png", 3, "content", 1, "source", "media_type")
				expect(t, results, chartData, 3, "content", 1, "source", "data")
				expect(t, results, refusedSecret, 4, "content", 0, "text")
				wipe := calls[5]
				expect(t, results, "The call waits for a person's approval (approval ID "+wipe.CallID+"): wiping needs a person. It has not run; it runs once approved.", 5, "content", 0, "text")
			},
		},
		{
			format:  "gemini",
			ids:     []string{"", "", "", "", ""},
			invalid: schemaRefusal,
			check: func(t *testing.T, msgs []any, calls []messages.BatchCall) {
				expectLen(t, msgs, 2)
				expect(t, msgs[0], "user", "role")
				parts := jsonAt(msgs[0], "parts")
				expectLen(t, parts, 5)
				for i, name := range []string{"t-add", "t-add", "t-add", "t-chart", "t-secret"} {
					expect(t, parts, name, i, "functionResponse", "name")
					expect(t, parts, nil, i, "functionResponse", "id")
				}
				expect(t, parts, 5.0, 0, "functionResponse", "response", "output", "sum")
				expect(t, parts, 42.0, 1, "functionResponse", "response", "output", "sum")
				expectPrefix(t, parts, schemaRefusal, 2, "functionResponse", "response", "error")
				expect(t, parts, "chart of sales\n[image (image/png): in the message after the tool results]", 3, "functionResponse", "response", "output")
				expect(t, parts, refusedSecret, 4, "functionResponse", "response", "error")
				expect(t, msgs[1], "user", "role")
				expect(t, msgs[1], "Media returned by tool call "+calls[3].CallID+" (t-chart):", "parts", 0, "text")
				expect(t, msgs[1], "image/png", "parts", 1, "inlineData", "mimeType")
				expect(t, msgs[1], chartData, "parts", 1, "inlineData", "data")
			},
		},
		{
			format:  "mcp",
			ids:     []string{"11", "12", "13", "chart-1", "15"},
			invalid: schemaRefusal,
			check: func(t *testing.T, msgs []any, calls []messages.BatchCall) {
				expectLen(t, msgs, 5)
				for i := range msgs {
					expect(t, msgs[i], i == 2 || i == 4, "isError")
				}
				expect(t, msgs[0], "text", "content", 0, "type")
				expect(t, msgs[0], `{"sum":5}`, "content", 0, "text")
				expect(t, msgs[0], 5.0, "structuredContent", "sum")
				expect(t, msgs[1], 42.0, "structuredContent", "sum")
				expectPrefix(t, msgs[2], schemaRefusal, "content", 0, "text")
				expect(t, msgs[3], "chart of sales", "content", 0, "text")
				expect(t, msgs[3], "image", "content", 1, "type")
				expect(t, msgs[3], "image/png", "content", 1, "mimeType")
				expect(t, msgs[3], chartData, "content", 1, "data")
				expect(t, msgs[4], refusedSecret, "content", 0, "text")
			},
		},
	}
}

// TestBatchRoundTrips sends each provider's recorded response with
// parallel tool calls, a call with invalid arguments, an image result, a
// call that policy denies (and, for Anthropic, one that waits for an
// approval) through calls.submit_batch and calls.results, checks the
// provider's result messages field by field, and sends the batch again:
// it names the same calls and runs nothing.
func TestBatchRoundTrips(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = mustPolicy(t, batchPolicy) })
	var runs atomic.Int64
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(&runs)})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	nc := testenv.Connect(t, srv.URL())

	for _, tc := range batchCases() {
		t.Run(tc.format, func(t *testing.T) {
			ctx := testenv.Context(t)
			raw, err := os.ReadFile(filepath.Join("testdata", "batch", tc.format+".json"))
			if err != nil {
				t.Fatal(err)
			}
			req := messages.SubmitBatchRequest{Format: tc.format, ToolCalls: raw, Turn: "turn-" + tc.format}
			before := runs.Load()
			batch, err := c.SubmitBatch(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			tools := []string{"t-add", "t-add", "t-add", "t-chart", "t-secret", "t-wipe"}
			if len(batch.Calls) != len(tc.ids) {
				t.Fatalf("%d calls, want %d: %+v", len(batch.Calls), len(tc.ids), batch.Calls)
			}
			for i, bc := range batch.Calls {
				if bc.ToolCallID != tc.ids[i] || bc.Name != tools[i] {
					t.Errorf("call %d is %q %q, want %q %q", i, bc.ToolCallID, bc.Name, tc.ids[i], tools[i])
				}
				switch i {
				case 2:
					if bc.CallID != "" || bc.Error == nil || bc.Error.Code != messages.CodeInvalidArguments || !strings.HasPrefix(refusalOf(bc.Error), tc.invalid) {
						t.Errorf("call with invalid arguments: %+v %v", bc, bc.Error)
					}
				case 4:
					if bc.CallID != "" || bc.Error == nil || bc.Error.Code != messages.CodeDenied {
						t.Errorf("denied call: %+v", bc)
					}
				case 5:
					if bc.State != messages.StateAwaitingApproval || bc.Approval == nil || bc.Approval.ApprovalID != bc.CallID {
						t.Errorf("call awaiting approval: %+v", bc)
					}
				default:
					if bc.CallID == "" || bc.Error != nil || bc.State != messages.StateQueued || bc.Duplicate {
						t.Errorf("call %d: %+v %v", i, bc, bc.Error)
					}
				}
			}

			res, err := c.Results(ctx, messages.ResultsRequest{Format: tc.format, Calls: batch.Calls, WaitMS: 30_000})
			if err != nil {
				t.Fatal(err)
			}
			if wantComplete := len(tc.ids) == 5; res.Complete != wantComplete {
				t.Errorf("complete = %v, want %v", res.Complete, wantComplete)
			}
			for _, i := range []int{0, 1, 3} {
				if res.Calls[i].State != messages.StateCompleted || res.Calls[i].CallID != batch.Calls[i].CallID {
					t.Errorf("call %d after the wait: %+v", i, res.Calls[i])
				}
			}
			tc.check(t, decodeMessages(t, res.Messages), batch.Calls)
			if got := runs.Load() - before; got != 3 {
				t.Fatalf("the batch ran %d calls, want 3 (two adds and a chart)", got)
			}

			// Sent again, the batch names the same calls and queues nothing.
			queued := queuedCallsOn(t, nc)
			again, err := c.SubmitBatch(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			for i, bc := range again.Calls {
				first := batch.Calls[i]
				if bc.CallID != first.CallID || (bc.CallID != "") != bc.Duplicate || (bc.Error == nil) != (first.Error == nil) {
					t.Errorf("call %d sent again: %+v, first %+v", i, bc, first)
				}
			}
			rendered, err := c.Results(ctx, messages.ResultsRequest{Format: tc.format, Calls: again.Calls})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(rendered.Messages, res.Messages, func(a, b messages.JSON) bool { return string(a) == string(b) }) {
				t.Errorf("the batch sent again renders otherwise:\n%s\nfirst:\n%s", rendered.Messages, res.Messages)
			}
			if got := runs.Load() - before; got != 3 {
				t.Errorf("after the batch was sent again, %d runs, want 3", got)
			}
			if got := queuedCallsOn(t, nc); got != queued {
				t.Errorf("the batch sent again queued %d messages", got-queued)
			}
		})
	}
}

// TestRunToolCalls runs a recorded response's calls with the SDK's one
// call, and gets the provider's next input.
func TestRunToolCalls(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	var runs atomic.Int64
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: batchTools(&runs)})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	toolCalls := json.RawMessage(`[{"type":"text","text":"Adding."},{"type":"tool_use","id":"toolu_1","name":"t-add","input":{"a":1,"b":1}},{"type":"tool_use","id":"toolu_2","name":"t-add","input":{"a":2,"b":2}}]`)
	res, err := c.RunToolCalls(ctx, "anthropic", toolCalls, client.WithTurn("turn-run"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete || len(res.Messages) != 1 {
		t.Fatalf("reply %+v", res)
	}
	msg := decodeMessages(t, res.Messages)[0]
	expect(t, msg, "toolu_1", "content", 0, "tool_use_id")
	expect(t, msg, `{"sum":2}`, "content", 0, "content", 0, "text")
	expect(t, msg, "toolu_2", "content", 1, "tool_use_id")
	expect(t, msg, `{"sum":4}`, "content", 1, "content", 0, "text")
	if runs.Load() != 2 {
		t.Errorf("%d runs, want 2", runs.Load())
	}
}

// TestBatchActsOnlyAsItsAgent: under the deployment's identities, a
// batch naming an agent its user may not act as is refused with
// forbidden and changes nothing, and calls.results does not render
// another agent's calls.
func TestBatchActsOnlyAsItsAgent(t *testing.T) {
	t.Parallel()
	srv, as := identityDeploy(t)
	ctx := testenv.Context(t)
	connA := as("agent_a")
	b := agentClient(t, as("agent_b"), "billing-bot")
	aAsB := agentClient(t, connA, "billing-bot")
	a := agentClient(t, connA, "support-bot")
	toolCalls := messages.JSON(`[{"type":"tool_use","id":"toolu_1","name":"demo-word_count","input":{"text":"two words"}}]`)

	mine, err := b.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", ToolCalls: toolCalls, Turn: "turn-b"})
	if err != nil || mine.Calls[0].CallID == "" {
		t.Fatalf("B's own batch: %+v %v", mine, err)
	}
	res, err := b.Results(ctx, messages.ResultsRequest{Format: "anthropic", Calls: mine.Calls, WaitMS: 20_000})
	if err != nil || !res.Complete {
		t.Fatalf("B's own results: %+v %v", res, err)
	}

	streams := []string{"TOOLBUS_EVENTS", "KV_toolbus_turns", "KV_toolbus_approvals"}
	before := snapshot(t, srv, streams...)
	forbidden := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) {
			t.Errorf("%s: err = %v, want forbidden", what, err)
		}
	}
	_, err = aAsB.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", ToolCalls: toolCalls, Turn: "turn-b2"})
	forbidden("A submitting a batch as B", err)
	_, err = a.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", ToolCalls: toolCalls, Turn: "turn-a", Notify: "_INBOX.elsewhere"})
	forbidden("A submitting a batch whose results would be copied to a notify subject", err)
	_, err = a.Results(ctx, messages.ResultsRequest{Format: "anthropic", Calls: mine.Calls})
	forbidden("A rendering B's results", err)
	if after := snapshot(t, srv, streams...); !reflect.DeepEqual(before, after) {
		t.Errorf("refused requests changed the streams:\nbefore %v\nafter  %v", before, after)
	}
}

func refusalOf(e *messages.Error) string {
	return "The call was refused (" + string(e.Code) + "): " + e.Message
}

func decodeMessages(t *testing.T, msgs []messages.JSON) []any {
	t.Helper()
	out := make([]any, len(msgs))
	for i, m := range msgs {
		if err := json.Unmarshal(m, &out[i]); err != nil {
			t.Fatalf("message %d is not JSON: %v\n%s", i, err, m)
		}
	}
	return out
}

// jsonAt walks a decoded JSON value by object keys and array indexes.
func jsonAt(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k < 0 || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func expect(t *testing.T, v any, want any, path ...any) {
	t.Helper()
	if got := jsonAt(v, path...); got != want {
		t.Errorf("%v = %#v, want %#v", path, got, want)
	}
}

func expectPrefix(t *testing.T, v any, prefix string, path ...any) {
	t.Helper()
	if got, _ := jsonAt(v, path...).(string); !strings.HasPrefix(got, prefix) {
		t.Errorf("%v = %q, want it to start with %q", path, got, prefix)
	}
}

func expectLen(t *testing.T, v any, n int) {
	t.Helper()
	l, ok := v.([]any)
	if !ok || len(l) != n {
		t.Fatalf("want %d elements: %v", n, v)
	}
}

// TestBatchWaitNeedsNoPermissionTheCoordinatorLacks: a batch with wait_ms
// makes the coordinator subscribe to the copies of its calls' results
// that the events stream republishes (toolbus.results.…); with the deploy
// configuration, the coordinator's user may, and the batch's results come
// back whole with no permissions violation on the coordinator's
// connection.
func TestBatchWaitNeedsNoPermissionTheCoordinatorLacks(t *testing.T) {
	t.Parallel()
	violations := make(chan error, 16)
	var coordinatorConn *nats.Conn
	_, as := identityDeploy(t, func(cfg *coordinator.Config) {
		cfg.Conn = testenv.Connect(t, cfg.Conn.ConnectedUrl(), append(deployUser("coordinator", deployPassword("coordinator")), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				select {
				case violations <- err:
				default:
				}
			}
		}))...)
		coordinatorConn = cfg.Conn
	})
	ctx := testenv.Context(t)
	a := agentClient(t, as("agent_a"), "support-bot")
	toolCalls := messages.JSON(`[{"type":"tool_use","id":"toolu_1","name":"demo-word_count","input":{"text":"two words"}},{"type":"tool_use","id":"toolu_2","name":"demo-word_count","input":{"text":"three more words"}}]`)
	batch, err := a.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", ToolCalls: toolCalls, Turn: "turn-wait", WaitMS: 20_000})
	if err != nil || len(batch.Calls) != 2 {
		t.Fatalf("batch: %+v %v", batch, err)
	}
	if batch.Results == nil || !batch.Results.Complete {
		t.Fatalf("the batch's results within its wait: %+v", batch.Results)
	}
	// A flush makes the server's answer to any subscription the
	// coordinator's connection made reach its error handler.
	if err := coordinatorConn.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		t.Fatalf("the coordinator needed a permission its user lacks: %v", err)
	default:
	}
}
