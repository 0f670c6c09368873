package coordinator

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestReadToolCalls(t *testing.T) {
	type call struct{ id, name, args, refused string }
	tests := []struct {
		name, format, raw string
		want              []call
		responseID        string
	}{
		{"openai-chat calls", "openai-chat",
			`[{"id":"call_1","type":"function","function":{"name":"t-add","arguments":"{\"a\": 1}"}},
			  {"id":"call_2","type":"function","function":{"name":"t-add","arguments":"{\"a\": "}},
			  {"id":"call_3","type":"function","function":{"name":"t-add","arguments":""}}]`,
			[]call{{"call_1", "t-add", `{"a": 1}`, ""}, {"call_2", "t-add", "", "invalid_arguments"}, {"call_3", "t-add", `{}`, ""}}, ""},
		{"openai-chat response", "openai-chat",
			`{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"t-add","arguments":"{}"}}]}}]}`,
			[]call{{"call_1", "t-add", `{}`, ""}}, "chatcmpl-1"},
		{"openai-chat message", "openai-chat",
			`{"role":"assistant","tool_calls":[{"id":"call_1","type":"custom","custom":{"name":"x","input":"y"}}]}`,
			[]call{{"call_1", "", "", "bad_request"}}, ""},
		{"openai-responses response", "openai-responses",
			`{"id":"resp_1","output":[{"type":"reasoning","id":"rs_1","summary":[]},
			  {"type":"function_call","id":"fc_1","call_id":"call_1","name":"t-add","arguments":"{\"a\":1}","status":"completed"}]}`,
			[]call{{"call_1", "t-add", `{"a":1}`, ""}}, "resp_1"},
		{"anthropic message", "anthropic",
			`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"},
			  {"type":"tool_use","id":"toolu_1","name":"t-add","input":{"a":1}},{"type":"tool_use","id":"toolu_2","name":"t-add","input":"x"}]}`,
			[]call{{"toolu_1", "t-add", `{"a":1}`, ""}, {"toolu_2", "t-add", `"x"`, "invalid_arguments"}}, "msg_1"},
		{"anthropic blocks", "anthropic",
			`[{"type":"tool_use","id":"toolu_1","name":"t-add","input":{}}]`,
			[]call{{"toolu_1", "t-add", `{}`, ""}}, ""},
		{"gemini response", "gemini",
			`{"responseId":"r1","candidates":[{"content":{"role":"model","parts":[{"text":"ok"},{"functionCall":{"name":"t-add","args":{"a":1}}},{"functionCall":{"id":"g2","name":"t-add"}}]}}]}`,
			[]call{{"", "t-add", `{"a":1}`, ""}, {"g2", "t-add", `{}`, ""}}, "r1"},
		{"gemini parts", "gemini",
			`[{"functionCall":{"name":"t-add","args":{}}}]`,
			[]call{{"", "t-add", `{}`, ""}}, ""},
		{"mcp requests", "mcp",
			`[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t-add","arguments":{"a":1}}},
			  {"jsonrpc":"2.0","method":"notifications/progress","params":{}},
			  {"jsonrpc":"2.0","id":"x-1","method":"tools/call","params":{"name":"t-add"}}]`,
			[]call{{"7", "t-add", `{"a":1}`, ""}, {"x-1", "t-add", `{}`, ""}}, ""},
		{"mcp params", "mcp",
			`{"name":"t-add","arguments":{"a":1}}`,
			[]call{{"", "t-add", `{"a":1}`, ""}}, ""},
		{"repeated ID", "anthropic",
			`[{"type":"tool_use","id":"toolu_1","name":"t-add","input":{}},{"type":"tool_use","id":"toolu_1","name":"t-add","input":{}}]`,
			[]call{{"toolu_1", "t-add", `{}`, ""}, {"toolu_1", "t-add", `{}`, "bad_request"}}, ""},
		{"control character in an ID", "anthropic",
			`[{"type":"tool_use","id":"a\nb","name":"t-add","input":{}}]`,
			[]call{{"a\nb", "t-add", `{}`, "bad_request"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls, responseID, err := readToolCalls(tc.format, messages.JSON(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			if responseID != tc.responseID {
				t.Errorf("response ID %q, want %q", responseID, tc.responseID)
			}
			if len(calls) != len(tc.want) {
				t.Fatalf("%d calls, want %d: %+v", len(calls), len(tc.want), calls)
			}
			for i, w := range tc.want {
				got := calls[i]
				refused := ""
				if got.refused != nil {
					refused = string(got.refused.Code)
				}
				if got.id != w.id || (w.name != "" && got.name != w.name) || refused != w.refused || (w.refused == "" && string(got.args) != w.args) {
					t.Errorf("call %d = {%q %q %s %s}, want %+v", i, got.id, got.name, got.args, refused, w)
				}
			}
		})
	}
}

func TestReadToolCallsRefusesTheBatch(t *testing.T) {
	for name, tc := range map[string]struct{ format, raw string }{
		"unknown format":       {"cohere", `[]`},
		"no tool calls":        {"anthropic", `{"content":[{"type":"text","text":"done"}]}`},
		"not JSON":             {"anthropic", `[{`},
		"wrong shape":          {"openai-chat", `{"choices":"x"}`},
		"nothing to read":      {"gemini", `{"text":"x"}`},
		"too many":             {"mcp", "[" + strings.TrimSuffix(strings.Repeat(`{"name":"t-add"},`, messages.MaxBatchCalls+1), ",") + "]"},
		"tools/call no params": {"mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := readToolCalls(tc.format, messages.JSON(tc.raw)); messages.CodeOf(err) != messages.CodeBadRequest {
				t.Fatalf("error %v, want bad_request", err)
			}
		})
	}
}

func TestIdempotencyKey(t *testing.T) {
	withID := toolCall{id: "call_1", name: "t-add", args: messages.JSON(`{"a":1}`)}
	if got := idempotencyKey("t1", "r", 0, &withID); got != "t1/call_1" {
		t.Errorf("key of a call with an ID = %q", got)
	}
	a := toolCall{name: "t-add", args: messages.JSON(`{"a":1,"b":2}`)}
	reordered := toolCall{name: "t-add", args: messages.JSON(`{ "b": 2, "a": 1 }`)}
	base := idempotencyKey("t1", "r", 0, &a)
	if !strings.HasPrefix(base, "t1/#") || len(base) > messages.MaxIdempotencyKeyLength {
		t.Errorf("derived key %q", base)
	}
	if idempotencyKey("t1", "r", 0, &reordered) != base {
		t.Error("the same arguments written otherwise give another key")
	}
	for name, key := range map[string]string{
		"another position": idempotencyKey("t1", "r", 1, &a),
		"another response": idempotencyKey("t1", "r2", 0, &a),
		"another turn":     idempotencyKey("t2", "r", 0, &a),
		"other arguments":  idempotencyKey("t1", "r", 0, &toolCall{name: "t-add", args: messages.JSON(`{"a":2}`)}),
		"another tool":     idempotencyKey("t1", "r", 0, &toolCall{name: "t-sub", args: a.args}),
	} {
		if key == base {
			t.Errorf("%s gives the same key", name)
		}
	}
	long := toolCall{id: strings.Repeat("x", messages.MaxToolCallIDLength)}
	if k := idempotencyKey(strings.Repeat("t", 128), "", 0, &long); len(k) > messages.MaxIdempotencyKeyLength {
		t.Errorf("key of the longest turn and ID is %d bytes", len(k))
	}
}

// outcomes are one call of each kind a render meets.
func outcomes() []callOutcome {
	png := []byte{0x89, 'P', 'N', 'G'}
	return []callOutcome{
		{call: messages.BatchCall{ToolCallID: "c1", Name: "t-add", CallID: "i1", State: messages.StateCompleted},
			result: &messages.CallResult{Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.JSONBlock(messages.JSON(`{"sum":5}`))}, StructuredContent: messages.JSON(`{"sum":5}`)}},
		{call: messages.BatchCall{ToolCallID: "c2", Name: "t-chart", CallID: "i2", State: messages.StateCompleted},
			result: &messages.CallResult{Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("a chart"), messages.ImageBlock(png, "image/png"), {Type: messages.ContentAudio, Data: []byte{1}, MIMEType: "audio/ogg"}}}},
		{call: messages.BatchCall{ToolCallID: "c3", Name: "t-secret", Error: &messages.Error{Code: messages.CodeDenied, Message: "no secrets"}}},
		{call: messages.BatchCall{ToolCallID: "c4", Name: "t-wipe", CallID: "i4", State: messages.StateAwaitingApproval, Approval: &messages.Approval{ApprovalID: "i4", Reason: "destructive"}}},
		{call: messages.BatchCall{CallID: "i5", State: messages.StateRunning}, tool: "t-slow"},
		{call: messages.BatchCall{ToolCallID: "c6", Name: "t-fail", CallID: "i6", State: messages.StateCompleted},
			result: &messages.CallResult{Status: messages.StateCompleted, IsError: true, Content: []messages.ContentBlock{messages.TextBlock("boom")}, Error: &messages.ResultError{Code: messages.ResultToolError, Message: "boom"}}},
	}
}

