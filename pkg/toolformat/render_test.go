package toolformat

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// outcomes are one call of each kind a render meets.
func outcomes() []Outcome {
	png := []byte{0x89, 'P', 'N', 'G'}
	return []Outcome{
		{Call: messages.BatchCall{ToolCallID: "c1", Name: "t-add", CallID: "i1", State: messages.StateCompleted},
			Result: &messages.CallResult{Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.JSONBlock(messages.JSON(`{"sum":5}`))}, StructuredContent: messages.JSON(`{"sum":5}`)}},
		{Call: messages.BatchCall{ToolCallID: "c2", Name: "t-chart", CallID: "i2", State: messages.StateCompleted},
			Result: &messages.CallResult{Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("a chart"), messages.ImageBlock(png, "image/png"), {Type: messages.ContentAudio, Data: []byte{1}, MIMEType: "audio/ogg"}}}},
		{Call: messages.BatchCall{ToolCallID: "c3", Name: "t-secret", Error: &messages.Error{Code: messages.CodeDenied, Message: "no secrets"}}},
		{Call: messages.BatchCall{ToolCallID: "c4", Name: "t-wipe", CallID: "i4", State: messages.StateAwaitingApproval, Approval: &messages.Approval{ApprovalID: "i4", Reason: "destructive"}}},
		{Call: messages.BatchCall{CallID: "i5", State: messages.StateRunning}, Tool: "t-slow"},
		{Call: messages.BatchCall{ToolCallID: "c6", Name: "t-fail", CallID: "i6", State: messages.StateCompleted},
			Result: &messages.CallResult{Status: messages.StateCompleted, IsError: true, Content: []messages.ContentBlock{messages.TextBlock("boom")}, Error: &messages.ResultError{Code: messages.ResultToolError, Message: "boom"}}},
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
	msgs := decodeAll(t, openAIChat.render(outcomes()))
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
	msgs := decodeAll(t, openAIResponses.render(outcomes()))
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
	msgs := decodeAll(t, renderMCP([]Outcome{
		{Call: messages.BatchCall{ToolCallID: "c1", Name: "pets-listPets", CallID: "i1", State: messages.StateCompleted},
			Result: &messages.CallResult{Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.JSONBlock(list)}, StructuredContent: list}},
		{Call: messages.BatchCall{ToolCallID: "c2", Name: "pets-getPet", CallID: "i2", State: messages.StateCompleted},
			Result: &messages.CallResult{Status: messages.StateCompleted, IsError: true, Content: []messages.ContentBlock{messages.TextBlock("HTTP 404 Not Found: {}")},
				StructuredContent: messages.JSON(`{"status":404,"body":{}}`), Error: &messages.ResultError{Code: messages.ResultToolError, Message: "HTTP 404"}}},
	}))
	if got := at(msgs[0], "structuredContent", "result", 0, "name"); got != "Rex" || at(msgs[0], "content", 0, "text") != string(list) {
		t.Errorf("an array Result: %v", msgs[0])
	}
	if _, has := msgs[1]["structuredContent"]; has || at(msgs[1], "content", 1, "text") != `{"status":404,"body":{}}` {
		t.Errorf("an error Result: %v", msgs[1])
	}
}

func TestRefusalText(t *testing.T) {
	e := &messages.Error{Code: messages.CodeInvalidArguments, Message: "arguments of t-add do not match its input schema: /a: got string", Details: []string{"/a: got string", "/b: missing"}}
	if got, want := refusalText(e), "The call was refused (invalid_arguments): arguments of t-add do not match its input schema: /a: got string\n- /b: missing"; got != want {
		t.Errorf("refusal text %q, want %q", got, want)
	}
}

// completed is a call that ended with blocks as its result.
func completed(id, name string, blocks ...messages.ContentBlock) Outcome {
	return Outcome{Call: messages.BatchCall{ToolCallID: id, Name: name, CallID: "i-" + id, State: messages.StateCompleted},
		Result: &messages.CallResult{Status: messages.StateCompleted, Content: blocks}}
}

func media(kind, mime string) messages.ContentBlock {
	return messages.ContentBlock{Type: kind, Data: []byte{1, 2, 3}, MIMEType: mime}
}

