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
		{"repeated ID of a refused call", "anthropic",
			`[{"type":"tool_use","id":"toolu_1","name":"t-add","input":"x"},{"type":"tool_use","id":"toolu_1","name":"t-add","input":{}}]`,
			[]call{{"toolu_1", "t-add", "", "invalid_arguments"}, {"toolu_1", "t-add", `{}`, "bad_request"}}, ""},
		{"control character in an ID", "anthropic",
			`[{"type":"tool_use","id":"a\nb","name":"t-add","input":{}}]`,
			[]call{{"a\nb", "t-add", `{}`, "bad_request"}}, ""},
		{"openai-chat assistant message", "openai-chat",
			`{"role":"assistant","content":"Let me add.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"t-add","arguments":null}},{"id":"call_2","type":"function","function":{"name":"t-add"}}]}`,
			[]call{{"call_1", "t-add", `{}`, ""}, {"call_2", "t-add", `{}`, ""}}, ""},
		{"openai-chat arguments as an object", "openai-chat",
			`[{"id":"call_1","type":"function","function":{"name":"t-add","arguments":{"a":1}}}]`,
			[]call{{"call_1", "t-add", `{"a":1}`, ""}}, ""},
		{"openai-chat arguments string of invalid UTF-8", "openai-chat",
			"[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"t-add\",\"arguments\":\"{\\\"a\\\":\\\"\xff\xfe\\\"}\"}}]",
			[]call{{"call_1", "t-add", "{\"a\":\"\ufffd\ufffd\"}", ""}}, ""},
		{"tool-call ID of invalid UTF-8", "anthropic",
			"[{\"type\":\"tool_use\",\"id\":\"c\xff1\",\"name\":\"t-add\",\"input\":{}}]",
			[]call{{"c\ufffd1", "t-add", `{}`, ""}}, ""},
		{"openai-chat arguments string holding an array", "openai-chat",
			`[{"id":"call_1","type":"function","function":{"name":"t-add","arguments":"[1,2]"}}]`,
			[]call{{"call_1", "t-add", "", "invalid_arguments"}}, ""},
		{"openai-responses arguments a number", "openai-responses",
			`[{"type":"function_call","call_id":"call_1","name":"t-add","arguments":5},{"type":"function_call","call_id":"call_2","name":"t-add","arguments":"\"x\""}]`,
			[]call{{"call_1", "t-add", "", "invalid_arguments"}, {"call_2", "t-add", "", "invalid_arguments"}}, ""},
		{"openai-responses items", "openai-responses",
			`[{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"x"}},
			  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]},{"type":"function_call","call_id":"call_1","name":"t-add","arguments":""}]`,
			[]call{{"call_1", "t-add", `{}`, ""}}, ""},
		{"anthropic thinking passed over", "anthropic",
			`{"id":"msg_2","content":[{"type":"thinking","thinking":"Adding.","signature":"EqQB"},{"type":"redacted_thinking","data":"EmwK"},
			  {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}},{"type":"tool_use","id":"toolu_1","name":"t-add","input":null}]}`,
			[]call{{"toolu_1", "t-add", `{}`, ""}}, "msg_2"},
		{"gemini content", "gemini",
			`{"role":"model","parts":[{"text":"Adding."},{"functionCall":{"id":"g1","name":"t-add","args":{"a":1}},"thoughtSignature":"CiQB"}]}`,
			[]call{{"g1", "t-add", `{"a":1}`, ""}}, ""},
		{"mcp one request", "mcp",
			`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"t-add","arguments":null}}`,
			[]call{{"42", "t-add", `{}`, ""}}, ""},
		{"mcp numeric IDs as decimal text", "mcp",
			`[{"jsonrpc":"2.0","id":1e2,"method":"tools/call","params":{"name":"t-add"}},{"jsonrpc":"2.0","id":7.0,"method":"tools/call","params":{"name":"t-add"}},
			  {"jsonrpc":"2.0","id":-3,"method":"tools/call","params":{"name":"t-add"}},{"jsonrpc":"2.0","id":2.5,"method":"tools/call","params":{"name":"t-add"}}]`,
			[]call{{"100", "t-add", `{}`, ""}, {"7", "t-add", `{}`, ""}, {"-3", "t-add", `{}`, ""}, {"2.5", "t-add", `{}`, ""}}, ""},
		{"mcp null ID", "mcp",
			`[{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"t-add","arguments":{}}},{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`,
			[]call{{"", "t-add", `{}`, ""}}, ""},
		{"mcp params array", "mcp",
			`[{"name":"t-add","arguments":{"a":1}},{"name":"t-add","arguments":[1]}]`,
			[]call{{"", "t-add", `{"a":1}`, ""}, {"", "t-add", "", "invalid_arguments"}}, ""},
		{"tool-call ID of 10 KB", "openai-chat",
			`[{"id":"` + strings.Repeat("x", 10_000) + `","type":"function","function":{"name":"t-add","arguments":"{}"}}]`,
			[]call{{strings.Repeat("x", messages.MaxToolCallIDLength), "t-add", `{}`, "bad_request"}}, ""},
		{"tool name of 10 KB", "anthropic",
			`[{"type":"tool_use","id":"toolu_1","name":"t-` + strings.Repeat("é", 5_000) + `","input":{}}]`,
			[]call{{"toolu_1", "t-" + strings.Repeat("é", (messages.MaxToolCallNameLength-2)/2), "", "invalid_name"}}, ""},
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
	for name, tc := range map[string]struct{ format, raw, says string }{
		"unknown format":                    {"cohere", `[]`, `unknown format "cohere"`},
		"no tool calls":                     {"anthropic", `{"content":[{"type":"text","text":"done"}]}`, "holds no anthropic tool call"},
		"anthropic content a string":        {"anthropic", `{"role":"assistant","content":"Hello."}`, "holds no anthropic tool call"},
		"openai-chat message without calls": {"openai-chat", `{"choices":[{"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}]}`, "holds no openai-chat tool call"},
		"not JSON":                          {"anthropic", `[{`, "not anthropic tool calls"},
		"wrong shape":                       {"openai-chat", `{"choices":"x"}`, "choices is a JSON string, want an array"},
		"nothing to read":                   {"gemini", `{"text":"x"}`, "neither a GenerateContentResponse"},
		"gemini blocked prompt":             {"gemini", `{"promptFeedback":{"blockReason":"SAFETY"},"responseId":"r1"}`, "no candidate: its prompt was blocked (SAFETY)"},
		"gemini no candidates":              {"gemini", `{"candidates":[],"responseId":"r1"}`, "no candidate"},
		"gemini candidate without content":  {"gemini", `{"candidates":[{"finishReason":"SAFETY","index":0}],"responseId":"r1"}`, "holds no gemini tool call"},
		"too many":                          {"mcp", "[" + strings.TrimSuffix(strings.Repeat(`{"name":"t-add"},`, messages.MaxBatchCalls+1), ",") + "]", "holds 65 tool calls; at most 64"},
		"too many among other blocks":       {"anthropic", "[" + `{"type":"text","text":"x"},` + strings.TrimSuffix(strings.Repeat(`{"type":"tool_use","id":"x","name":"t-add"},`, messages.MaxBatchCalls+1), ",") + "]", "at most 64"},
		"tools/call no params":              {"mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, "without params"},
		"mcp id an object":                  {"mcp", `{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{"name":"t-add"}}`, "string or a number"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := readToolCalls(tc.format, messages.JSON(tc.raw))
			if messages.CodeOf(err) != messages.CodeBadRequest || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %v, want bad_request saying %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "Go value") || strings.Contains(err.Error(), "struct {") {
				t.Errorf("the error speaks of Go types: %v", err)
			}
		})
	}
	most := "[" + strings.TrimSuffix(strings.Repeat(`{"name":"t-add"},`, messages.MaxBatchCalls), ",") + "]"
	if calls, _, err := readToolCalls("mcp", messages.JSON(most)); err != nil || len(calls) != messages.MaxBatchCalls {
		t.Errorf("%d calls: %d read, %v", messages.MaxBatchCalls, len(calls), err)
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

// TestRenderMCPStructuredContent: the mcp format carries structured
// content as the MCP front does: a value that is not an object is wrapped
// under "result" (MCP's structuredContent is an object), and an error's is
// text, not structuredContent.
func TestRenderMCPStructuredContent(t *testing.T) {
	list := messages.JSON(`[{"name":"Rex"}]`)
	msgs := decodeAll(t, renderMCP([]callOutcome{
		{call: messages.BatchCall{ToolCallID: "c1", Name: "pets-listPets", CallID: "i1", State: messages.StateCompleted},
			result: &messages.CallResult{Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.JSONBlock(list)}, StructuredContent: list}},
		{call: messages.BatchCall{ToolCallID: "c2", Name: "pets-getPet", CallID: "i2", State: messages.StateCompleted},
			result: &messages.CallResult{Status: messages.StateCompleted, IsError: true, Content: []messages.ContentBlock{messages.TextBlock("HTTP 404 Not Found: {}")},
				StructuredContent: messages.JSON(`{"status":404,"body":{}}`), Error: &messages.ResultError{Code: messages.ResultToolError, Message: "HTTP 404"}}},
	}))
	if got := at(msgs[0], "structuredContent", "result", 0, "name"); got != "Rex" || at(msgs[0], "content", 0, "text") != string(list) {
		t.Errorf("an array result: %v", msgs[0])
	}
	if _, has := msgs[1]["structuredContent"]; has || at(msgs[1], "content", 1, "text") != `{"status":404,"body":{}}` {
		t.Errorf("an error result: %v", msgs[1])
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
// 1 to MaxBatchCalls calls, each refused or with JSON arguments, whose
// ID and name a reply can repeat.
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
			// A reply repeats them, and calls.results takes the reply.
			bc := messages.BatchCall{ToolCallID: c.id, Name: c.name, Error: c.refused, CallID: "i1"}
			if err := (&messages.ResultsRequest{Format: format, Calls: []messages.BatchCall{bc}}).Validate(); err != nil {
				t.Fatalf("a reply repeating call %q %q is refused by calls.results: %v", c.id, c.name, err)
			}
		}
	})
}

