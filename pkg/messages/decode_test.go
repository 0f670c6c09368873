package messages

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// TestGeneratedDecodersMatchReflection decodes MessagePack written by
// another program (plain maps, extra keys, nil values) with the
// generated decoders and with reflection, and expects the same values.
func TestGeneratedDecodersMatchReflection(t *testing.T) {
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
		{"submit", map[string]any{"tool": "a-b", "arguments": map[string]any{"x": 1}, "agent": "a", "turn": "t", "idempotency_key": "k", "timeout_ms": 5, "wait": true, "wait_ms": 7, "notify": "_INBOX.y", "route": "r", "call_id": "rc", "quiet": true, "extra": 1},
			&SubmitRequest{}, &plainSubmitRequest{}},
		{"request", request, &CallRequest{}, &plainCallRequest{}},
		{"result", result, &CallResult{}, &plainCallResult{}},
		{"event", map[string]any{"call_id": "c", "kind": "result", "time": now, "attempt": 1, "worker": "w", "request": request, "result": result,
			"progress": map[string]any{"progress": 1.5, "total": 3, "message": "m"}, "log": map[string]any{"level": "info", "message": "l"},
			"cancel": map[string]any{"reason": "r", "by": "b"}, "approval": map[string]any{"approval_id": "a", "state": "pending"},
			"audit": map[string]any{"decision": "allowed", "policy_version": "v1", "rule_id": "r", "reason": "why", "arguments": map[string]any{"p": "[redacted]"}, "later": 1}},
			&CallEvent{}, &plainCallEvent{}},
		{"audit", map[string]any{"decision": "remembered", "policy_version": nil, "arguments": nil, "extra": []any{1}}, &QueuedAudit{}, &plainQueuedAudit{}},
		{"audit record", map[string]any{"time": now, "decision": "allowed", "call_id": "c", "tool": "a-b", "agent": "bot", "turn": "t", "arguments": map[string]any{"p": "[redacted]"},
			"policy_version": "v1", "rule_id": "r", "reason": "why", "by": "alice", "later": []any{1}}, &AuditRecord{}, &plainAuditRecord{}},
		{"audit batch", map[string]any{"through": uint64(1<<63 + 5), "records": []any{map[string]any{"time": now, "decision": "allowed", "tool": "a-b", "later": 1}, map[string]any{"decision": "remembered", "call_id": "c"}}, "next": "x"},
			&AuditBatch{}, &plainAuditBatch{}},
		{"audit batch, negative through", map[string]any{"through": -2, "records": nil}, &AuditBatch{}, &plainAuditBatch{}},
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
		// msgpack.Unmarshal reaches the same decoder through DecodeMsgpack.
		via := reflect.New(reflect.TypeOf(tc.fast).Elem()).Interface()
		if err := msgpack.Unmarshal(data, via); err != nil {
			t.Fatalf("%s (msgpack.Unmarshal): %v", tc.name, err)
		}
		if got, _ := json.Marshal(via); !reflect.DeepEqual(got, fast) {
			t.Errorf("%s through msgpack.Unmarshal:\n got %s\nwant %s", tc.name, got, fast)
		}
	}
}

type plainSubmitRequest SubmitRequest

// rawMap writes a map of keys and MessagePack values given as bytes.
func rawMap(kv ...any) []byte {
	b := []byte{0x80 | byte(len(kv)/2)}
	for i := 0; i < len(kv); i += 2 {
		b = appendMsgpackString(b, []byte(kv[i].(string)))
		b = append(b, kv[i+1].([]byte)...)
	}
	return b
}

func be16(code byte, v uint16) []byte { return binary.BigEndian.AppendUint16([]byte{code}, v) }
func be32(code byte, v uint32) []byte { return binary.BigEndian.AppendUint32([]byte{code}, v) }
func be64(code byte, v uint64) []byte { return binary.BigEndian.AppendUint64([]byte{code}, v) }

