package messages

import (
	"fmt"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// MessagePack decoders written out for the messages read on every call,
// for the same reason as the encoders in encode.go. Each type has one
// decoder, decodeFast, on a reader (reader.go): Codec.Unmarshal calls it
// directly, and the type's DecodeMsgpack, which msgpack.Unmarshal and
// reflection-decoded messages holding the type use, hands it the raw
// value. Unknown keys are skipped, as reflection does; decode_test.go
// checks that they read what reflection reads.

// decodeVia reads the value dec holds next with v's fast decoder.
func decodeVia(dec *msgpack.Decoder, v fastDecoder) error {
	code, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if msgpcode.IsExt(code) {
		// The map behind an extension header, as reader.mapHeader reads
		// it; DecodeRaw would take the extension's data instead.
		if _, _, err := dec.DecodeExtHeader(); err != nil {
			return err
		}
		if code, err = dec.PeekCode(); err != nil {
			return err
		}
		if msgpcode.IsExt(code) {
			return invalidCode(code, "map length")
		}
	}
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	_, err = v.decodeBytes(raw)
	return err
}

// decodeReflect decodes the next value into v by reflection, by the json
// tags as Codec.Unmarshal reads. It is for the rarer parts of the messages
// above: log entries, cancellations, approvals, errors, object references.
func (d *reader) decodeReflect(v any) error {
	raw, err := d.raw()
	if err != nil {
		return err
	}
	_, err = decodeReflect(raw, v)
	return err
}

// Strings with a known set of values are not copied.
var (
	eventKinds   = []string{string(EventQueued), string(EventStarted), string(EventProgress), string(EventLog), string(EventCancel), string(EventApproval), string(EventResult)}
	callStates   = []string{string(StateQueued), string(StateAwaitingApproval), string(StateRunning), string(StateCompleted), string(StateFailed), string(StateCancelled), string(StateTimedOut), string(StateDenied)}
	contentTypes = []string{ContentText, ContentJSON, ContentImage, ContentAudio, ContentResource, ContentResourceLink}
)

// DecodeMsgpack reads a submit request.
func (r *SubmitRequest) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, r) }

func (r *SubmitRequest) decodeBytes(data []byte) (int, error) {
	d := reader{b: data}
	err := r.decodeFast(&d)
	return d.i, err
}

func (r *SubmitRequest) decodeFast(d *reader) error {
	n, err := d.mapHeader()
	d.depth++
	defer func() { d.depth-- }()
	for i := 0; i < n && err == nil; i++ {
		var key []byte
		if key, err = d.key(); err != nil {
			break
		}
		switch string(key) {
		case "tool":
			r.Tool, err = d.str()
		case "arguments":
			err = r.Arguments.decodeFast(d)
		case "agent":
			r.Agent, err = d.str()
		case "turn":
			r.Turn, err = d.str()
		case "idempotency_key":
			r.IdempotencyKey, err = d.str()
		case "timeout_ms":
			r.TimeoutMS, err = d.int()
		case "wait":
			r.Wait, err = d.bool()
		case "wait_ms":
			r.WaitMS, err = d.int()
		case "notify":
			r.Notify, err = d.str()
		case "route":
			r.Route, err = d.str()
		case "call_id":
			r.CallID, err = d.str()
		case "quiet":
			r.Quiet, err = d.bool()
		default:
			err = d.skipUnknown()
		}
	}
	return err
}

// DecodeMsgpack reads a call request.
func (r *CallRequest) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, r) }

func (r *CallRequest) decodeBytes(data []byte) (int, error) {
	d := reader{b: data}
	err := r.decodeFast(&d)
	return d.i, err
}

