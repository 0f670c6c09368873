package messages

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// MessagePack encoders written out for the messages of the call path,
// which are encoded several times per call: reflection-driven encoding
// allocates for every struct with optional fields. Each writes the same
// map that reflection would from the json tags (encode_test.go checks
// that), so decoding needs nothing special.

// packer appends MessagePack to a byte slice, as msgpack.Encoder (with
// compact integers) would write it, without its per-value overhead.
type packer struct {
	b   []byte
	err error
}

// msgpackAppender is a message with a written-out encoder.
type msgpackAppender interface {
	appendMsgpack(w *packer)
}

// encodeVia writes v's written-out encoding to enc, for when v is nested
// in a value that the msgpack library encodes.
func encodeVia(enc *msgpack.Encoder, v msgpackAppender) error {
	w := packer{}
	v.appendMsgpack(&w)
	if w.err != nil {
		return w.err
	}
	_, err := enc.Writer().Write(w.b)
	return err
}

var packers = sync.Pool{New: func() any { return &packer{b: make([]byte, 0, 1024)} }}

// appendMarshal encodes v with a pooled packer and returns a copy the size of the encoding.
func appendMarshal(v msgpackAppender) ([]byte, error) {
	w := packers.Get().(*packer)
	w.b, w.err = w.b[:0], nil
	v.appendMsgpack(w)
	out, err := bytes.Clone(w.b), w.err
	if err != nil {
		out = nil
	}
	if cap(w.b) <= maxPooledBuffer {
		packers.Put(w)
	}
	return out, err
}

func (w *packer) header(n int) { w.b = appendLen(w.b, n, 0x80, 15, msgpcode.Map16, msgpcode.Map32) }

func (w *packer) arrayLen(n int) {
	w.b = appendLen(w.b, n, 0x90, 15, msgpcode.Array16, msgpcode.Array32)
}

// appendLen writes a map or array length: in the fixed code when it fits,
// else in 2 or 4 bytes after code16 or code32.
func appendLen(b []byte, n int, fixed byte, maxFixed int, code16, code32 byte) []byte {
	switch {
	case n <= maxFixed:
		return append(b, fixed|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, code16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, code32), uint32(n))
	}
}

func (w *packer) putStr(s string) {
	switch n := len(s); {
	case n < 32:
		w.b = append(w.b, msgpcode.FixedStrLow|byte(n))
	case n < 256:
		w.b = append(w.b, msgpcode.Str8, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, msgpcode.Str16), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.Str32), uint32(n))
	}
	w.b = append(w.b, s...)
}

func (w *packer) putInt(n int64) {
	switch {
	case n >= 0 && n <= math.MaxInt8:
		w.b = append(w.b, byte(n))
	case n >= 0 && n <= math.MaxUint8:
		w.b = append(w.b, msgpcode.Uint8, byte(n))
	case n >= 0 && n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, msgpcode.Uint16), uint16(n))
	case n >= 0 && n <= math.MaxUint32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.Uint32), uint32(n))
	case n >= 0:
		w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.Uint64), uint64(n))
	case n >= -32:
		w.b = append(w.b, byte(n))
	case n >= math.MinInt8:
		w.b = append(w.b, msgpcode.Int8, byte(n))
	case n >= math.MinInt16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, msgpcode.Int16), uint16(n))
	case n >= math.MinInt32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.Int32), uint32(n))
	default:
		w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.Int64), uint64(n))
	}
}

func (w *packer) putBool(v bool) {
	if v {
		w.b = append(w.b, msgpcode.True)
	} else {
		w.b = append(w.b, msgpcode.False)
	}
}

func (w *packer) putFloat(f float64) {
	w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.Double), math.Float64bits(f))
}

// putTime writes the timestamp extension (-1) in its 4, 8 or 12 byte form.
func (w *packer) putTime(t time.Time) {
	secs := uint64(t.Unix())
	if secs>>34 == 0 {
		data := uint64(t.Nanosecond())<<34 | secs
		if data&0xffffffff00000000 == 0 {
			w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.FixExt4, 0xff), uint32(data))
			return
		}
		w.b = binary.BigEndian.AppendUint64(append(w.b, msgpcode.FixExt8, 0xff), data)
		return
	}
	w.b = append(w.b, msgpcode.Ext8, 12, 0xff)
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(t.Nanosecond()))
	w.b = binary.BigEndian.AppendUint64(w.b, secs)
}

func (w *packer) putBin(v []byte) {
	switch n := len(v); {
	case n < 256:
		w.b = append(w.b, msgpcode.Bin8, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, msgpcode.Bin16), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, msgpcode.Bin32), uint32(n))
	}
	w.b = append(w.b, v...)
}