// completed is a call that ended with blocks as its result.
func completed(id, name string, blocks ...messages.ContentBlock) callOutcome {
	return callOutcome{call: messages.BatchCall{ToolCallID: id, Name: name, CallID: "i-" + id, State: messages.StateCompleted},
		result: &messages.CallResult{Status: messages.StateCompleted, Content: blocks}}
}

func media(kind, mime string) messages.ContentBlock {
	return messages.ContentBlock{Type: kind, Data: []byte{1, 2, 3}, MIMEType: mime}
}

// TestRenderMediaPerProvider: each format carries the image and audio
// types its provider takes where it takes them, and leaves the others
// out with a note in the text.
func TestRenderMediaPerProvider(t *testing.T) {
	const data = "AQID"
	calls := []callOutcome{
		completed("c1", "t-snap", messages.TextBlock("snap"), media(messages.ContentImage, "image/jpeg"), media(messages.ContentImage, "image/bmp")),
		completed("c2", "t-say", media(messages.ContentAudio, "audio/wav"), media(messages.ContentAudio, "audio/mpeg"), media(messages.ContentAudio, "audio/ogg")),
		completed("c3", "t-gif", media(messages.ContentImage, "image/gif"), media(messages.ContentImage, "image/heic")),
	}
	leftOut := func(kind, mime string) string {
		return "[" + kind + " (" + mime + ", 3 bytes): left out, as this provider cannot take it here]"
	}
	carried := func(kind, mime string) string {
		return "[" + kind + " (" + mime + "): in the message after the tool results]"
	}

	t.Run("openai-chat", func(t *testing.T) {
		msgs := decodeAll(t, renderOpenAIChat(calls))
		if len(msgs) != 4 {
			t.Fatalf("%d messages, want 3 tool messages and a user message: %v", len(msgs), msgs)
		}
		checks := map[string]bool{
			"jpeg carried, bmp left out": msgs[0]["content"] == "snap\n"+carried("image", "image/jpeg")+"\n"+leftOut("image", "image/bmp"),
			"wav and mp3 carried":        msgs[1]["content"] == carried("audio", "audio/wav")+"\n"+carried("audio", "audio/mpeg")+"\n"+leftOut("audio", "audio/ogg"),
			"gif carried, heic not":      msgs[2]["content"] == carried("image", "image/gif")+"\n"+leftOut("image", "image/heic"),
			"jpeg as a data URL":         at(msgs[3], "content", 1, "image_url", "url") == "data:image/jpeg;base64,"+data,
			"wav as input_audio":         at(msgs[3], "content", 3, "type") == "input_audio" && at(msgs[3], "content", 3, "input_audio", "format") == "wav" && at(msgs[3], "content", 3, "input_audio", "data") == data,
			"mp3 as input_audio":         at(msgs[3], "content", 4, "input_audio", "format") == "mp3",
			"each call introduced":       at(msgs[3], "content", 2, "text") == "Media returned by tool call c2 (t-say):" && at(msgs[3], "content", 5, "text") == "Media returned by tool call c3 (t-gif):",
			"nothing else":               len(at(msgs[3], "content").([]any)) == 7,
		}
		report(t, checks, msgs)
	})
	t.Run("openai-responses", func(t *testing.T) {
		msgs := decodeAll(t, renderOpenAIResponses(calls))
		if len(msgs) != 4 {
			t.Fatalf("%d items, want 3 outputs and a message: %v", len(msgs), msgs)
		}
		checks := map[string]bool{
			"audio left out":      msgs[1]["output"] == leftOut("audio", "audio/wav")+"\n"+leftOut("audio", "audio/mpeg")+"\n"+leftOut("audio", "audio/ogg"),
			"jpeg as input_image": at(msgs[3], "content", 1, "type") == "input_image" && at(msgs[3], "content", 1, "image_url") == "data:image/jpeg;base64,"+data && at(msgs[3], "content", 1, "detail") == "auto",
			"no intro for audio":  at(msgs[3], "content", 2, "text") == "Media returned by tool call c3 (t-gif):",
			"nothing else":        len(at(msgs[3], "content").([]any)) == 4,
		}
		report(t, checks, msgs)
	})
	t.Run("anthropic", func(t *testing.T) {
		msgs := decodeAll(t, renderAnthropic(calls))
		results := at(msgs[0], "content").([]any)
		checks := map[string]bool{
			"one message":      len(msgs) == 1,
			"jpeg as an image": at(results[0], "content", 1, "type") == "image" && at(results[0], "content", 1, "source", "media_type") == "image/jpeg" && at(results[0], "content", 1, "source", "data") == data,
			"bmp noted":        at(results[0], "content", 2, "text") == leftOut("image", "image/bmp"),
			"audio noted":      at(results[1], "content", 0, "text") == leftOut("audio", "audio/wav") && len(at(results[1], "content").([]any)) == 3,
			"gif as an image":  at(results[2], "content", 0, "source", "media_type") == "image/gif",
			"heic noted":       at(results[2], "content", 1, "text") == leftOut("image", "image/heic"),
		}
		report(t, checks, msgs)
	})
	t.Run("gemini", func(t *testing.T) {
		msgs := decodeAll(t, renderGemini(calls))
		if len(msgs) != 2 {
			t.Fatalf("%d contents: %v", len(msgs), msgs)
		}
		parts := at(msgs[1], "parts").([]any)
		checks := map[string]bool{
			"bmp left out": at(msgs[0], "parts", 0, "functionResponse", "response", "output") == "snap\n"+carried("image", "image/jpeg")+"\n"+leftOut("image", "image/bmp"),
			"gif left out": at(msgs[0], "parts", 2, "functionResponse", "response", "output") == leftOut("image", "image/gif")+"\n"+carried("image", "image/heic"),
			"jpeg inline":  at(parts[1], "inlineData", "mimeType") == "image/jpeg" && at(parts[1], "inlineData", "data") == data,
			"audio inline": at(parts[3], "inlineData", "mimeType") == "audio/wav" && at(parts[4], "inlineData", "mimeType") == "audio/mp3" && at(parts[5], "inlineData", "mimeType") == "audio/ogg",
			"heic inline":  at(parts[6], "text") == "Media returned by tool call c3 (t-gif):" && at(parts[7], "inlineData", "mimeType") == "image/heic",
			"nothing else": len(parts) == 8,
		}
		report(t, checks, msgs)
	})
	t.Run("mcp", func(t *testing.T) {
		res := []callOutcome{completed("c4", "t-doc",
			messages.ContentBlock{Type: messages.ContentResource, URI: "file:///a.txt", MIMEType: "text/plain", Text: "hello"},
			messages.ContentBlock{Type: messages.ContentResource, URI: "file:///a.bin", MIMEType: "application/octet-stream", Data: []byte{1, 2, 3}},
			messages.ContentBlock{Type: messages.ContentResourceLink, URI: "file:///b.txt", Name: "b.txt", Description: "the b file", MIMEType: "text/plain"},
			media(messages.ContentImage, "image/bmp"), media(messages.ContentAudio, "audio/ogg"))}
		msgs := decodeAll(t, renderMCP(res))
		checks := map[string]bool{
			"text resource":  at(msgs[0], "content", 0, "type") == "resource" && at(msgs[0], "content", 0, "resource", "uri") == "file:///a.txt" && at(msgs[0], "content", 0, "resource", "text") == "hello",
			"blob resource":  at(msgs[0], "content", 1, "resource", "blob") == data && at(msgs[0], "content", 1, "resource", "mimeType") == "application/octet-stream",
			"resource link":  at(msgs[0], "content", 2, "type") == "resource_link" && at(msgs[0], "content", 2, "uri") == "file:///b.txt" && at(msgs[0], "content", 2, "name") == "b.txt",
			"any image type": at(msgs[0], "content", 3, "type") == "image" && at(msgs[0], "content", 3, "mimeType") == "image/bmp" && at(msgs[0], "content", 3, "data") == data,
			"any audio type": at(msgs[0], "content", 4, "type") == "audio" && at(msgs[0], "content", 4, "mimeType") == "audio/ogg",
			"not an error":   msgs[0]["isError"] == false,
			"no structure":   msgs[0]["structuredContent"] == nil,
		}
		report(t, checks, msgs)
	})
}

