package messages

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func fuzzDecoder[T any](f *testing.F, seeds ...any) {
	for _, s := range seeds {
		if b, err := Msgpack.Marshal(s); err == nil {
			f.Add(b, false)
		}
		if b, err := json.Marshal(s); err == nil {
			f.Add(b, true)
		}
	}
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}, false)
	f.Add([]byte{0xdd, 0x7f, 0xff, 0xff, 0xff, 0x00}, false)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		c := Msgpack
		if asJSON {
			c = JSONCodec
		}
		var v T
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := c.Unmarshal(data, &v)
		runtime.ReadMemStats(&after)
		// A decoder may allocate for what the input holds, never for what
		// its length prefixes promise.
		if spent, limit := after.TotalAlloc-before.TotalAlloc, uint64(64*len(data)+256<<10); spent > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes (limit %d)", len(data), spent, limit)
		}
		if err != nil {
			// A message nested too deeply is refused as a bad request
			// (docs/protocol.md); anything else that does not decode is malformed.
			tooDeep := CodeOf(err) == CodeBadRequest && (strings.HasSuffix(err.Error(), errTooDeep.Message) || strings.HasSuffix(err.Error(), errMessageTooDeep.Message))
			if CodeOf(err) != CodeMalformed && !tooDeep {
				t.Fatalf("error without code malformed: %v", err)
			}
			return
		}
		// Whatever decodes must encode again in both codecs.
		if _, err := Msgpack.Marshal(&v); err != nil {
			t.Fatalf("decoded value does not encode as MessagePack: %v", err)
		}
		if _, err := JSONCodec.Marshal(&v); err != nil {
			t.Fatalf("decoded value does not encode as JSON: %v", err)
		}
	})
}

func FuzzDecodeSubmitRequest(f *testing.F) {
	fuzzDecoder[SubmitRequest](f, &SubmitRequest{Tool: "demo-echo", Arguments: JSON(`{"text":"hi","n":[1,2.5,{"x":null}]}`), Wait: true})
}

func FuzzDecodeCallRequest(f *testing.F) {
	fuzzDecoder[CallRequest](f, &CallRequest{CallID: "c", Tool: "a-b", Namespace: "a", Method: "b", Arguments: JSON(`{}`)})
}

func FuzzDecodeCallEvent(f *testing.F) {
	fuzzDecoder[CallEvent](f,
		&CallEvent{CallID: "c", Kind: EventProgress, Progress: &Progress{Progress: 1, Total: 2, Message: "m"}},
		&CallEvent{CallID: "c", Kind: EventResult, Result: &CallResult{Content: []ContentBlock{ImageBlock([]byte{1}, "image/png")}}},
		&CallEvent{CallID: "c", Kind: EventQueued, Request: &CallRequest{CallID: "c"}, Audit: &QueuedAudit{Decision: AuditAllowed, RuleID: "r", Arguments: JSON(`{"p":"[redacted]"}`)}})
}

func FuzzDecodeToolDefinition(f *testing.F) {
	fuzzDecoder[ToolDefinition](f, &ToolDefinition{Name: "a-b", InputSchema: JSON(`{"type":"object","properties":{"x":{"type":"string"}}}`)})
}

func FuzzDecodeSmallRequests(f *testing.F) {
	fuzzDecoder[CancelRequest](f, &CancelRequest{CallID: "c", Reason: "r"})
}

func FuzzDecodeGetCallRequest(f *testing.F) {
	f.Add([]byte{0x81, 0xa4, 't', 'o', 'o', 'l', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, false)
	fuzzDecoder[GetCallRequest](f, &GetCallRequest{CallID: "c"})
}

func FuzzDecodeListToolsRequest(f *testing.F) {
	fuzzDecoder[ListToolsRequest](f, &ListToolsRequest{Agent: "a", Turn: "t", Format: "anthropic"})
}

func FuzzDecodeActivateRequest(f *testing.F) {
	fuzzDecoder[ActivateRequest](f, &ActivateRequest{Agent: "a", Turn: "t", Tools: []string{"a-b"}})
}

func FuzzDecodeGetTurnRequest(f *testing.F) {
	fuzzDecoder[GetTurnRequest](f, &GetTurnRequest{Turn: "t"})
}

func FuzzDecodeDiscoverRequest(f *testing.F) {
	fuzzDecoder[DiscoverRequest](f, &DiscoverRequest{Agent: "a", Query: "find files", PageSize: 5})
}

func FuzzDecodeApprovalRequests(f *testing.F) {
	fuzzDecoder[DecideRequest](f, &DecideRequest{ApprovalID: "x", Decision: "approve", By: "op"})
}

func FuzzDecodeToolSwitchRequest(f *testing.F) {
	fuzzDecoder[ToolSwitchRequest](f, &ToolSwitchRequest{Tool: "a-b", Reason: "r"})
}

// FuzzJSONBridge checks that any JSON value survives the trip through MessagePack.
func FuzzJSONBridge(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,-2,3.5e10,"x",null,true,false,{"b":{}}]}`, `18446744073709551615`, `-9223372036854775808`, `"\u00e9\ud83d\ude00"`, `1e400`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		packed, err := msgpack.Marshal(JSON(data))
		if err != nil {
			return // numbers beyond float64, or nesting beyond the limit
		}
		var back JSON
		if err := msgpack.Unmarshal(packed, &back); err != nil {
			t.Fatalf("MessagePack of %s does not decode: %v", data, err)
		}
		var want, got any
		if err := json.Unmarshal(data, &want); err != nil {
			return
		}
		if err := json.Unmarshal(back, &got); err != nil {
			t.Fatalf("bridge produced invalid JSON %s from %s", back, data)
		}
		w, _ := json.Marshal(want)
		g, _ := json.Marshal(got)
		if !bytes.Equal(w, g) {
			t.Fatalf("value changed: %s -> %s", w, g)
		}
	})
}

// FuzzMsgpackToJSON checks that any MessagePack value either converts to valid JSON or is refused.
func FuzzMsgpackToJSON(f *testing.F) {
	f.Add([]byte{0x81, 0xa1, 'a', 0x01})
	f.Add([]byte{0xc4, 0x02, 0x00, 0xff})
	f.Add([]byte{0xd6, 0xff, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var j JSON
		if err := msgpack.Unmarshal(data, &j); err != nil {
			return
		}
		if len(j) > 0 && !json.Valid(j) {
			t.Fatalf("invalid JSON %q from %x", j, data)
		}
	})
}

// FuzzJSONString checks that strings in JSON values are written as encoding/json writes them
// with HTML escaping off.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "<a&b>", "\"\\\n\x01\x7f", "é\u2028\u2029\ufffd", "\xff\xfe", "\xed\xa0\x80"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(string(s)); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q written as %s, want %s", s, got, want)
		}
	})
}

func FuzzDecodeDiscoverReply(f *testing.F) {
	entry := fullToolEntry()
	fuzzDecoder[DiscoverReply](f, &DiscoverReply{Hits: []DiscoverHit{{Name: "fs-read_file", Score: 1.5, Exact: true}}, Tools: []ToolEntry{entry}, Schemas: []JSON{JSON(`{"type":"function"}`)}, Page: 1, More: true},
		&DiscoverReply{Hits: []DiscoverHit{}, Tools: []ToolEntry{}})
}