func decodeAll(t *testing.T, msgs []messages.JSON) []map[string]any {
	t.Helper()
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		if err := json.Unmarshal(m, &out[i]); err != nil {
			t.Fatalf("message %d is not a JSON object: %v\n%s", i, err, m)
		}
	}
	return out
}

// at walks a decoded value by keys and indexes.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func TestRenderOpenAIChat(t *testing.T) {
	msgs := decodeAll(t, renderOpenAIChat(outcomes()))
	if len(msgs) != 7 {
		t.Fatalf("%d messages, want 6 tool messages and a user message", len(msgs))
	}
	for i, id := range []string{"c1", "c2", "c3", "c4", "i5", "c6"} {
		if msgs[i]["role"] != "tool" || msgs[i]["tool_call_id"] != id {
			t.Errorf("message %d: %v", i, msgs[i])
		}
	}
	checks := map[string]bool{
		"json as text":         msgs[0]["content"] == `{"sum":5}`,
		"image noted":          strings.Contains(msgs[1]["content"].(string), "[image (image/png): in the message after the tool results]"),
		"ogg not carried":      strings.Contains(msgs[1]["content"].(string), "cannot take it here"),
		"refusal readable":     msgs[2]["content"] == "The call was refused (denied): no secrets",
		"approval ID":          strings.Contains(msgs[3]["content"].(string), "approval ID i4"),
		"still running":        strings.Contains(msgs[4]["content"].(string), "still running"),
		"tool error marked":    msgs[5]["content"] == "Error: boom",
		"user message":         msgs[6]["role"] == "user",
		"media introduced":     at(msgs[6], "content", 0, "text") == "Media returned by tool call c2 (t-chart):",
		"image as a data URL":  at(msgs[6], "content", 1, "image_url", "url") == "data:image/png;base64,iVBORw==",
		"only the png carried": at(msgs[6], "content", 2) == nil,
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("%s: %v", name, msgs)
		}
	}
}