func (w *packer) putJSON(j JSON) {
	if w.err != nil {
		return
	}
	if len(j) == 0 {
		w.b = append(w.b, msgpcode.Nil)
		return
	}
	b, err := appendJSONAsMsgpack(w.b, j)
	if err != nil {
		w.err = fmt.Errorf("encode JSON value as MessagePack: %w", err)
		return
	}
	w.b = b
}

// putReflect writes a value that has no written-out encoder, with the
// msgpack library: messages off the hot path.
func (w *packer) putReflect(v any) {
	if w.err != nil {
		return
	}
	data, err := encodeReflect(v)
	if err != nil {
		w.err = err
		return
	}
	w.b = append(w.b, data...)
}

func (w *packer) key(k string)               { w.putStr(k) }
func (w *packer) str(k, v string)            { w.putStr(k); w.putStr(v) }
func (w *packer) int(k string, v int64)      { w.putStr(k); w.putInt(v) }
func (w *packer) bool(k string, v bool)      { w.putStr(k); w.putBool(v) }
func (w *packer) time(k string, v time.Time) { w.putStr(k); w.putTime(v) }
func (w *packer) json(k string, v JSON)      { w.putStr(k); w.putJSON(v) }
func (w *packer) value(k string, v msgpackAppender) {
	w.putStr(k)
	v.appendMsgpack(w)
}

func count(present ...bool) int {
	n := 0
	for _, p := range present {
		if p {
			n++
		}
	}
	return n
}

// EncodeMsgpack writes the submit as reflection would, faster.
func (r SubmitRequest) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeVia(enc, r) }

func (r SubmitRequest) appendMsgpack(w *packer) {
	w.header(1 + count(len(r.Arguments) > 0, r.Agent != "", r.Turn != "", r.IdempotencyKey != "", r.TimeoutMS != 0, r.Wait, r.WaitMS != 0, r.Notify != "", r.Route != "", r.CallID != "", r.Quiet))
	w.str("tool", r.Tool)
	if len(r.Arguments) > 0 {
		w.json("arguments", r.Arguments)
	}
	if r.Agent != "" {
		w.str("agent", r.Agent)
	}
	if r.Turn != "" {
		w.str("turn", r.Turn)
	}
	if r.IdempotencyKey != "" {
		w.str("idempotency_key", r.IdempotencyKey)
	}
	if r.TimeoutMS != 0 {
		w.int("timeout_ms", r.TimeoutMS)
	}
	if r.Wait {
		w.bool("wait", r.Wait)
	}
	if r.WaitMS != 0 {
		w.int("wait_ms", r.WaitMS)
	}
	if r.Notify != "" {
		w.str("notify", r.Notify)
	}
	if r.Route != "" {
		w.str("route", r.Route)
	}
	if r.CallID != "" {
		w.str("call_id", r.CallID)
	}
	if r.Quiet {
		w.bool("quiet", r.Quiet)
	}
}

// EncodeMsgpack writes the request as reflection would, faster.
func (r CallRequest) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeVia(enc, r) }

func (r CallRequest) appendMsgpack(w *packer) {
	w.header(6 + count(len(r.Arguments) > 0, r.Agent != "", r.Turn != "", r.ArgumentsDigest != "", r.MaxAttempts != 0, r.Notify != ""))
	w.str("call_id", r.CallID)
	w.str("tool", r.Tool)
	w.str("namespace", r.Namespace)
	w.str("method", r.Method)
	if len(r.Arguments) > 0 {
		w.json("arguments", r.Arguments)
	}
	if r.Agent != "" {
		w.str("agent", r.Agent)
	}
	if r.Turn != "" {
		w.str("turn", r.Turn)
	}
	if r.ArgumentsDigest != "" {
		w.str("arguments_digest", r.ArgumentsDigest)
	}
	w.time("queued_at", r.QueuedAt)
	w.time("deadline", r.Deadline)
	if r.MaxAttempts != 0 {
		w.int("max_attempts", int64(r.MaxAttempts))
	}
	if r.Notify != "" {
		w.str("notify", r.Notify)
	}
}

// EncodeMsgpack writes the event as reflection would, faster.
func (e CallEvent) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeVia(enc, e) }