// Every integer encoding, as other programs may write it.
var integerForms = []struct {
	name string
	raw  []byte
	want int64
}{
	{"positive fixint", []byte{0x05}, 5},
	{"negative fixint", []byte{0xfd}, -3},
	{"uint8", []byte{0xcc, 0xc8}, 200},
	{"uint16", be16(0xcd, 60000), 60000},
	{"uint32", be32(0xce, 4000000000), 4000000000},
	{"uint64", be64(0xcf, 1<<40), 1 << 40},
	{"uint64 above MaxInt64", be64(0xcf, math.MaxUint64), -1}, // wraps, as Decoder.DecodeInt64 has it
	{"int8", []byte{0xd0, 0x80}, math.MinInt8},
	{"int16", be16(0xd1, 0x8000), math.MinInt16},
	{"int32", be32(0xd2, 0x80000000), math.MinInt32},
	{"int64", be64(0xd3, 1<<63), math.MinInt64},
	{"nil", []byte{0xc0}, 0},
}

func TestDecodersReadEveryIntegerWidth(t *testing.T) {
	t.Parallel()
	for _, tc := range integerForms {
		n := tc.raw
		cases := []struct {
			data       []byte
			fast, slow any
			got        func() []any
		}{
			{data: rawMap("timeout_ms", n, "wait_ms", n), fast: &SubmitRequest{}, slow: &plainSubmitRequest{}},
			{data: rawMap("max_attempts", n), fast: &CallRequest{}, slow: &plainCallRequest{}},
			{data: rawMap("attempt", n), fast: &CallEvent{}, slow: &plainCallEvent{}},
			{data: rawMap("attempt", n), fast: &CallResult{}, slow: &plainCallResult{}},
			{data: rawMap("progress", n, "total", n), fast: &Progress{}, slow: &plainProgress{}},
		}
		for _, c := range cases {
			if err := Msgpack.Unmarshal(c.data, c.fast); err != nil {
				t.Fatalf("%s into %T: %v", tc.name, c.fast, err)
			}
			if err := Msgpack.Unmarshal(c.data, c.slow); err != nil {
				t.Fatalf("%s into %T (reflection): %v", tc.name, c.slow, err)
			}
			if fast, slow := fmt.Sprint(c.fast), fmt.Sprint(c.slow); fast != slow {
				t.Errorf("%s: got %s, reflection reads %s", tc.name, fast, slow)
			}
		}
		var req CallRequest
		if err := Msgpack.Unmarshal(rawMap("max_attempts", n), &req); err != nil || int64(req.MaxAttempts) != tc.want {
			t.Errorf("%s: max_attempts %d (%v), want %d", tc.name, req.MaxAttempts, err, tc.want)
		}
	}
	// Floats where numbers are floats, and no floats where they are integers.
	var p Progress
	if err := Msgpack.Unmarshal(rawMap("progress", be32(0xca, math.Float32bits(1.5)), "total", be64(0xcb, math.Float64bits(2.25))), &p); err != nil || p.Progress != 1.5 || p.Total != 2.25 {
		t.Errorf("progress %+v (%v)", p, err)
	}
	if err := Msgpack.Unmarshal(rawMap("attempt", be64(0xcb, math.Float64bits(1))), &CallResult{}); CodeOf(err) != CodeMalformed {
		t.Errorf("float attempt: %v", err)
	}
}