func TestRenderOpenAIResponses(t *testing.T) {
	msgs := decodeAll(t, renderOpenAIResponses(outcomes()))
	if len(msgs) != 7 {
		t.Fatalf("%d items, want 7", len(msgs))
	}
	if msgs[0]["type"] != "function_call_output" || msgs[0]["call_id"] != "c1" || msgs[0]["output"] != `{"sum":5}` {
		t.Errorf("item 0: %v", msgs[0])
	}
	if msgs[2]["output"] != "The call was refused (denied): no secrets" || msgs[5]["output"] != "Error: boom" {
		t.Errorf("errors: %v %v", msgs[2], msgs[5])
	}
	user := msgs[6]
	if user["type"] != "message" || user["role"] != "user" || at(user, "content", 0, "type") != "input_text" ||
		at(user, "content", 1, "type") != "input_image" || at(user, "content", 1, "image_url") != "data:image/png;base64,iVBORw==" {
		t.Errorf("media item: %v", user)
	}
}

func TestRenderAnthropic(t *testing.T) {
	msgs := decodeAll(t, renderAnthropic(outcomes()))
	if len(msgs) != 1 || msgs[0]["role"] != "user" {
		t.Fatalf("want one user message: %v", msgs)
	}
	results := msgs[0]["content"].([]any)
	if len(results) != 6 {
		t.Fatalf("%d tool results", len(results))
	}
	checks := map[string]bool{
		"json":        at(results[0], "tool_use_id") == "c1" && at(results[0], "content", 0, "text") == `{"sum":5}` && at(results[0], "is_error") == false,
		"text":        at(results[1], "content", 0, "text") == "a chart",
		"image block": at(results[1], "content", 1, "type") == "image" && at(results[1], "content", 1, "source", "media_type") == "image/png" && at(results[1], "content", 1, "source", "data") == "iVBORw==",
		"audio noted": strings.Contains(at(results[1], "content", 2, "text").(string), "audio (audio/ogg"),
		"refusal":     at(results[2], "is_error") == true && at(results[2], "content", 0, "text") == "The call was refused (denied): no secrets",
		"approval":    at(results[3], "is_error") == false && strings.Contains(at(results[3], "content", 0, "text").(string), "(approval ID i4): destructive"),
		"by call ID":  at(results[4], "tool_use_id") == "i5",
		"tool error":  at(results[5], "is_error") == true && at(results[5], "content", 0, "text") == "boom",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("%s: %v", name, results)
		}
	}
}