func (e CallEvent) appendMsgpack(w *packer) {
	w.header(3 + count(e.Attempt != 0, e.Worker != "", e.Request != nil, e.Progress != nil, e.Log != nil, e.Cancel != nil, e.Approval != nil, e.Result != nil, e.Audit != nil))
	w.str("call_id", e.CallID)
	w.str("kind", string(e.Kind))
	w.time("time", e.Time)
	if e.Attempt != 0 {
		w.int("attempt", int64(e.Attempt))
	}
	if e.Worker != "" {
		w.str("worker", e.Worker)
	}
	if e.Request != nil {
		w.value("request", e.Request)
	}
	if e.Progress != nil {
		w.value("progress", e.Progress)
	}
	if e.Log != nil {
		w.key("log")
		w.putReflect(*e.Log)
	}
	if e.Cancel != nil {
		w.key("cancel")
		w.putReflect(*e.Cancel)
	}
	if e.Approval != nil {
		w.key("approval")
		w.putReflect(e.Approval)
	}
	if e.Result != nil {
		w.value("result", e.Result)
	}
	if e.Audit != nil {
		w.key("audit")
		w.putReflect(e.Audit)
	}
}

// EncodeMsgpack writes the result as reflection would, faster.
func (r CallResult) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeVia(enc, &r) }

func (r *CallResult) appendMsgpack(w *packer) {
	w.header(7 + count(len(r.Content) > 0, len(r.StructuredContent) > 0, r.Error != nil, r.Worker != "", !r.StartedAt.IsZero(), r.Truncated, r.FullResult != nil))
	w.str("call_id", r.CallID)
	w.str("tool", r.Tool)
	w.str("status", string(r.Status))
	w.bool("is_error", r.IsError)
	if len(r.Content) > 0 {
		w.key("content")
		w.arrayLen(len(r.Content))
		for i := range r.Content {
			r.Content[i].appendMsgpack(w)
		}
	}
	if len(r.StructuredContent) > 0 {
		w.json("structured_content", r.StructuredContent)
	}
	if r.Error != nil {
		w.key("error")
		w.header(2)
		w.str("code", r.Error.Code)
		w.str("message", r.Error.Message)
	}
	w.int("attempt", int64(r.Attempt))
	if r.Worker != "" {
		w.str("worker", r.Worker)
	}
	w.time("queued_at", r.QueuedAt)
	if !r.StartedAt.IsZero() {
		w.time("started_at", r.StartedAt)
	}
	w.time("finished_at", r.FinishedAt)
	if r.Truncated {
		w.bool("truncated", true)
	}
	if r.FullResult != nil {
		w.key("full_result")
		w.putReflect(*r.FullResult)
	}
}

// EncodeMsgpack writes the block as reflection would, faster.
func (b ContentBlock) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeVia(enc, &b) }

func (b *ContentBlock) appendMsgpack(w *packer) {
	w.header(1 + count(b.Text != "", len(b.JSON) > 0, len(b.Data) > 0, b.MIMEType != "", b.URI != "", b.Name != "", b.Description != "", b.Annotations != nil))
	w.str("type", b.Type)
	if b.Text != "" {
		w.str("text", b.Text)
	}
	if len(b.JSON) > 0 {
		w.json("json", b.JSON)
	}
	if len(b.Data) > 0 {
		w.key("data")
		w.putBin(b.Data)
	}
	if b.MIMEType != "" {
		w.str("mime_type", b.MIMEType)
	}
	if b.URI != "" {
		w.str("uri", b.URI)
	}
	if b.Name != "" {
		w.str("name", b.Name)
	}
	if b.Description != "" {
		w.str("description", b.Description)
	}
	if b.Annotations != nil {
		w.key("annotations")
		w.putReflect(b.Annotations)
	}
}

// EncodeMsgpack writes the progress as reflection would, faster.
func (p Progress) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeVia(enc, p) }

func (p Progress) appendMsgpack(w *packer) {
	w.header(1 + count(p.Total != 0, p.Message != ""))
	w.key("progress")
	w.putFloat(p.Progress)
	if p.Total != 0 {
		w.key("total")
		w.putFloat(p.Total)
	}
	if p.Message != "" {
		w.str("message", p.Message)
	}
}

// EncodeMsgpack writes the reply as reflection would, faster.
func (r SubmitReply) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeVia(enc, r) }

func (r SubmitReply) appendMsgpack(w *packer) {
	w.header(2 + count(r.Duplicate, r.Result != nil, r.Approval != nil))
	w.str("call_id", r.CallID)
	w.str("state", string(r.State))
	if r.Duplicate {
		w.bool("duplicate", true)
	}
	if r.Result != nil {
		w.value("result", r.Result)
	}
	if r.Approval != nil {
		w.key("approval")
		w.putReflect(r.Approval)
	}
}