func TestJSONValuesFromEveryMsgpackForm(t *testing.T) {
	t.Parallel()
	var all []byte
	for _, tc := range integerForms {
		all = append(all, tc.raw...)
	}
	when := time.Date(2026, 11, 29, 12, 0, 0, 5, time.UTC)
	cases := []struct {
		name string
		raw  []byte
		want string
	}{
		{"integers", append([]byte{0x90 | byte(len(integerForms))}, all...),
			`[5,-3,200,60000,4000000000,1099511627776,18446744073709551615,-128,-32768,-2147483648,-9223372036854775808,null]`},
		{"floats", append([]byte{0x92}, append(be32(0xca, math.Float32bits(0.1)), be64(0xcb, math.Float64bits(-2.5e300))...)...),
			`[0.10000000149011612,-2.5e+300]`},
		{"integer keys", append([]byte{0x83, 0x01, 0xc3}, append(be64(0xcf, math.MaxUint64), append([]byte{0xc2}, append(be16(0xd1, 0xfffe), 0xc0)...)...)...),
			`{"1":true,"-1":false,"-2":null}`},
		{"binary", []byte{0x81, 0xc4, 0x01, 'k', 0xc4, 0x03, 0, 1, 0xff}, `{"k":"AAH/"}`},
		{"not escaped for HTML", appendMsgpackString(nil, []byte("<a&b>")), `"<a&b>"`},
		{"escaped", appendMsgpackString(nil, []byte("\"\\\n\x01")), `"\"\\\n\u0001"`},
		{"line separator", appendMsgpackString(nil, []byte("é\u2028")), `"é\u2028"`},
		{"invalid UTF-8", appendMsgpackString(nil, []byte("é\xff")), `"é\ufffd"`},
		{"timestamp", mustMsgpack(t, when), `"2026-11-29T12:00:00.000000005Z"`},
	}
	for _, tc := range cases {
		var j JSON
		if err := Msgpack.Unmarshal(tc.raw, &j); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if string(j) != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, j, tc.want)
		}
		var back JSON // and through the DecodeMsgpack that msgpack.Unmarshal calls
		if err := msgpack.Unmarshal(tc.raw, &back); err != nil || string(back) != tc.want {
			t.Errorf("%s via msgpack.Unmarshal: got %s (%v), want %s", tc.name, back, err, tc.want)
		}
	}
	for _, raw := range [][]byte{{0xd6, 0x05, 0, 0, 0, 0}, be64(0xcb, math.Float64bits(math.Inf(1))), {0x81, 0xc0, 0xc0}, {0xc1}} {
		var j JSON
		if err := Msgpack.Unmarshal(raw, &j); CodeOf(err) != CodeMalformed {
			t.Errorf("%x: %s, %v", raw, j, err)
		}
	}
}

