package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestRoundTripBothCodecs(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	res := &CallResult{
		CallID: "c1", Tool: "demo-echo", Status: StateCompleted,
		Content:           []ContentBlock{TextBlock("hi"), ImageBlock([]byte{0, 1, 2, 255}, "image/png"), JSONBlock(JSON(`{"b":1,"a":[true,null,"x",1.5]}`))},
		StructuredContent: JSON(`{"z":1,"a":2}`),
		Attempt:           2, Worker: "w1", QueuedAt: now, StartedAt: now, FinishedAt: now,
	}
	for _, c := range []Codec{Msgpack, JSONCodec} {
		data, err := c.Marshal(res)
		if err != nil {
			t.Fatalf("%v marshal: %v", c, err)
		}
		var got CallResult
		if _, err := Decode(c.NewHeader(), data, &got); err != nil {
			t.Fatalf("%v decode: %v", c, err)
		}
		want, _ := json.Marshal(res)
		have, _ := json.Marshal(&got)
		if !bytes.Equal(want, have) {
			t.Errorf("%v round trip:\n got %s\nwant %s", c, have, want)
		}
	}
}

func TestMsgpackFieldNamesAreSnakeCase(t *testing.T) {
	t.Parallel()
	data, err := Msgpack.Marshal(&SubmitRequest{Tool: "demo-echo", IdempotencyKey: "k", TimeoutMS: 5})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tool", "idempotency_key", "timeout_ms"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %q missing from %v", k, m)
		}
	}
}

