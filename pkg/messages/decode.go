package messages

import (
	"fmt"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"math"
	"time"
)

// MessagePack decoders written out for the messages read on every call,
// for the same reason as the encoders in encode.go. Unknown keys are
// skipped, as reflection does; decode_test.go checks that they read what
// reflection reads.

// readMap calls field for every key of a map; a nil map leaves v as it is.
func readMap(dec *msgpack.Decoder, field func(key string) error) error {
	code, err := dec.PeekCode()
	if err != nil {
		return err
	}
	if code == msgpcode.Nil {
		return dec.DecodeNil()
	}
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	for range n {
		key, err := dec.DecodeString()
		if err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
	}
	return nil
}

// isNil consumes a nil value and reports whether there was one, so that a
// nil pointer field stays nil.
func isNil(dec *msgpack.Decoder) (bool, error) {
	code, err := dec.PeekCode()
	if err != nil || code != msgpcode.Nil {
		return false, err
	}
	return true, dec.DecodeNil()
}

// decodeTime reads a timestamp that JSON can also hold (years 0 to 9999).
func decodeTime(dec *msgpack.Decoder, v *time.Time) error {
	t, err := dec.DecodeTime()
	if err != nil {
		return err
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("time %v is out of range", t)
	}
	*v = t
	return nil
}

func decodeInt(dec *msgpack.Decoder, v *int) error {
	n, err := dec.DecodeInt()
	*v = n
	return err
}

// DecodeMsgpack reads a submit request.
func (r *SubmitRequest) DecodeMsgpack(dec *msgpack.Decoder) error {
	return readMap(dec, func(key string) (err error) {
		switch key {
		case "tool":
			r.Tool, err = dec.DecodeString()
		case "arguments":
			err = r.Arguments.DecodeMsgpack(dec)
		case "agent":
			r.Agent, err = dec.DecodeString()
		case "turn":
			r.Turn, err = dec.DecodeString()
		case "idempotency_key":
			r.IdempotencyKey, err = dec.DecodeString()
		case "timeout_ms":
			r.TimeoutMS, err = dec.DecodeInt64()
		case "wait":
			r.Wait, err = dec.DecodeBool()
		case "wait_ms":
			r.WaitMS, err = dec.DecodeInt64()
		case "notify":
			r.Notify, err = dec.DecodeString()
		default:
			err = dec.Skip()
		}
		return err
	})
}

// DecodeMsgpack reads a call request.
func (r *CallRequest) DecodeMsgpack(dec *msgpack.Decoder) error {
	return readMap(dec, func(key string) (err error) {
		switch key {
		case "call_id":
			r.CallID, err = dec.DecodeString()
		case "tool":
			r.Tool, err = dec.DecodeString()
		case "namespace":
			r.Namespace, err = dec.DecodeString()
		case "method":
			r.Method, err = dec.DecodeString()
		case "arguments":
			err = r.Arguments.DecodeMsgpack(dec)
		case "agent":
			r.Agent, err = dec.DecodeString()
		case "turn":
			r.Turn, err = dec.DecodeString()
		case "arguments_digest":
			r.ArgumentsDigest, err = dec.DecodeString()
		case "queued_at":
			err = decodeTime(dec, &r.QueuedAt)
		case "deadline":
			err = decodeTime(dec, &r.Deadline)
		case "max_attempts":
			err = decodeInt(dec, &r.MaxAttempts)
		case "notify":
			r.Notify, err = dec.DecodeString()
		default:
			err = dec.Skip()
		}
		return err
	})
}

// DecodeMsgpack reads an event.
func (e *CallEvent) DecodeMsgpack(dec *msgpack.Decoder) error {
	return readMap(dec, func(key string) (err error) {
		switch key {
		case "call_id":
			e.CallID, err = dec.DecodeString()
		case "kind":
			var k string
			k, err = dec.DecodeString()
			e.Kind = EventKind(k)
		case "time":
			err = decodeTime(dec, &e.Time)
		case "attempt":
			err = decodeInt(dec, &e.Attempt)
		case "worker":
			e.Worker, err = dec.DecodeString()
		case "request":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			e.Request = new(CallRequest)
			err = e.Request.DecodeMsgpack(dec)
		case "progress":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			e.Progress = new(Progress)
			err = dec.Decode(e.Progress)
		case "log":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			e.Log = new(LogEntry)
			err = dec.Decode(e.Log)
		case "cancel":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			e.Cancel = new(CancelInfo)
			err = dec.Decode(e.Cancel)
		case "approval":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			e.Approval = new(Approval)
			if err = dec.Decode(e.Approval); err == nil {
				for _, t := range []time.Time{e.Approval.CreatedAt, e.Approval.ExpiresAt, e.Approval.DecidedAt} {
					if y := t.Year(); y < 0 || y > 9999 {
						return fmt.Errorf("time %v is out of range", t)
					}
				}
			}
		case "result":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			e.Result = new(CallResult)
			err = e.Result.DecodeMsgpack(dec)
		default:
			err = dec.Skip()
		}
		return err
	})
}