func TestDecodersReadEveryTimestampForm(t *testing.T) {
	t.Parallel()
	when := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	sec, nsec := when.Unix(), int64(when.Nanosecond())
	before1970 := time.Date(1960, 1, 2, 3, 4, 5, 6, time.UTC)
	body32 := binary.BigEndian.AppendUint32(nil, uint32(sec))
	body64 := binary.BigEndian.AppendUint64(nil, uint64(nsec)<<34|uint64(sec))
	body96 := func(t time.Time) []byte {
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(nil, uint32(t.Nanosecond())), uint64(t.Unix()))
	}
	cases := []struct {
		name string
		raw  []byte
		want time.Time // zero: an error
	}{
		{"32-bit", append([]byte{0xd6, 0xff}, body32...), time.Unix(sec, 0)},
		{"64-bit", append([]byte{0xd7, 0xff}, body64...), time.Unix(sec, nsec)},
		{"96-bit", append([]byte{0xc7, 12, 0xff}, body96(when)...), when},
		{"96-bit before 1970", append([]byte{0xc7, 12, 0xff}, body96(before1970)...), before1970},
		{"64-bit of type 13", append([]byte{0xd7, 13}, body64...), time.Unix(sec, nsec)},
		{"RFC 3339", appendMsgpackString(nil, []byte(when.Format(time.RFC3339Nano))), when},
		{"[seconds, nanoseconds]", append([]byte{0x92}, append(be64(0xd3, uint64(sec)), be32(0xce, uint32(nsec))...)...), time.Unix(sec, nsec)},
		{"year 10000", append([]byte{0xc7, 12, 0xff}, body96(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))...), time.Time{}},
		{"year -1", append([]byte{0xc7, 12, 0xff}, body96(time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC))...), time.Time{}},
		{"16 bytes", append([]byte{0xd8, 0xff}, make([]byte, 16)...), time.Time{}},
		{"another extension", append([]byte{0xd6, 0x05}, body32...), time.Time{}},
		{"nil", []byte{0xc0}, time.Time{}},
	}
	for _, tc := range cases {
		data := rawMap("call_id", []byte{0xa1, 'c'}, "queued_at", tc.raw)
		var req CallRequest
		err := Msgpack.Unmarshal(data, &req)
		if tc.want.IsZero() {
			if CodeOf(err) != CodeMalformed {
				t.Errorf("%s: read %v (%v), want an error", tc.name, req.QueuedAt, err)
			}
			continue
		}
		if err != nil || !req.QueuedAt.Equal(tc.want) {
			t.Errorf("%s: read %v (%v), want %v", tc.name, req.QueuedAt, err, tc.want)
		}
		if tc.raw[0] == 0xd6 || tc.raw[0] == 0xd7 && tc.raw[1] == 0xff || tc.raw[0] == 0xc7 {
			var plain plainCallRequest // reflection reads the extension too
			if err := Msgpack.Unmarshal(data, &plain); err != nil || plain.QueuedAt != req.QueuedAt {
				t.Errorf("%s: read %v, reflection %v (%v)", tc.name, req.QueuedAt, plain.QueuedAt, err)
			}
		}
	}
	// What the encoder writes for each range of times reads back.
	for _, tc := range []struct {
		t    time.Time
		code byte
	}{
		{time.Unix(1e9, 0), 0xd6},
		{time.Unix(1e9, 5), 0xd7},
		{before1970, 0xc7},
		{time.Date(2600, 1, 1, 0, 0, 0, 1, time.UTC), 0xc7},
		{time.Time{}, 0xc7},
	} {
		data, err := Msgpack.Marshal(&CallRequest{QueuedAt: tc.t, Deadline: tc.t})
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, []byte("queued_at")); data[i+len("queued_at")] != tc.code {
			t.Errorf("%v written as %x, want code %x", tc.t, data[i+len("queued_at"):], tc.code)
		}
		var req CallRequest
		if err := Msgpack.Unmarshal(data, &req); err != nil || !req.QueuedAt.Equal(tc.t) || !req.Deadline.Equal(tc.t) {
			t.Errorf("%v read as %v (%v)", tc.t, req.QueuedAt, err)
		}
		if tc.t.IsZero() && req.QueuedAt.Location() != time.UTC {
			t.Errorf("zero time read in %v", req.QueuedAt.Location())
		}
	}
}