func TestRenderGemini(t *testing.T) {
	msgs := decodeAll(t, renderGemini(outcomes()))
	if len(msgs) != 2 {
		t.Fatalf("%d contents, want function responses and media", len(msgs))
	}
	parts := msgs[0]["parts"].([]any)
	checks := map[string]bool{
		"role":              msgs[0]["role"] == "user",
		"structured output": at(parts[0], "functionResponse", "name") == "t-add" && at(parts[0], "functionResponse", "id") == "c1" && at(parts[0], "functionResponse", "response", "output", "sum") == 5.0,
		"text output":       strings.HasPrefix(at(parts[1], "functionResponse", "response", "output").(string), "a chart\n[image (image/png): in the message after"),
		"refusal as error":  at(parts[2], "functionResponse", "response", "error") == "The call was refused (denied): no secrets",
		"named by its tool": at(parts[4], "functionResponse", "name") == "t-slow" && at(parts[4], "functionResponse", "id") == nil,
		"tool error":        at(parts[5], "functionResponse", "response", "error") == "boom",
		"media content":     msgs[1]["role"] == "user" && at(msgs[1], "parts", 0, "text") == "Media returned by tool call c2 (t-chart):",
		"inline image":      at(msgs[1], "parts", 1, "inlineData", "mimeType") == "image/png" && at(msgs[1], "parts", 1, "inlineData", "data") == "iVBORw==",
		"inline audio":      at(msgs[1], "parts", 2, "inlineData", "mimeType") == "audio/ogg",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("%s: %v", name, msgs)
		}
	}
}

func TestRenderMCP(t *testing.T) {
	msgs := decodeAll(t, renderMCP(outcomes()))
	if len(msgs) != 6 {
		t.Fatalf("%d results", len(msgs))
	}
	checks := map[string]bool{
		"structured": at(msgs[0], "structuredContent", "sum") == 5.0 && at(msgs[0], "content", 0, "text") == `{"sum":5}` && msgs[0]["isError"] == false,
		"image":      at(msgs[1], "content", 1, "type") == "image" && at(msgs[1], "content", 1, "mimeType") == "image/png" && at(msgs[1], "content", 1, "data") == "iVBORw==",
		"audio":      at(msgs[1], "content", 2, "type") == "audio",
		"refusal":    msgs[2]["isError"] == true && at(msgs[2], "content", 0, "text") == "The call was refused (denied): no secrets",
		"tool error": msgs[5]["isError"] == true,
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("%s: %v", name, msgs)
		}
	}
}

func TestRefusalText(t *testing.T) {
	e := &messages.Error{Code: messages.CodeInvalidArguments, Message: "arguments of t-add do not match its input schema: /a: got string", Details: []string{"/a: got string", "/b: missing"}}
	if got, want := refusalText(e), "The call was refused (invalid_arguments): arguments of t-add do not match its input schema: /a: got string\n- /b: missing"; got != want {
		t.Errorf("refusal text %q, want %q", got, want)
	}
}

// docExamples returns the JSON examples of protocol.md marked as message.
func docExamples(t *testing.T, message string) [][]byte {
	t.Helper()
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, m := range regexp.MustCompile("(?s)<!-- message: "+message+" -->\\s*```json\\n(.*?)```").FindAllSubmatch(doc, -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatalf("protocol.md has no example of %s", message)
	}
	return out
}