// DecodeMsgpack reads a result.
func (r *CallResult) DecodeMsgpack(dec *msgpack.Decoder) error {
	return readMap(dec, func(key string) (err error) {
		switch key {
		case "call_id":
			r.CallID, err = dec.DecodeString()
		case "tool":
			r.Tool, err = dec.DecodeString()
		case "status":
			var s string
			s, err = dec.DecodeString()
			r.Status = CallState(s)
		case "is_error":
			r.IsError, err = dec.DecodeBool()
		case "content":
			var n int
			if n, err = dec.DecodeArrayLen(); err != nil || n < 0 {
				return err
			}
			if n > 1<<16 {
				return fmt.Errorf("%d content blocks", n)
			}
			r.Content = make([]ContentBlock, n)
			for i := range r.Content {
				if err = r.Content[i].DecodeMsgpack(dec); err != nil {
					return err
				}
			}
		case "structured_content":
			err = r.StructuredContent.DecodeMsgpack(dec)
		case "error":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			r.Error = new(ResultError)
			err = dec.Decode(r.Error)
		case "attempt":
			err = decodeInt(dec, &r.Attempt)
		case "worker":
			r.Worker, err = dec.DecodeString()
		case "queued_at":
			err = decodeTime(dec, &r.QueuedAt)
		case "started_at":
			err = decodeTime(dec, &r.StartedAt)
		case "finished_at":
			err = decodeTime(dec, &r.FinishedAt)
		case "truncated":
			r.Truncated, err = dec.DecodeBool()
		case "full_result":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			r.FullResult = new(ObjectRef)
			err = dec.Decode(r.FullResult)
		default:
			err = dec.Skip()
		}
		return err
	})
}

// DecodeMsgpack reads a content block.
func (b *ContentBlock) DecodeMsgpack(dec *msgpack.Decoder) error {
	return readMap(dec, func(key string) (err error) {
		switch key {
		case "type":
			b.Type, err = dec.DecodeString()
		case "text":
			b.Text, err = dec.DecodeString()
		case "json":
			err = b.JSON.DecodeMsgpack(dec)
		case "data":
			b.Data, err = dec.DecodeBytes()
		case "mime_type":
			b.MIMEType, err = dec.DecodeString()
		case "uri":
			b.URI, err = dec.DecodeString()
		case "name":
			b.Name, err = dec.DecodeString()
		case "description":
			b.Description, err = dec.DecodeString()
		default:
			err = dec.Skip()
		}
		return err
	})
}

// DecodeMsgpack reads a submit reply.
func (r *SubmitReply) DecodeMsgpack(dec *msgpack.Decoder) error {
	return readMap(dec, func(key string) (err error) {
		switch key {
		case "call_id":
			r.CallID, err = dec.DecodeString()
		case "state":
			var s string
			s, err = dec.DecodeString()
			r.State = CallState(s)
		case "duplicate":
			r.Duplicate, err = dec.DecodeBool()
		case "result":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			r.Result = new(CallResult)
			err = r.Result.DecodeMsgpack(dec)
		case "approval":
			if null, nerr := isNil(dec); null || nerr != nil {
				return nerr
			}
			r.Approval = new(Approval)
			err = dec.Decode(r.Approval)
		default:
			err = dec.Skip()
		}
		return err
	})
}

// DecodeMsgpack reads progress; numbers that JSON cannot hold are refused.
func (p *Progress) DecodeMsgpack(dec *msgpack.Decoder) error {
	return readMap(dec, func(key string) (err error) {
		switch key {
		case "progress":
			p.Progress, err = dec.DecodeFloat64()
		case "total":
			p.Total, err = dec.DecodeFloat64()
		case "message":
			p.Message, err = dec.DecodeString()
		default:
			return dec.Skip()
		}
		if err == nil && (math.IsNaN(p.Progress) || math.IsInf(p.Progress, 0) || math.IsNaN(p.Total) || math.IsInf(p.Total, 0)) {
			err = fmt.Errorf("progress %v of %v is not a finite number", p.Progress, p.Total)
		}
		return err
	})
}