func TestDecodersNilAndMalformed(t *testing.T) {
	t.Parallel()
	// A nil message zeroes the value, as reflection does; a nil field
	// leaves it as it is.
	req := CallRequest{CallID: "c", MaxAttempts: 2}
	if err := Msgpack.Unmarshal([]byte{0xc0}, &req); err != nil || !reflect.DeepEqual(req, CallRequest{}) {
		t.Errorf("nil message: %+v (%v)", req, err)
	}
	res := CallResult{Content: []ContentBlock{TextBlock("t")}, StructuredContent: JSON(`{}`)}
	if err := Msgpack.Unmarshal(rawMap("content", []byte{0xc0}, "structured_content", []byte{0xc0}), &res); err != nil || len(res.Content) != 1 || res.StructuredContent != nil {
		t.Errorf("nil fields: %+v (%v)", res, err)
	}
	if err := Msgpack.Unmarshal(rawMap("content", []byte{0x92, 0xc0, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa4, 't', 'e', 'x', 't'}), &res); err != nil ||
		!reflect.DeepEqual(res.Content, []ContentBlock{{}, {Type: ContentText}}) {
		t.Errorf("nil block: %+v (%v)", res.Content, err)
	}
	// A nil in place of an approval's time is refused; the reflection
	// decoder used to panic on it.
	approval := rawMap("approval_id", []byte{0xa1, 'a'}, "created_at", []byte{0xc0})
	for _, v := range []any{&CallEvent{}, &SubmitReply{}} {
		if err := Msgpack.Unmarshal(rawMap("approval", approval), v); CodeOf(err) != CodeMalformed {
			t.Errorf("%T with a nil time: %v", v, err)
		}
	}
	if err := Msgpack.Unmarshal(rawMap("approvals", append([]byte{0x91}, approval...)), &ListApprovalsReply{}); CodeOf(err) != CodeMalformed {
		t.Errorf("approvals with a nil time: %v", err)
	}
	// Lengths beyond the message are refused before anything is allocated.
	for _, data := range [][]byte{
		rawMap("content", be16(0xdc, 1<<15)),
		rawMap("content", be32(0xdd, 1<<20)),
		rawMap("structured_content", be32(0xdf, 1<<30)),
		rawMap("tool", be32(0xdb, 1<<31)),
		rawMap("unknown", be32(0xdd, 1<<31)),
		{0x83, 0xa1, 'c', 0xa1, 'c'}, // 3 keys, 1 present
	} {
		if err := Msgpack.Unmarshal(data, &CallResult{}); CodeOf(err) != CodeMalformed {
			t.Errorf("%x: %v", data, err)
		}
	}
}

// A decode error names the field, and the item of a list, whose value
// could not be read, through the nested messages.
func TestDecodeErrorsNameTheField(t *testing.T) {
	t.Parallel()
	block := rawMap("type", []byte{0xa4, 't', 'e', 'x', 't'}, "text", []byte{0xc3}) // text: true
	result := rawMap("content", append([]byte{0x92}, append(rawMap("type", []byte{0xa4, 't', 'e', 'x', 't'}), block...)...))
	cases := []struct {
		name string
		data []byte
		v    any
		want string
	}{
		{"field", rawMap("tool", []byte{0x05}), &SubmitRequest{}, ": tool: msgpack: invalid code=5 decoding string/bytes length"},
		{"nested list item", rawMap("result", result), &CallEvent{}, ": result: content: item 1: text: msgpack: invalid code=c3"},
		{"time out of range", rawMap("queued_at", binary.BigEndian.AppendUint64([]byte{0xc7, 12, 0xff, 0, 0, 0, 0}, 1<<40)), &CallRequest{}, ": queued_at: time 36812-"},
		{"not finite", rawMap("progress", rawMap("total", be64(0xcb, math.Float64bits(math.Inf(1))))), &CallEvent{}, ": progress: total: +Inf is not a finite number"},
		{"unknown field too deep", rawMap("\x01", bytes.Repeat([]byte{0x91}, maxMessageDepth+1)), &CallRequest{}, "message refused: the message nests maps and arrays deeper than 288 levels"},
	}
	for _, tc := range cases {
		err := Msgpack.Unmarshal(tc.data, tc.v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want it to contain %q", tc.name, err, tc.want)
		}
	}
	// The key of a field read from a hostile peer is quoted when it is not printable.
	if err := fieldError([]byte("a\nb"), errTruncated); err.Error() != `"a\nb": unexpected EOF` {
		t.Errorf("unprintable key: %v", err)
	}
}

// A nil in place of a block's annotations leaves them nil, as reflection has it.
func TestNilAnnotationsStayNil(t *testing.T) {
	t.Parallel()
	var b ContentBlock
	if err := Msgpack.Unmarshal(rawMap("type", []byte{0xa4, 't', 'e', 'x', 't'}, "annotations", []byte{0xc0}), &b); err != nil || b.Annotations != nil {
		t.Errorf("annotations %+v (%v)", b.Annotations, err)
	}
}