// TestProtocolBatchExamples keeps the batch examples of protocol.md
// honest: the tool calls of each request example read as its format's,
// and each ResultsReply example is what the format renders of its calls.
func TestProtocolBatchExamples(t *testing.T) {
	for _, ex := range docExamples(t, "SubmitBatchRequest") {
		var br messages.SubmitBatchRequest
		if err := json.Unmarshal(ex, &br); err != nil {
			t.Fatal(err)
		}
		if err := br.Validate(); err != nil {
			t.Errorf("%s example: %v", br.Format, err)
		}
		calls, _, err := readToolCalls(br.Format, br.ToolCalls)
		if err != nil {
			t.Errorf("%s example: %v", br.Format, err)
			continue
		}
		for _, c := range calls {
			if c.refused != nil || c.name == "" {
				t.Errorf("%s example: call %+v", br.Format, c)
			}
		}
	}
	for _, ex := range docExamples(t, "ResultsRequest") {
		var rr messages.ResultsRequest
		if err := json.Unmarshal(ex, &rr); err != nil || rr.Validate() != nil {
			t.Errorf("ResultsRequest example: %v %v", err, rr.Validate())
		}
	}
	// The examples show an add, a chart and a denied call, one per format in this order.
	png, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUg==")
	results := map[string]*messages.CallResult{
		"t-add":   {Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.JSONBlock(messages.JSON(`{"sum":5}`))}, StructuredContent: messages.JSON(`{"sum":5}`)},
		"t-chart": {Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("chart of sales"), messages.ImageBlock(png, "image/png")}},
	}
	formats := []string{"openai-chat", "openai-responses", "anthropic", "gemini", "mcp"}
	examples := docExamples(t, "ResultsReply")
	if len(examples) != len(formats) {
		t.Fatalf("%d ResultsReply examples, want one per format", len(examples))
	}
	for i, ex := range examples {
		var reply messages.ResultsReply
		if err := json.Unmarshal(ex, &reply); err != nil {
			t.Fatal(err)
		}
		outcomes := make([]callOutcome, len(reply.Calls))
		for k, bc := range reply.Calls {
			outcomes[k] = callOutcome{call: bc}
			if bc.Error == nil {
				outcomes[k].result = results[bc.Name]
			}
		}
		got := resultRenderers[formats[i]](outcomes)
		if len(got) != len(reply.Messages) {
			t.Errorf("%s: renders %d messages, the example shows %d", formats[i], len(got), len(reply.Messages))
			continue
		}
		for k := range got {
			var want, have any
			_ = json.Unmarshal(reply.Messages[k], &want)
			_ = json.Unmarshal(got[k], &have)
			if !reflect.DeepEqual(want, have) {
				t.Errorf("%s message %d renders as\n%s\nthe example shows\n%s", formats[i], k, got[k], reply.Messages[k])
			}
		}
	}
}

// FuzzReadToolCalls: whatever a client sends as tool_calls, reading it
// does not panic, and what it reads is a batch the pipeline can take:
// 1 to MaxBatchCalls calls, each refused or with JSON arguments.
func FuzzReadToolCalls(f *testing.F) {
	f.Add("openai-chat", []byte(`{"choices":[{"message":{"tool_calls":[{"id":"call_1","type":"function","function":{"name":"t-add","arguments":"{\"a\":1}"}}]}}]}`))
	f.Add("openai-responses", []byte(`{"id":"r","output":[{"type":"function_call","call_id":"c","name":"t-add","arguments":"{}"}]}`))
	f.Add("anthropic", []byte(`{"content":[{"type":"tool_use","id":"toolu_1","name":"t-add","input":{"a":1}}]}`))
	f.Add("gemini", []byte(`{"responseId":"r","candidates":[{"content":{"parts":[{"functionCall":{"name":"t-add","args":{}}}]}}]}`))
	f.Add("mcp", []byte(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t-add","arguments":{}}}]`))
	f.Fuzz(func(t *testing.T, format string, raw []byte) {
		calls, _, err := readToolCalls(format, messages.JSON(raw))
		if err != nil {
			if messages.CodeOf(err) != messages.CodeBadRequest {
				t.Fatalf("error of code %s: %v", messages.CodeOf(err), err)
			}
			return
		}
		if len(calls) == 0 || len(calls) > messages.MaxBatchCalls {
			t.Fatalf("%d calls read", len(calls))
		}
		for _, c := range calls {
			if c.refused == nil && !json.Valid(c.args) {
				t.Fatalf("call %+v accepted with arguments that are not JSON", c)
			}
		}
	})
}
