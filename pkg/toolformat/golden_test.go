package toolformat

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// goldenFixtures are calls of every kind a render meets: each kind of
// content, media of each type, a refusal, an approval, a call still
// running, a tool error, a cut result, a timed-out call.
func goldenFixtures() map[string][]Outcome {
	png := []byte{0x89, 'P', 'N', 'G'}
	done := func(id, name string, blocks ...messages.ContentBlock) Outcome {
		return Outcome{Call: messages.BatchCall{ToolCallID: id, Name: name, CallID: "i-" + id, State: messages.StateCompleted},
			Result: &messages.CallResult{Status: messages.StateCompleted, Content: blocks}}
	}
	medium := func(kind, mime string) messages.ContentBlock {
		return messages.ContentBlock{Type: kind, Data: []byte{1, 2, 3}, MIMEType: mime}
	}
	cut := done("c7", "t-big", messages.TextBlock("aaaa <b> & é"))
	cut.Result.Truncated = true
	structured := done("c8", "t-add")
	structured.Result.StructuredContent = messages.JSON(`{"sum":5,"html":"<i>"}`)
	list := done("c9", "t-list", messages.TextBlock("two"))
	list.Result.StructuredContent = messages.JSON(`[1,2]`)
	failedStructured := done("c10", "t-fail", messages.TextBlock("bad"))
	failedStructured.Result.IsError = true
	failedStructured.Result.StructuredContent = messages.JSON(`{"status":500}`)
	timedOut := Outcome{Call: messages.BatchCall{ToolCallID: "c11", Name: "t-slow", CallID: "i11", State: messages.StateTimedOut},
		Result: &messages.CallResult{Status: messages.StateTimedOut, IsError: true, Error: &messages.ResultError{Code: messages.ResultTimedOut, Message: "the call's deadline passed"}}}
	return map[string][]Outcome{
		"kinds": {
			done("c1", "t-add", messages.JSONBlock(messages.JSON(`{"sum":5}`))),
			done("c2", "t-chart", messages.TextBlock("a chart"), messages.ImageBlock(png, "image/png"), messages.ContentBlock{Type: messages.ContentAudio, Data: []byte{1}, MIMEType: "audio/ogg"}),
			{Call: messages.BatchCall{ToolCallID: "c3", Name: "t-secret", Error: &messages.Error{Code: messages.CodeInvalidArguments, Message: "arguments of t-secret do not match", Details: []string{"/a: missing", "/b: got string"}}}},
			{Call: messages.BatchCall{ToolCallID: "c4", Name: "t-wipe", CallID: "i4", State: messages.StateAwaitingApproval, Approval: &messages.Approval{ApprovalID: "i4", Reason: "destructive"}}},
			{Call: messages.BatchCall{CallID: "i5", State: messages.StateRunning}, Tool: "t-slow"},
			{Call: messages.BatchCall{CallID: "i6", State: messages.StateQueued}, Tool: "t-slow"},
		},
		"media": {
			done("m1", "t-snap", messages.TextBlock("snap"), medium(messages.ContentImage, "image/jpeg"), medium(messages.ContentImage, "image/bmp"), medium(messages.ContentImage, "image/webp")),
			done("m2", "t-say", medium(messages.ContentAudio, "audio/wav"), medium(messages.ContentAudio, "audio/mpeg"), medium(messages.ContentAudio, "audio/ogg"), medium(messages.ContentAudio, "audio/flac")),
			done("m3", "t-gif", medium(messages.ContentImage, "image/gif"), medium(messages.ContentImage, "image/heic")),
			done("m4", "t-doc",
				messages.ContentBlock{Type: messages.ContentResource, URI: "file:///a.txt", MIMEType: "text/plain", Text: "hello"},
				messages.ContentBlock{Type: messages.ContentResource, URI: "file:///a.bin", MIMEType: "application/octet-stream", Data: []byte{1, 2, 3}},
				messages.ContentBlock{Type: messages.ContentResourceLink, URI: "file:///b.txt", Name: "b.txt", Description: "the b file", MIMEType: "text/plain"},
				messages.TextBlock("")),
		},
		"results": {cut, structured, list, failedStructured, timedOut, done("c12", "t-none")},
		"fit": {
			done("f1", "t-big", messages.TextBlock(strings.Repeat("b", 10_000))),
			done("f2", "t-big", messages.TextBlock(strings.Repeat("b", 10_000))),
			done("f3", "t-pic", messages.ImageBlock(make([]byte, 10_000), "image/png")),
			{Call: messages.BatchCall{ToolCallID: "f4", Name: "t-secret", Error: &messages.Error{Code: messages.CodeDenied, Message: "no"}}},
		},
	}
}

// TestRenderedBytes holds every format's rendering of goldenFixtures,
// and Fit's within 12,000 bytes, to the bytes in testdata/rendered.json,
// those the coordinator rendered before the renderers were in this
// package: an agent's conversation, and a provider's prompt cache, see
// the same bytes.
func TestRenderedBytes(t *testing.T) {
	data, err := os.ReadFile("testdata/rendered.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]string
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for name, calls := range goldenFixtures() {
		for format, render := range renderers {
			var msgs []messages.JSON
			if name == "fit" {
				msgs = Fit(render, calls, 12_000)
			} else {
				msgs = render(calls)
			}
			got := make([]string, len(msgs))
			for i, m := range msgs {
				got[i] = string(m)
			}
			key := name + "/" + format
			if !slices.Equal(got, want[key]) {
				t.Errorf("%s renders\n%s\nwant\n%s", key, strings.Join(got, "\n"), strings.Join(want[key], "\n"))
			}
			seen++
		}
	}
	if seen != len(want) {
		t.Errorf("%d renderings checked, testdata has %d", seen, len(want))
	}
}