func report(t *testing.T, checks map[string]bool, msgs any) {
	t.Helper()
	for name, ok := range checks {
		if !ok {
			t.Errorf("%s: %v", name, msgs)
		}
	}
}

// TestRenderAnthropicEmptyText: the Messages API refuses empty text
// blocks, so none is rendered, and a result with nothing left has no
// content.
func TestRenderAnthropicEmptyText(t *testing.T) {
	msgs := decodeAll(t, renderAnthropic([]callOutcome{
		completed("c1", "t-quiet", messages.TextBlock(""), messages.TextBlock("said"), messages.TextBlock("")),
		completed("c2", "t-silent", messages.TextBlock("")),
		completed("c3", "t-none"),
	}))
	results := at(msgs[0], "content").([]any)
	if c := at(results[0], "content").([]any); len(c) != 1 || at(c, 0, "text") != "said" {
		t.Errorf("empty text blocks rendered: %v", results[0])
	}
	for _, i := range []int{1, 2} {
		if r := results[i].(map[string]any); r["content"] != nil || r["is_error"] != false || r["tool_use_id"] == nil {
			t.Errorf("result %d with nothing to say: %v", i, r)
		}
	}
}

// TestRenderWhatTheModelReads: a result cut to the tool's maximum size
// says so; one without content reads as its structured content, or as
// how the call ended; every format marks a failed call as an error.
func TestRenderWhatTheModelReads(t *testing.T) {
	cut := completed("c1", "t-big", messages.TextBlock("aaaa"))
	cut.result.Truncated = true
	structured := completed("c2", "t-add")
	structured.result.StructuredContent = messages.JSON(`{"sum":5}`)
	timedOut := callOutcome{call: messages.BatchCall{ToolCallID: "c3", Name: "t-slow", CallID: "i3", State: messages.StateTimedOut},
		result: &messages.CallResult{Status: messages.StateTimedOut, IsError: true, Error: &messages.ResultError{Code: messages.ResultTimedOut, Message: "the call's deadline passed"}}}
	calls := []callOutcome{cut, structured, timedOut}
	wantText := []string{
		"aaaa\n[The result was cut to the tool's maximum result size.]",
		`{"sum":5}`,
		"The call ended timed_out (timed_out): the call's deadline passed",
	}
	chat := decodeAll(t, renderOpenAIChat(calls))
	responses := decodeAll(t, renderOpenAIResponses(calls))
	anthropic := at(decodeAll(t, renderAnthropic(calls))[0], "content").([]any)
	gemini := at(decodeAll(t, renderGemini(calls))[0], "parts").([]any)
	mcp := decodeAll(t, renderMCP(calls))
	for i, text := range wantText {
		errText := text
		if i == 2 {
			errText = "Error: " + text
		}
		checks := map[string]bool{
			"openai-chat":      chat[i]["content"] == errText,
			"openai-responses": responses[i]["output"] == errText,
			"anthropic":        at(anthropic, i, "content", 0, "text") == text && at(anthropic, i, "is_error") == (i == 2),
			"mcp":              at(mcp[i], "content", 0, "text") == text && mcp[i]["isError"] == (i == 2),
		}
		switch i {
		case 0:
			// Formats of blocks end with a text block of the note.
			note := "[The result was cut to the tool's maximum result size.]"
			checks["anthropic"] = at(anthropic, i, "content", 0, "text") == "aaaa" && at(anthropic, i, "content", 1, "text") == note
			checks["mcp"] = at(mcp[i], "content", 0, "text") == "aaaa" && at(mcp[i], "content", 1, "text") == note
			checks["gemini"] = at(gemini, i, "functionResponse", "response", "output") == text
		case 1:
			checks["gemini"] = at(gemini, i, "functionResponse", "response", "output", "sum") == 5.0
		case 2:
			checks["gemini"] = at(gemini, i, "functionResponse", "response", "error") == text && at(gemini, i, "functionResponse", "response", "output") == nil
		}
		for format, ok := range checks {
			if !ok {
				t.Errorf("%s renders call %d otherwise than %q", format, i, text)
			}
		}
	}
}

