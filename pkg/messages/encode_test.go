package messages

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// The generated encoders must produce what reflection produces from the
// json tags. Each plain* type has the fields of its message but not its
// EncodeMsgpack method, so it is encoded by reflection.
type (
	plainCallRequest  CallRequest
	plainCallEvent    CallEvent
	plainCallResult   CallResult
	plainContentBlock ContentBlock
	plainProgress     Progress
	plainSubmitReply  SubmitReply
	plainQueuedAudit  QueuedAudit
	plainAuditRecord  AuditRecord
	plainAuditBatch   AuditBatch
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

func TestGeneratedEncodersMatchReflection(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 5, time.UTC)
	full := CallResult{CallID: "c", Tool: "a-b", Status: StateCompleted, IsError: true,
		Content:           []ContentBlock{TextBlock("t"), ImageBlock([]byte{1, 2}, "image/png"), {Type: ContentResourceLink, URI: "u", Name: "n", Description: "d", MIMEType: "m", Annotations: &ContentAnnotations{Audience: []string{"user"}, Priority: new(0.5), LastModified: "2026-11-29T12:00:00Z"}}, JSONBlock(JSON(`{"x":[1]}`))},
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
			Approval: &Approval{ApprovalID: "a", State: ApprovalPending}, Result: &full, Audit: &QueuedAudit{Decision: AuditAllowed, RuleID: "r", Arguments: JSON(`{"p":"[redacted]"}`)}},
			plainCallEvent{CallID: "c", Kind: EventResult, Time: now, Attempt: 1, Worker: "w", Request: &req,
				Progress: &Progress{Progress: 1}, Log: &LogEntry{Level: "info", Message: "m"}, Cancel: &CancelInfo{Reason: "r"},
				Approval: &Approval{ApprovalID: "a", State: ApprovalPending}, Result: &full, Audit: &QueuedAudit{Decision: AuditAllowed, RuleID: "r", Arguments: JSON(`{"p":"[redacted]"}`)}}},
		{"sparse event", CallEvent{CallID: "c", Kind: EventStarted}, plainCallEvent{CallID: "c", Kind: EventStarted}},
		{"reply", SubmitReply{CallID: "c", State: StateCompleted, Duplicate: true, Result: &full, Approval: &Approval{ApprovalID: "a"}},
			plainSubmitReply{CallID: "c", State: StateCompleted, Duplicate: true, Result: &full, Approval: &Approval{ApprovalID: "a"}}},
		{"audit", QueuedAudit{Decision: AuditAllowed, PolicyVersion: "v1", RuleID: "r", Reason: "why", Arguments: JSON(`{"p":"[redacted]","n":[1.5]}`)},
			plainQueuedAudit{Decision: AuditAllowed, PolicyVersion: "v1", RuleID: "r", Reason: "why", Arguments: JSON(`{"p":"[redacted]","n":[1.5]}`)}},
		{"sparse audit", QueuedAudit{Decision: AuditRemembered}, plainQueuedAudit{Decision: AuditRemembered}},
		{"audit record", AuditRecord{Time: now, Decision: AuditAllowed, CallID: "c", Tool: "a-b", Agent: "bot", Turn: "t", Arguments: JSON(`{"p":"[redacted]"}`), PolicyVersion: "v1", RuleID: "r", Reason: "why", By: "alice"},
			plainAuditRecord{Time: now, Decision: AuditAllowed, CallID: "c", Tool: "a-b", Agent: "bot", Turn: "t", Arguments: JSON(`{"p":"[redacted]"}`), PolicyVersion: "v1", RuleID: "r", Reason: "why", By: "alice"}},
		{"sparse audit record", AuditRecord{Time: now, Decision: AuditAllowed, Tool: "a-b"}, plainAuditRecord{Time: now, Decision: AuditAllowed, Tool: "a-b"}},
		{"audit batch", AuditBatch{Through: 1<<63 + 5, Records: []AuditRecord{{Time: now, Decision: AuditAllowed, Tool: "a-b"}, {Time: now, Decision: AuditRemembered, Tool: "c-d", CallID: "c"}}},
			plainAuditBatch{Through: 1<<63 + 5, Records: []AuditRecord{{Time: now, Decision: AuditAllowed, Tool: "a-b"}, {Time: now, Decision: AuditRemembered, Tool: "c-d", CallID: "c"}}}},
		{"empty audit batch", AuditBatch{Through: 7}, plainAuditBatch{Through: 7}},
	}
	for _, tc := range cases {
		if got, want := asMap(t, tc.fast), asMap(t, tc.reflect); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, got, want)
		}
	}
	// Every field of each type is covered by the full values above.
	for _, typ := range []reflect.Type{reflect.TypeFor[SubmitRequest](), reflect.TypeFor[CallRequest](), reflect.TypeFor[CallResult](), reflect.TypeFor[CallEvent](), reflect.TypeFor[ContentBlock](), reflect.TypeFor[SubmitReply](), reflect.TypeFor[QueuedAudit](), reflect.TypeFor[AuditRecord](), reflect.TypeFor[AuditBatch]()} {
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
		case "QueuedAudit":
			m = asMap(t, cases[12].fast)
		case "AuditRecord":
			m = asMap(t, cases[14].fast)
		case "AuditBatch":
			m = asMap(t, cases[16].fast)
		}
		if len(m) != typ.NumField() {
			t.Errorf("%s: %d of %d fields covered; a new field needs a value here (and go generate)", typ.Name(), len(m), typ.NumField())
		}
	}
}