// TestRenderMediaPerProvider: each format carries the image and audio
// types its provider takes where it takes them, and leaves the others
// out with a note in the text.
func TestRenderMediaPerProvider(t *testing.T) {
	const data = "AQID"
	calls := []Outcome{
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
		msgs := decodeAll(t, openAIChat.render(calls))
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
		msgs := decodeAll(t, openAIResponses.render(calls))
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
		res := []Outcome{completed("c4", "t-doc",
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
	msgs := decodeAll(t, renderAnthropic([]Outcome{
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
	cut.Result.Truncated = true
	structured := completed("c2", "t-add")
	structured.Result.StructuredContent = messages.JSON(`{"sum":5}`)
	timedOut := Outcome{Call: messages.BatchCall{ToolCallID: "c3", Name: "t-slow", CallID: "i3", State: messages.StateTimedOut},
		Result: &messages.CallResult{Status: messages.StateTimedOut, IsError: true, Error: &messages.ResultError{Code: messages.ResultTimedOut, Message: "the call's deadline passed"}}}
	calls := []Outcome{cut, structured, timedOut}
	wantText := []string{
		"aaaa\n[The result was cut to the tool's maximum result size.]",
		`{"sum":5}`,
		"The call ended timed_out (timed_out): the call's deadline passed",
	}
	chat := decodeAll(t, openAIChat.render(calls))
	responses := decodeAll(t, openAIResponses.render(calls))
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
	calls := []Outcome{
		completed("c1", "t-big", messages.TextBlock(big)),
		completed("c2", "t-big", messages.TextBlock(big)),
		completed("c3", "t-pic", messages.ImageBlock(make([]byte, 10_000), "image/png")),
		{Call: messages.BatchCall{ToolCallID: "c4", Name: "t-secret", Error: &messages.Error{Code: messages.CodeDenied, Message: "no"}}},
	}
	for format, render := range renderers {
		t.Run(format, func(t *testing.T) {
			whole := Fit(render, calls, 1<<20)
			if !reflect.DeepEqual(whole, render(calls)) {
				t.Errorf("messages that fit were changed")
			}
			const budget = 12_000
			fitted := Fit(render, calls, budget)
			text := ""
			for _, m := range fitted {
				text += string(m)
			}
			if len(text) > budget {
				t.Errorf("the messages are %d bytes, more than %d", len(text), budget)
			}
			if n := strings.Count(text, CutToFitNote); n != 3 {
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

// TestCallOutcome: a call an agent runs itself renders as the
// coordinator renders a batch's: its result, its refusal by the error's
// code, or the refusal it was read with.
func TestCallOutcome(t *testing.T) {
	call := Call{ID: "call_1", Name: "t-add", Arguments: messages.JSON(`{}`)}
	res := &messages.CallResult{CallID: "i1", Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("5")}}
	refused := Call{ID: "call_2", Name: "t-add", Refused: messages.Errorf(messages.CodeInvalidArguments, "arguments of t-add are not a JSON object")}
	got, err := Render("openai-chat", []Outcome{
		call.Outcome(res, nil),
		call.Outcome(nil, messages.Errorf(messages.CodeToolNotFound, "no tool t-add in the catalog")),
		refused.Outcome(res, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"role":"tool","tool_call_id":"call_1","content":"5"}`,
		`{"role":"tool","tool_call_id":"call_1","content":"The call was refused (tool_not_found): no tool t-add in the catalog"}`,
		`{"role":"tool","tool_call_id":"call_2","content":"The call was refused (invalid_arguments): arguments of t-add are not a JSON object"}`,
	}
	for i := range want {
		if i >= len(got) || string(got[i]) != want[i] {
			t.Errorf("message %d: %s, want %s", i, got[min(i, len(got)-1)], want[i])
		}
	}
	if o := call.Outcome(res, nil); o.Call.CallID != "i1" || o.Call.State != messages.StateCompleted {
		t.Errorf("the outcome's call: %+v", o.Call)
	}
	if _, err := Render("cohere", nil); messages.CodeOf(err) != messages.CodeBadRequest || !strings.Contains(err.Error(), `unknown format "cohere"`) {
		t.Errorf("unknown format: %v", err)
	}
}

// TestRenderStructuredContentNotJSON: a result an agent built itself may
// hold structured content that is not JSON; Render says so, and a
// Renderer renders the result without it rather than failing.
func TestRenderStructuredContentNotJSON(t *testing.T) {
	bad := completed("c1", "t-add", messages.TextBlock("5"))
	bad.Result.StructuredContent = messages.JSON(`{"sum":`)
	for format, render := range renderers {
		t.Run(format, func(t *testing.T) {
			if _, err := Render(format, []Outcome{bad}); messages.CodeOf(err) != messages.CodeBadRequest || !strings.Contains(err.Error(), "tool call c1 is not JSON") {
				t.Errorf("Render: %v", err)
			}
			text := ""
			for _, m := range render([]Outcome{bad}) {
				text += string(m)
			}
			if !strings.Contains(text, "5") || strings.Contains(text, `{"sum":`) {
				t.Errorf("rendered %s", text)
			}
		})
	}
}