func (r *CallRequest) decodeFast(d *reader) error {
	n, err := d.mapHeader()
	d.depth++
	defer func() { d.depth-- }()
	for i := 0; i < n && err == nil; i++ {
		var key []byte
		if key, err = d.key(); err != nil {
			break
		}
		switch string(key) {
		case "call_id":
			r.CallID, err = d.str()
		case "tool":
			r.Tool, err = d.str()
		case "namespace":
			r.Namespace, err = d.str()
		case "method":
			r.Method, err = d.str()
		case "arguments":
			err = r.Arguments.decodeFast(d)
		case "agent":
			r.Agent, err = d.str()
		case "turn":
			r.Turn, err = d.str()
		case "arguments_digest":
			r.ArgumentsDigest, err = d.str()
		case "queued_at":
			err = d.timeInRange(&r.QueuedAt)
		case "deadline":
			err = d.timeInRange(&r.Deadline)
		case "max_attempts":
			var v int64
			v, err = d.int()
			r.MaxAttempts = int(v)
		case "notify":
			r.Notify, err = d.str()
		default:
			err = d.skipUnknown()
		}
	}
	return err
}

// DecodeMsgpack reads an event.
func (e *CallEvent) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, e) }

func (e *CallEvent) decodeBytes(data []byte) (int, error) {
	d := reader{b: data}
	err := e.decodeFast(&d)
	return d.i, err
}

func (e *CallEvent) decodeFast(d *reader) error {
	n, err := d.mapHeader()
	d.depth++
	defer func() { d.depth-- }()
	for i := 0; i < n && err == nil; i++ {
		var key []byte
		if key, err = d.key(); err != nil {
			break
		}
		switch string(key) {
		case "call_id":
			e.CallID, err = d.str()
		case "kind":
			var k string
			k, err = d.strOf(eventKinds)
			e.Kind = EventKind(k)
		case "time":
			err = d.timeInRange(&e.Time)
		case "attempt":
			var v int64
			v, err = d.int()
			e.Attempt = int(v)
		case "worker":
			e.Worker, err = d.str()
		case "request":
			if !d.nilNext() {
				e.Request = new(CallRequest)
				err = e.Request.decodeFast(d)
			}
		case "progress":
			if !d.nilNext() {
				e.Progress = new(Progress)
				err = e.Progress.decodeFast(d)
			}
		case "log":
			if !d.nilNext() {
				e.Log = new(LogEntry)
				err = d.decodeReflect(e.Log)
			}
		case "cancel":
			if !d.nilNext() {
				e.Cancel = new(CancelInfo)
				err = d.decodeReflect(e.Cancel)
			}
		case "approval":
			if !d.nilNext() {
				a := new(Approval)
				e.Approval = a
				if err = d.decodeReflect(a); err == nil {
					for _, t := range [...]time.Time{a.CreatedAt, a.ExpiresAt, a.DecidedAt} {
						if err = checkYear(t); err != nil {
							break
						}
					}
				}
			}
		case "result":
			if !d.nilNext() {
				e.Result = new(CallResult)
				err = e.Result.decodeFast(d)
			}
		case "audit":
			if !d.nilNext() {
				e.Audit = new(QueuedAudit)
				err = d.decodeReflect(e.Audit)
			}
		default:
			err = d.skipUnknown()
		}
	}
	return err
}

// DecodeMsgpack reads a result.
func (r *CallResult) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, r) }

func (r *CallResult) decodeBytes(data []byte) (int, error) {
	d := reader{b: data}
	err := r.decodeFast(&d)
	return d.i, err
}

func (r *CallResult) decodeFast(d *reader) error {
	n, err := d.mapHeader()
	d.depth++
	defer func() { d.depth-- }()
	for i := 0; i < n && err == nil; i++ {
		var key []byte
		if key, err = d.key(); err != nil {
			break
		}
		switch string(key) {
		case "call_id":
			r.CallID, err = d.str()
		case "tool":
			r.Tool, err = d.str()
		case "status":
			var s string
			s, err = d.strOf(callStates)
			r.Status = CallState(s)
		case "is_error":
			r.IsError, err = d.bool()
		case "content":
			err = r.decodeContent(d)
		case "structured_content":
			err = r.StructuredContent.decodeFast(d)
		case "error":
			if !d.nilNext() {
				r.Error = new(ResultError)
				err = d.decodeReflect(r.Error)
			}
		case "attempt":
			var v int64
			v, err = d.int()
			r.Attempt = int(v)
		case "worker":
			r.Worker, err = d.str()
		case "queued_at":
			err = d.timeInRange(&r.QueuedAt)
		case "started_at":
			err = d.timeInRange(&r.StartedAt)
		case "finished_at":
			err = d.timeInRange(&r.FinishedAt)
		case "truncated":
			r.Truncated, err = d.bool()
		case "full_result":
			if !d.nilNext() {
				r.FullResult = new(ObjectRef)
				err = d.decodeReflect(r.FullResult)
			}
		default:
			err = d.skipUnknown()
		}
	}
	return err
}

