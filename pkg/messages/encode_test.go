package messages

import (
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// The written-out encoders must produce what reflection produces from the
// json tags. Each plain* type has the fields of its message but not its
// EncodeMsgpack method, so it is encoded by reflection.
type (
	plainCallRequest  CallRequest
	plainCallEvent    CallEvent
	plainCallResult   CallResult
	plainContentBlock ContentBlock
	plainProgress     Progress
	plainSubmitReply  SubmitReply
)

func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	data, err := Msgpack.Marshal(v)
	if err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(data, &m); err != nil {
		t.Fatalf("decode %T: %v", v, err)
	}
	return m
}

func TestWrittenOutEncodersMatchReflection(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 5, time.UTC)
	full := CallResult{CallID: "c", Tool: "a-b", Status: StateCompleted, IsError: true,
		Content:           []ContentBlock{TextBlock("t"), ImageBlock([]byte{1, 2}, "image/png"), {Type: ContentResourceLink, URI: "u", Name: "n", Description: "d", MIMEType: "m"}, JSONBlock(JSON(`{"x":[1]}`))},
		StructuredContent: JSON(`{"x":[1]}`), Error: &ResultError{Code: "tool_error", Message: "m"}, Attempt: 2, Worker: "w",
		QueuedAt: now, StartedAt: now, FinishedAt: now, Truncated: true, FullResult: &ObjectRef{Bucket: "b", Name: "n", Size: 3}}
	req := CallRequest{CallID: "c", Tool: "a-b", Namespace: "a", Method: "b", Arguments: JSON(`{"k":"v"}`), Agent: "ag", Turn: "tu",
		ArgumentsDigest: "d", QueuedAt: now, Deadline: now, MaxAttempts: 3, Notify: "_INBOX.x"}
	cases := []struct {
		name          string
		fast, reflect any
	}{
		{"full submit", SubmitRequest{Tool: "a-b", Arguments: JSON(`{"k":"v"}`), Agent: "ag", Turn: "tu", IdempotencyKey: "k", TimeoutMS: 5, Wait: true, WaitMS: 7, Notify: "_INBOX.x", Route: "r", CallID: "rc", Quiet: true},
			plainSubmitRequest{Tool: "a-b", Arguments: JSON(`{"k":"v"}`), Agent: "ag", Turn: "tu", IdempotencyKey: "k", TimeoutMS: 5, Wait: true, WaitMS: 7, Notify: "_INBOX.x", Route: "r", CallID: "rc", Quiet: true}},
		{"sparse submit", SubmitRequest{Tool: "a-b"}, plainSubmitRequest{Tool: "a-b"}},
		{"full request", req, plainCallRequest(req)},
		{"sparse request", CallRequest{CallID: "c"}, plainCallRequest{CallID: "c"}},
		{"full result", full, plainCallResult(full)},
		{"sparse result", CallResult{CallID: "c"}, plainCallResult{CallID: "c"}},
		{"block", full.Content[2], plainContentBlock(full.Content[2])},
		{"progress", Progress{Progress: 1, Total: 2, Message: "m"}, plainProgress{Progress: 1, Total: 2, Message: "m"}},
		{"sparse progress", Progress{}, plainProgress{}},
		{"event with everything", CallEvent{CallID: "c", Kind: EventResult, Time: now, Attempt: 1, Worker: "w", Request: &req,
			Progress: &Progress{Progress: 1}, Log: &LogEntry{Level: "info", Message: "m"}, Cancel: &CancelInfo{Reason: "r"},
			Approval: &Approval{ApprovalID: "a", State: ApprovalPending}, Result: &full},
			plainCallEvent{CallID: "c", Kind: EventResult, Time: now, Attempt: 1, Worker: "w", Request: &req,
				Progress: &Progress{Progress: 1}, Log: &LogEntry{Level: "info", Message: "m"}, Cancel: &CancelInfo{Reason: "r"},
				Approval: &Approval{ApprovalID: "a", State: ApprovalPending}, Result: &full}},
		{"sparse event", CallEvent{CallID: "c", Kind: EventStarted}, plainCallEvent{CallID: "c", Kind: EventStarted}},
		{"reply", SubmitReply{CallID: "c", State: StateCompleted, Duplicate: true, Result: &full, Approval: &Approval{ApprovalID: "a"}},
			plainSubmitReply{CallID: "c", State: StateCompleted, Duplicate: true, Result: &full, Approval: &Approval{ApprovalID: "a"}}},
	}
	for _, tc := range cases {
		if got, want := asMap(t, tc.fast), asMap(t, tc.reflect); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, got, want)
		}
	}
	// Every field of each type is covered by the full values above.
	for _, typ := range []reflect.Type{reflect.TypeFor[SubmitRequest](), reflect.TypeFor[CallRequest](), reflect.TypeFor[CallResult](), reflect.TypeFor[CallEvent](), reflect.TypeFor[ContentBlock](), reflect.TypeFor[SubmitReply]()} {
		var m map[string]any
		switch typ.Name() {
		case "SubmitRequest":
			m = asMap(t, cases[0].fast)
		case "CallRequest":
			m = asMap(t, req)
		case "CallResult":
			m = asMap(t, full)
		case "ContentBlock":
			m = asMap(t, full.Content[2])
			m["text"], m["json"], m["data"] = "", "", ""
		case "CallEvent":
			m = asMap(t, cases[9].fast)
		case "SubmitReply":
			m = asMap(t, cases[11].fast)
		}
		if len(m) != typ.NumField() {
			t.Errorf("%s: %d of %d fields covered; a new field needs its place in encode.go and here", typ.Name(), len(m), typ.NumField())
		}
	}
}