func TestJSONValueAsNativeMsgpack(t *testing.T) {
	t.Parallel()
	// A client in another language sends arguments as a plain map.
	data, err := msgpack.Marshal(map[string]any{"tool": "demo-echo", "arguments": map[string]any{"text": "hi", "n": 3, "list": []any{1.5, "x", nil, true}}})
	if err != nil {
		t.Fatal(err)
	}
	var req SubmitRequest
	if err := Msgpack.Unmarshal(data, &req); err != nil {
		t.Fatal(err)
	}
	var args map[string]any
	if err := json.Unmarshal(req.Arguments, &args); err != nil {
		t.Fatalf("arguments %s: %v", req.Arguments, err)
	}
	if args["text"] != "hi" || args["n"] != float64(3) || len(args["list"].([]any)) != 4 {
		t.Fatalf("arguments %v", args)
	}
	// And it reads what we send as a plain map, in key order.
	out, err := Msgpack.Marshal(&SubmitRequest{Tool: "t-x", Arguments: JSON(`{"b":1,"a":{"c":[1,2]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := msgpack.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	a, ok := back["arguments"].(map[string]any)
	if !ok || a["b"] != int8(1) {
		t.Fatalf("arguments decoded as %#v", back["arguments"])
	}
	var again SubmitRequest
	if err := Msgpack.Unmarshal(out, &again); err != nil || string(again.Arguments) != `{"b":1,"a":{"c":[1,2]}}` {
		t.Fatalf("key order lost: %s %v", again.Arguments, err)
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		h    Header
		data []byte
		code ErrorCode
	}{
		{"truncated msgpack", Msgpack.NewHeader(), []byte{0x82, 0xa4, 't'}, CodeMalformed},
		{"trailing msgpack", Msgpack.NewHeader(), append(mustMsgpack(t, map[string]any{"tool": "a-b"}), 0xc0), CodeMalformed},
		{"json garbage", JSONCodec.NewHeader(), []byte(`{"tool":`), CodeMalformed},
		{"json trailing", JSONCodec.NewHeader(), []byte(`{"tool":"a-b"} {}`), CodeMalformed},
		{"json wrong type", JSONCodec.NewHeader(), []byte(`{"tool":5}`), CodeMalformed},
		{"unknown content type", Header{HeaderContentType: {"text/plain"}}, []byte(`x`), CodeBadRequest},
		{"future version", Header{HeaderVersion: {"4"}}, []byte{0x80}, CodeUnsupportedVersion},
		{"version 1", Header{HeaderVersion: {"1.4"}}, []byte{0x80}, CodeUnsupportedVersion},
	}
	for _, tc := range cases {
		var req SubmitRequest
		_, err := Decode(tc.h, tc.data, &req)
		if err == nil {
			t.Errorf("%s: decoded without error", tc.name)
			continue
		}
		if CodeOf(err) != tc.code {
			t.Errorf("%s: code %s (%v), want %s", tc.name, CodeOf(err), err, tc.code)
		}
		var e *Error
		if !errors.As(err, &e) || e.Message == "" {
			t.Errorf("%s: error without a message: %v", tc.name, err)
		}
	}
}

func TestErrorsMatchByCode(t *testing.T) {
	t.Parallel()
	err := Errorf(CodeToolNotFound, "no tool x")
	if !errors.Is(err, ErrToolNotFound) || errors.Is(err, ErrCallNotFound) {
		t.Fatal("errors.Is does not match by code")
	}
	if CodeToolNotFound.Status() != 404 || CodeInvalidArguments.Status() != 422 || CodePayloadTooLarge.Status() != 413 {
		t.Fatal("status mapping changed")
	}
}

func TestProgressFraction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Progress
		want float64
	}{{Progress{3, 4, ""}, 0.75}, {Progress{5, 0, ""}, -1}, {Progress{9, 4, ""}, 1}, {Progress{-1, 4, ""}, 0}} {
		if got := tc.p.Fraction(); got != tc.want {
			t.Errorf("%+v.Fraction() = %v, want %v", tc.p, got, tc.want)
		}
	}
}

func mustMsgpack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostileLengthCostsNothing sends a 12-byte request that promises a
// 4 GiB string, as a hostile client would, a thousand times: each must be
// refused as malformed without allocating for the promise or leaving a
// grown buffer in a pool.
func TestHostileLengthCostsNothing(t *testing.T) {
	hostile := []byte{0x81, 0xa4, 't', 'o', 'o', 'l', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 1000 {
		var req GetCallRequest
		if err := Msgpack.Unmarshal(hostile, &req); CodeOf(err) != CodeMalformed {
			t.Fatalf("hostile request decoded with error %v, want malformed", err)
		}
	}
	runtime.ReadMemStats(&after)
	if spent := after.TotalAlloc - before.TotalAlloc; spent > 4<<20 {
		t.Fatalf("1000 hostile requests allocated %d MiB", spent>>20)
	}
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 4<<20 {
		t.Fatalf("1000 hostile requests left the heap %d MiB larger", grown>>20)
	}
}

// A peer still speaking version 1 is told what changed, and a message
// without a version header is read.
func TestVersionOneIsRefusedWithWhatChanged(t *testing.T) {
	t.Parallel()
	var req SubmitRequest
	_, err := Decode(Header{HeaderVersion: {"1"}}, []byte{0x80}, &req)
	if CodeOf(err) != CodeUnsupportedVersion || !strings.Contains(err.Error(), "events.<call_id>.<kind>.<namespace>") {
		t.Fatalf("version 1: %v", err)
	}
	if _, err := Decode(Header{}, []byte{0x80}, &req); err != nil {
		t.Fatalf("no version header: %v", err)
	}
	if _, err := Decode(Header{HeaderVersion: {"3.1"}}, []byte{0x80}, &req); err != nil {
		t.Fatalf("version 3.1: %v", err)
	}
}

// A peer still speaking version 2 is told that workers now take calls
// from the events stream.
func TestVersionTwoIsRefusedWithWhatChanged(t *testing.T) {
	t.Parallel()
	var req SubmitRequest
	_, err := Decode(Header{HeaderVersion: {"2"}}, []byte{0x80}, &req)
	if CodeOf(err) != CodeUnsupportedVersion || !strings.Contains(err.Error(), "events.*.*.queued.*.<namespace>") || !strings.Contains(err.Error(), "calls stream") {
		t.Fatalf("version 2: %v", err)
	}
	// A call event stored by a version 2 peer is still read.
	var ev CallEvent
	if _, err := DecodeStored(Header{HeaderVersion: {"2"}}, []byte{0x80}, &ev); err != nil {
		t.Fatalf("stored version 2 event: %v", err)
	}
	if _, err := DecodeStored(Header{HeaderVersion: {"1"}}, []byte{0x80}, &ev); CodeOf(err) != CodeUnsupportedVersion {
		t.Fatalf("stored version 1 event: %v", err)
	}
}

// A refusal of a request's version is answered in the request's own
// encoding: a JSON request's in JSON.
func TestVersionRefusalIsInTheRequestsEncoding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    Header
		want Codec
	}{
		{"JSON", Header{HeaderVersion: {"1"}, HeaderContentType: {ContentTypeJSON}}, JSONCodec},
		{"JSON with parameters", Header{HeaderVersion: {"9"}, HeaderContentType: {"application/json; charset=utf-8"}}, JSONCodec},
		{"MessagePack", Header{HeaderVersion: {"1"}}, Msgpack},
		{"an unknown Content-Type", Header{HeaderVersion: {"1"}, HeaderContentType: {"text/plain"}}, JSONCodec},
	} {
		c, err := CodecOf(tc.h)
		if CodeOf(err) != CodeUnsupportedVersion || c != tc.want {
			t.Errorf("%s: codec %v, error %v; want %v and unsupported_version", tc.name, c, err, tc.want)
		}
	}
}

// The major version is the number before the first dot.
func TestMajorVersion(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{"3": "3", "3.1": "3", "3.1.4": "3", "03": "3", "2": "2", "10.0": "10", "3.": "3"} {
		if got, ok := MajorVersion(v); !ok || got != want {
			t.Errorf("MajorVersion(%q) = %q, %v; want %q", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "v3", "3 ", " 3", ".3", "three", "-3", "1234567890"} {
		if got, ok := MajorVersion(v); ok {
			t.Errorf("MajorVersion(%q) = %q, want not a version", v, got)
		}
	}
	var req SubmitRequest
	if _, err := Decode(Header{HeaderVersion: {"v3"}}, []byte{0x80}, &req); CodeOf(err) != CodeUnsupportedVersion || !strings.Contains(err.Error(), "not a protocol version") {
		t.Errorf("v3: %v", err)
	}
}

// The API answers a request of the previous major version in that version;
// one of an older version is refused naming the versions answered.
func TestAPIAnswersThePreviousVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value, answered string
		code            ErrorCode
	}{
		{"", "3", ""}, {"3", "3", ""}, {"3.2", "3", ""}, {"2", "2", ""}, {"2.0", "2", ""},
		{"1", "", CodeUnsupportedVersion}, {"4", "", CodeUnsupportedVersion},
	} {
		h := Header{HeaderContentType: {ContentTypeJSON}}
		if tc.value != "" {
			h[HeaderVersion] = []string{tc.value}
		}
		c, v, err := RequestCodec(h, APIVersions...)
		if (err == nil) != (tc.code == "") || (err != nil && CodeOf(err) != tc.code) || c != JSONCodec || (err == nil && v != tc.answered) {
			t.Errorf("version %q: %v %q %v", tc.value, c, v, err)
		}
		if err != nil && !strings.Contains(err.Error(), "answers versions 3 and 2") {
			t.Errorf("version %q: the refusal does not name the versions answered: %v", tc.value, err)
		}
		if err == nil {
			if got := JSONCodec.ReplyHeader(v)[HeaderVersion]; len(got) != 1 || got[0] != tc.answered {
				t.Errorf("version %q: reply labelled %v", tc.value, got)
			}
		}
	}
	// Every version may ask what the server speaks.
	if _, v, err := RequestCodec(Header{HeaderVersion: {"1"}}); err != nil || v != ProtocolVersion {
		t.Errorf("any version: %q %v", v, err)
	}
}

func TestSendsNotices(t *testing.T) {
	for v, want := range map[string]bool{
		NoticeVersion: true, "3.2": true, "3.10.4": true, "4": true, "12": true,
		"3": false, "3.0": false, "03": false, "2.5": false, "": false, "v3.1": false, "3.x": false,
	} {
		if got := SendsNotices(v); got != want {
			t.Errorf("SendsNotices(%q) = %v, want %v", v, got, want)
		}
	}
}
