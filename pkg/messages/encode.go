package messages

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// MessagePack encoders written out for the messages of the call path,
// which are encoded several times per call: reflection-driven encoding
// allocates for every struct with optional fields. Each writes the same
// map that reflection would from the json tags (encode_test.go checks
// that), so decoding needs nothing special.

// mapWriter writes a map whose length is counted beforehand.
type mapWriter struct {
	enc *msgpack.Encoder
	err error
}

func (w *mapWriter) header(n int) {
	if w.err == nil {
		w.err = w.enc.EncodeMapLen(n)
	}
}

func (w *mapWriter) key(k string) {
	if w.err == nil {
		w.err = w.enc.EncodeString(k)
	}
}

func (w *mapWriter) str(k, v string) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeString(v)
	}
}

func (w *mapWriter) int(k string, v int64) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeInt(v)
	}
}

func (w *mapWriter) bool(k string, v bool) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeBool(v)
	}
}

func (w *mapWriter) time(k string, v time.Time) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.EncodeTime(v)
	}
}

func (w *mapWriter) value(k string, v any) {
	w.key(k)
	if w.err == nil {
		w.err = w.enc.Encode(v)
	}
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
func (r SubmitRequest) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := mapWriter{enc: enc}
	w.header(1 + count(len(r.Arguments) > 0, r.Agent != "", r.Turn != "", r.IdempotencyKey != "", r.TimeoutMS != 0, r.Wait, r.WaitMS != 0, r.Notify != "", r.Route != "", r.CallID != "", r.Quiet))
	w.str("tool", r.Tool)
	if len(r.Arguments) > 0 {
		w.value("arguments", r.Arguments)
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
	return w.err
}

// EncodeMsgpack writes the request as reflection would, faster.
func (r CallRequest) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := mapWriter{enc: enc}
	w.header(6 + count(len(r.Arguments) > 0, r.Agent != "", r.Turn != "", r.ArgumentsDigest != "", r.MaxAttempts != 0, r.Notify != ""))
	w.str("call_id", r.CallID)
	w.str("tool", r.Tool)
	w.str("namespace", r.Namespace)
	w.str("method", r.Method)
	if len(r.Arguments) > 0 {
		w.value("arguments", r.Arguments)
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
	return w.err
}

// EncodeMsgpack writes the event as reflection would, faster.
func (e CallEvent) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := mapWriter{enc: enc}
	w.header(3 + count(e.Attempt != 0, e.Worker != "", e.Request != nil, e.Progress != nil, e.Log != nil, e.Cancel != nil, e.Approval != nil, e.Result != nil))
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
		w.value("request", *e.Request)
	}
	if e.Progress != nil {
		w.value("progress", *e.Progress)
	}
	if e.Log != nil {
		w.value("log", *e.Log)
	}
	if e.Cancel != nil {
		w.value("cancel", *e.Cancel)
	}
	if e.Approval != nil {
		w.value("approval", e.Approval)
	}
	if e.Result != nil {
		w.value("result", *e.Result)
	}
	return w.err
}

// EncodeMsgpack writes the result as reflection would, faster.
func (r CallResult) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := mapWriter{enc: enc}
	w.header(7 + count(len(r.Content) > 0, len(r.StructuredContent) > 0, r.Error != nil, r.Worker != "", !r.StartedAt.IsZero(), r.Truncated, r.FullResult != nil))
	w.str("call_id", r.CallID)
	w.str("tool", r.Tool)
	w.str("status", string(r.Status))
	w.bool("is_error", r.IsError)
	if len(r.Content) > 0 {
		w.key("content")
		if w.err == nil {
			w.err = enc.EncodeArrayLen(len(r.Content))
		}
		for _, b := range r.Content {
			if w.err == nil {
				w.err = b.EncodeMsgpack(enc)
			}
		}
	}
	if len(r.StructuredContent) > 0 {
		w.value("structured_content", r.StructuredContent)
	}
	if r.Error != nil {
		w.key("error")
		if w.err == nil {
			w2 := mapWriter{enc: enc}
			w2.header(2)
			w2.str("code", r.Error.Code)
			w2.str("message", r.Error.Message)
			w.err = w2.err
		}
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
		w.value("full_result", *r.FullResult)
	}
	return w.err
}

// EncodeMsgpack writes the block as reflection would, faster.
func (b ContentBlock) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := mapWriter{enc: enc}
	w.header(1 + count(b.Text != "", len(b.JSON) > 0, len(b.Data) > 0, b.MIMEType != "", b.URI != "", b.Name != "", b.Description != ""))
	w.str("type", b.Type)
	if b.Text != "" {
		w.str("text", b.Text)
	}
	if len(b.JSON) > 0 {
		w.value("json", b.JSON)
	}
	if len(b.Data) > 0 {
		w.key("data")
		if w.err == nil {
			w.err = enc.EncodeBytes(b.Data)
		}
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
	return w.err
}

// EncodeMsgpack writes the progress as reflection would, faster.
func (p Progress) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := mapWriter{enc: enc}
	w.header(1 + count(p.Total != 0, p.Message != ""))
	w.key("progress")
	if w.err == nil {
		w.err = enc.EncodeFloat64(p.Progress)
	}
	if p.Total != 0 {
		w.key("total")
		if w.err == nil {
			w.err = enc.EncodeFloat64(p.Total)
		}
	}
	if p.Message != "" {
		w.str("message", p.Message)
	}
	return w.err
}

// EncodeMsgpack writes the reply as reflection would, faster.
func (r SubmitReply) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := mapWriter{enc: enc}
	w.header(2 + count(r.Duplicate, r.Result != nil, r.Approval != nil))
	w.str("call_id", r.CallID)
	w.str("state", string(r.State))
	if r.Duplicate {
		w.bool("duplicate", true)
	}
	if r.Result != nil {
		w.value("result", *r.Result)
	}
	if r.Approval != nil {
		w.value("approval", r.Approval)
	}
	return w.err
}