// TestFitMessages: results whose rendered messages would not fit in a
// reply are cut, each to a share of the room, and say so; a medium that
// does not fit its share is replaced by a note; messages that fit are
// left as they are.
func TestFitMessages(t *testing.T) {
	big := strings.Repeat("b", 10_000)
	calls := []callOutcome{
		completed("c1", "t-big", messages.TextBlock(big)),
		completed("c2", "t-big", messages.TextBlock(big)),
		completed("c3", "t-pic", messages.ImageBlock(make([]byte, 10_000), "image/png")),
		{call: messages.BatchCall{ToolCallID: "c4", Name: "t-secret", Error: &messages.Error{Code: messages.CodeDenied, Message: "no"}}},
	}
	for format, render := range resultRenderers {
		t.Run(format, func(t *testing.T) {
			whole := fitMessages(render, calls, 1<<20)
			if !reflect.DeepEqual(whole, render(calls)) {
				t.Errorf("messages that fit were changed")
			}
			const budget = 12_000
			fitted := fitMessages(render, calls, budget)
			text := ""
			for _, m := range fitted {
				text += string(m)
			}
			if len(text) > budget {
				t.Errorf("the messages are %d bytes, more than %d", len(text), budget)
			}
			if n := strings.Count(text, cutToFitNote); n != 3 {
				t.Errorf("%d results say they were cut, want 3:\n%s", n, text)
			}
			if !strings.Contains(text, "left out: too large") || !strings.Contains(text, "bytes cut") {
				t.Errorf("the cuts are not marked:\n%s", text)
			}
			if !strings.Contains(text, "The call was refused (denied): no") {
				t.Errorf("the refusal is lost:\n%s", text)
			}
		})
	}
}
