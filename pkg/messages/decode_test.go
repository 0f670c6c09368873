package messages

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// TestWrittenOutDecodersMatchReflection decodes MessagePack written by
// another program (plain maps, extra keys, nil values) with the
// written-out decoders and with reflection, and expects the same values.
func TestWrittenOutDecodersMatchReflection(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 5, time.UTC)
	result := map[string]any{"call_id": "c", "tool": "a-b", "status": "completed", "is_error": true, "unknown": []any{1, "x"},
		"content": []any{map[string]any{"type": "text", "text": "t"}, map[string]any{"type": "image", "data": []byte{1}, "mime_type": "image/png"},
			map[string]any{"type": "json", "json": map[string]any{"a": []any{1, 2.5}}}, map[string]any{"type": "resource_link", "uri": "u", "name": "n", "description": "d"}},
		"structured_content": map[string]any{"a": 1}, "error": map[string]any{"code": "tool_error", "message": "m"}, "attempt": 2, "worker": "w",
		"queued_at": now, "started_at": now, "finished_at": now, "truncated": true, "full_result": map[string]any{"bucket": "b", "name": "n", "size": 3}}
	request := map[string]any{"call_id": "c", "tool": "a-b", "namespace": "a", "method": "b", "arguments": map[string]any{"k": "v", "n": nil},
		"agent": "ag", "turn": "t", "arguments_digest": "d", "queued_at": now, "deadline": now, "max_attempts": 3, "notify": "_INBOX.x", "future": true}
	cases := []struct {
		name string
		in   map[string]any
		fast any
		slow any
	}{
		{"submit", map[string]any{"tool": "a-b", "arguments": map[string]any{"x": 1}, "agent": "a", "turn": "t", "idempotency_key": "k", "timeout_ms": 5, "wait": true, "wait_ms": 7, "notify": "_INBOX.y", "extra": 1},
			&SubmitRequest{}, &plainSubmitRequest{}},
		{"request", request, &CallRequest{}, &plainCallRequest{}},
		{"result", result, &CallResult{}, &plainCallResult{}},
		{"event", map[string]any{"call_id": "c", "kind": "result", "time": now, "attempt": 1, "worker": "w", "request": request, "result": result,
			"progress": map[string]any{"progress": 1.5, "total": 3, "message": "m"}, "log": map[string]any{"level": "info", "message": "l"},
			"cancel": map[string]any{"reason": "r", "by": "b"}, "approval": map[string]any{"approval_id": "a", "state": "pending"}},
			&CallEvent{}, &plainCallEvent{}},
		{"sparse event", map[string]any{"call_id": "c", "kind": "started", "request": nil, "result": nil, "progress": nil}, &CallEvent{}, &plainCallEvent{}},
		{"reply", map[string]any{"call_id": "c", "state": "completed", "duplicate": true, "result": result, "approval": map[string]any{"approval_id": "a"}},
			&SubmitReply{}, &plainSubmitReply{}},
	}
	for _, tc := range cases {
		data, err := msgpack.Marshal(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := Msgpack.Unmarshal(data, tc.fast); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := Msgpack.Unmarshal(data, tc.slow); err != nil {
			t.Fatalf("%s (reflection): %v", tc.name, err)
		}
		fast, _ := json.Marshal(tc.fast)
		slow, _ := json.Marshal(tc.slow)
		if !reflect.DeepEqual(fast, slow) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, fast, slow)
		}
	}
}

type plainSubmitRequest SubmitRequest