// libraryBytes is what msgpack.Encoder, set up as the codec sets it up, writes.
func libraryBytes(t testing.TB, write func(*msgpack.Encoder) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := write(enc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The packer writes each primitive byte for byte as the library does, at
// every size boundary.
func TestPackerWritesWhatTheLibraryWrites(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxInt64, -1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64} {
		checkPacker(t, fmt.Sprint("int ", n), func(w *packer) { w.putInt(n) }, func(e *msgpack.Encoder) error { return e.EncodeInt(n) })
	}
	for _, n := range []uint64{0, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
		checkPacker(t, fmt.Sprint("uint ", n), func(w *packer) { w.putUint(n) }, func(e *msgpack.Encoder) error { return e.EncodeUint(n) })
	}
	for _, size := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("x", size)
		checkPacker(t, fmt.Sprint("string of ", size), func(w *packer) { w.putStr(s) }, func(e *msgpack.Encoder) error { return e.EncodeString(s) })
		b := []byte(s)
		if size > 0 {
			checkPacker(t, fmt.Sprint("bytes of ", size), func(w *packer) { w.putBin(b) }, func(e *msgpack.Encoder) error { return e.EncodeBytes(b) })
		}
	}
	for _, n := range []int{0, 15, 16, 65535, 65536} {
		checkPacker(t, fmt.Sprint("map of ", n), func(w *packer) { w.header(n) }, func(e *msgpack.Encoder) error { return e.EncodeMapLen(n) })
		checkPacker(t, fmt.Sprint("array of ", n), func(w *packer) { w.arrayLen(n) }, func(e *msgpack.Encoder) error { return e.EncodeArrayLen(n) })
	}
	for _, tm := range []time.Time{{}, time.Unix(0, 0), time.Unix(1<<32-1, 0), time.Unix(1<<32, 0), time.Unix(1<<34, 0), time.Unix(1764500000, 123456789), time.Unix(-1, 5)} {
		checkPacker(t, fmt.Sprint("time ", tm), func(w *packer) { w.putTime(tm) }, func(e *msgpack.Encoder) error { return e.EncodeTime(tm) })
	}
	for _, f := range []float64{0, 1.5, -2, math.Inf(1)} {
		checkPacker(t, fmt.Sprint("float ", f), func(w *packer) { w.putFloat(f) }, func(e *msgpack.Encoder) error { return e.EncodeFloat64(f) })
	}
	for _, v := range []bool{true, false} {
		checkPacker(t, fmt.Sprint("bool ", v), func(w *packer) { w.putBool(v) }, func(e *msgpack.Encoder) error { return e.EncodeBool(v) })
	}
}

func checkPacker(t *testing.T, name string, pack func(*packer), write func(*msgpack.Encoder) error) {
	t.Helper()
	var w packer
	pack(&w)
	if want := libraryBytes(t, write); !bytes.Equal(w.b, want) {
		t.Errorf("%s: packer wrote % x, the library % x", name, w.b, want)
	}
}

func FuzzPackerWritesWhatTheLibraryWrites(f *testing.F) {
	f.Add(int64(300), "key", int64(1764500000), int64(5), 2.5)
	f.Fuzz(func(t *testing.T, n int64, s string, secs, nanos int64, x float64) {
		tm := time.Unix(secs, nanos)
		var w packer
		w.putInt(n)
		w.putStr(s)
		w.putTime(tm)
		w.putFloat(x)
		want := libraryBytes(t, func(e *msgpack.Encoder) error {
			return errors.Join(e.EncodeInt(n), e.EncodeString(s), e.EncodeTime(tm), e.EncodeFloat64(x))
		})
		if !bytes.Equal(w.b, want) {
			t.Fatalf("packer wrote % x, the library % x", w.b, want)
		}
	})
}

// A pending approval has no decision time: the field is left out, in
// either encoding, never sent as the zero time.
func TestAPendingApprovalHasNoDecisionTime(t *testing.T) {
	for _, codec := range []Codec{JSONCodec, Msgpack} {
		data, err := codec.Marshal(&Approval{ApprovalID: "a1", State: ApprovalPending})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "decided_at") {
			t.Errorf("codec %d: a pending approval carries decided_at: %q", codec, data)
		}
	}
}