// decodeContent reads the content blocks; nil leaves them as they are.
func (r *CallResult) decodeContent(d *reader) error {
	n, err := d.arrayHeader()
	if err != nil || n < 0 {
		return err
	}
	if n > 1<<16 {
		return fmt.Errorf("%d content blocks", n)
	}
	if n > len(d.b)-d.i {
		return errTruncated // a block takes a byte at least
	}
	r.Content = make([]ContentBlock, n)
	for i := range r.Content {
		if err := r.Content[i].decodeFast(d); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads a content block.
func (b *ContentBlock) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, b) }

func (b *ContentBlock) decodeBytes(data []byte) (int, error) {
	d := reader{b: data}
	err := b.decodeFast(&d)
	return d.i, err
}

func (b *ContentBlock) decodeFast(d *reader) error {
	n, err := d.mapHeader()
	d.depth++
	defer func() { d.depth-- }()
	for i := 0; i < n && err == nil; i++ {
		var key []byte
		if key, err = d.key(); err != nil {
			break
		}
		switch string(key) {
		case "type":
			b.Type, err = d.strOf(contentTypes)
		case "text":
			b.Text, err = d.str()
		case "json":
			err = b.JSON.decodeFast(d)
		case "data":
			b.Data, err = d.bytes()
		case "mime_type":
			b.MIMEType, err = d.str()
		case "uri":
			b.URI, err = d.str()
		case "name":
			b.Name, err = d.str()
		case "description":
			b.Description, err = d.str()
		case "annotations":
			b.Annotations = new(ContentAnnotations)
			err = d.decodeReflect(b.Annotations)
		default:
			err = d.skipUnknown()
		}
	}
	return err
}

// DecodeMsgpack reads a submit reply.
func (r *SubmitReply) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, r) }

func (r *SubmitReply) decodeBytes(data []byte) (int, error) {
	d := reader{b: data}
	err := r.decodeFast(&d)
	return d.i, err
}

func (r *SubmitReply) decodeFast(d *reader) error {
	n, err := d.mapHeader()
	d.depth++
	defer func() { d.depth-- }()
	for i := 0; i < n && err == nil; i++ {
		var key []byte
		if key, err = d.key(); err != nil {
			break
		}
		switch string(key) {
		case "call_id":
			r.CallID, err = d.str()
		case "state":
			var s string
			s, err = d.strOf(callStates)
			r.State = CallState(s)
		case "duplicate":
			r.Duplicate, err = d.bool()
		case "result":
			if !d.nilNext() {
				r.Result = new(CallResult)
				err = r.Result.decodeFast(d)
			}
		case "approval":
			if !d.nilNext() {
				r.Approval = new(Approval)
				err = d.decodeReflect(r.Approval)
			}
		default:
			err = d.skipUnknown()
		}
	}
	return err
}

// DecodeMsgpack reads progress; numbers that JSON cannot hold are refused.
func (p *Progress) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, p) }

func (p *Progress) decodeBytes(data []byte) (int, error) {
	d := reader{b: data}
	err := p.decodeFast(&d)
	return d.i, err
}

func (p *Progress) decodeFast(d *reader) error {
	n, err := d.mapHeader()
	d.depth++
	defer func() { d.depth-- }()
	for i := 0; i < n && err == nil; i++ {
		var key []byte
		if key, err = d.key(); err != nil {
			break
		}
		switch string(key) {
		case "progress":
			p.Progress, err = d.float()
		case "total":
			p.Total, err = d.float()
		case "message":
			p.Message, err = d.str()
		default:
			err = d.skipUnknown()
			continue
		}
		if err == nil && (math.IsNaN(p.Progress) || math.IsInf(p.Progress, 0) || math.IsNaN(p.Total) || math.IsInf(p.Total, 0)) {
			err = fmt.Errorf("progress %v of %v is not a finite number", p.Progress, p.Total)
		}
	}
	return err
}
