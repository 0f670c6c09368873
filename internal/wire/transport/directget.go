package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultReadTimeout bounds a direct get, all its attempts, when its
// context has no deadline.
const DefaultReadTimeout = 5 * time.Second

// maxMultiLast is the most messages the server answers a multi-last
// direct get with; a request matching more fails.
const maxMultiLast = 1024

// Stream reads the messages of one stream with direct gets, the reads any
// replica of a stream with AllowDirect answers without a consumer. A
// Stream is safe for concurrent use.
type Stream struct {
	nc     *nats.Conn
	inbox  *Inbox
	name   string
	api    string
	policy RetryPolicy
}

// NewStream returns a reader of the stream called name. Batched reads are
// answered on inbox; with a nil inbox, each batched read subscribes to a
// reply subject of its own, a subscription per read that suits occasional
// reads. The stream does not own the inbox. Its reads follow ReadPolicy:
// each attempt is bounded, and one that failed transiently is made again
// while the caller's context allows (see WithPolicy).
func NewStream(nc *nats.Conn, inbox *Inbox, name string) *Stream {
	return &Stream{nc: nc, inbox: inbox, name: name, api: "$JS.API.DIRECT.GET." + name, policy: ReadPolicy}
}

// WithPolicy returns a reader of the same stream whose reads are bounded
// and retried by p instead.
func (s *Stream) WithPolicy(p RetryPolicy) *Stream {
	c := *s
	c.policy = p
	return &c
}

// withDefaultDeadline bounds ctx by d if it has no deadline.
func withDefaultDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// Name returns the stream's name.
func (s *Stream) Name() string { return s.name }

// GetLast returns the last message stored on subject and its sequence in
// the stream. The subject travels in the request's API subject
// ($JS.API.DIRECT.GET.<stream>.<subject>), not in its body, so NATS
// permissions can confine a user's reads to some subjects: a worker's user
// may read only its own namespace's call events this way, where a batched
// read (GetBatch) or a read from the leader (GetLastFromLeader), whose
// subjects are in the body, would reach every call's. The message's Subject is the one
// it was stored on, its headers those stored with it plus the server's
// Nats-Stream, Nats-Subject, Nats-Sequence and Nats-Time-Stamp. It returns
// ErrNotFound if the stream has no message on subject, ErrNoResponders if
// the stream does not exist or does not allow direct gets, and a
// *StatusError for other refusals. Each attempt is bounded by the stream's
// policy (ReadPolicy: 2s), whatever ctx's deadline, and a transient failure
// (Transient: no responders, as while the stream elects a leader; no answer
// in time) is retried while ctx allows; without a deadline in ctx, the read
// ends after DefaultReadTimeout.
func (s *Stream) GetLast(ctx context.Context, subject string) (msg *nats.Msg, seq uint64, err error) {
	ctx, cancel := withDefaultDeadline(ctx, DefaultReadTimeout)
	defer cancel()
	err = Retry(ctx, s.policy, func(ctx context.Context) error {
		msg, seq, err = s.getLast(ctx, subject)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read last message on %s: %w", subject, err)
	}
	return msg, seq, nil
}

func (s *Stream) getLast(ctx context.Context, subject string) (*nats.Msg, uint64, error) {
	return s.getOne(ctx, s.api+"."+subject, nil)
}

// getOne sends one direct get that is answered with one message, and
// returns it with its sequence.
func (s *Stream) getOne(ctx context.Context, api string, body []byte) (*nats.Msg, uint64, error) {
	msg, err := s.nc.RequestWithContext(ctx, api, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			err = ErrNoResponders
		}
		return nil, 0, err
	}
	seq, _, err := stored(msg)
	if err != nil {
		return nil, 0, err
	}
	return msg, seq, nil
}

// GetNext returns the first message stored at sequence seq or later whose
// subject matches filter, and its sequence, as GetBatch would hand it; it
// returns ErrNotFound if there is none, and fails and retries as GetLast.
// A single read makes the server count no pending messages, where every
// batch counts those under its filter, a walk of each of their subjects:
// reading a bucket's few new messages one at a time costs less than one
// batch once many keys match.
func (s *Stream) GetNext(ctx context.Context, seq uint64, filter string) (msg *nats.Msg, got uint64, err error) {
	body, err := json.Marshal(BatchRequest{Seq: seq, NextBySubject: filter})
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := withDefaultDeadline(ctx, DefaultReadTimeout)
	defer cancel()
	err = Retry(ctx, s.policy, func(ctx context.Context) error {
		msg, got, err = s.getOne(ctx, s.api, body)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the next message of %s on %s from %d: %w", s.name, filter, seq, err)
	}
	return msg, got, nil
}

// BatchRequest asks for several messages in one direct get: either the
// last message of every subject matching MultiLast, or up to Batch
// messages whose subjects match NextBySubject, from sequence Seq or from
// the time StartTime on.
type BatchRequest struct {
	// MultiLast holds subject filters: the reply is the last message of
	// every subject matching any of them, at most 1,024 messages, or the
	// request fails.
	MultiLast []string `json:"multi_last,omitempty"`
	// Seq is the first sequence to look at.
	Seq uint64 `json:"seq,omitempty"`
	// StartTime, instead of Seq, starts at the first message stored at or
	// after it.
	StartTime *time.Time `json:"start_time,omitempty"`
	// NextBySubject is the filter the messages from Seq on must match.
	NextBySubject string `json:"next_by_subj,omitempty"`
	// Batch is the most messages to read from Seq on.
	Batch int `json:"batch,omitempty"`
	// MaxBytes, when set, ends the batch once the messages sent reach
	// it (the server's own bound, its max pending of 64 MiB by default,
	// otherwise): the batch may end before Batch messages.
	MaxBytes int `json:"max_bytes,omitempty"`
}

// GetBatch sends a batched direct get and hands each message of the reply
// to each, in stream order, with its sequence, until each returns false or
// the batch ends. Messages are as GetLast returns them. No message at all
// is not an error. It returns ErrNoResponders if the stream does not exist
// or does not allow direct gets, and a *StatusError for other refusals.
// Attempts are retried as GetLast's are, but only until the first message
// has been handed to each: a batch that fails after that returns the
// error. The policy's bound is on the wait for the first reply; after it,
// ctx alone bounds the batch, however long each takes. Without a deadline in ctx, the read ends after
// DefaultReadTimeout. each runs on the caller's goroutine and may block.
func (s *Stream) GetBatch(ctx context.Context, req BatchRequest, each func(seq uint64, msg *nats.Msg) bool) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return s.readBatch(ctx, req, body, nil, func(msg *nats.Msg) (bool, error) {
		seq, end, err := stored(msg)
		switch {
		case errors.Is(err, ErrNotFound):
			return false, nil
		case err != nil:
			return false, err
		case end:
			return false, nil
		}
		return each(seq, msg), nil
	})
}

// readBatch sends one batched direct get (body, the encoding of req) and
// hands each message of its reply to handle, on the caller's goroutine,
// until handle returns false or an error. Attempts are retried with the
// stream's policy until handle has accepted a message (returned true);
// begin, if not nil, runs before each attempt. The policy's bound is on
// the wait for the first reply; after it, ctx alone bounds the batch
// (DefaultReadTimeout without a deadline in ctx).
func (s *Stream) readBatch(ctx context.Context, req BatchRequest, body []byte, begin func(), handle func(msg *nats.Msg) (bool, error)) error {
	ctx, cancel := withDefaultDeadline(ctx, DefaultReadTimeout)
	defer cancel()
	delivered := false
	policy := s.policy
	retryable := policy.Retryable
	if retryable == nil {
		retryable = Transient
	}
	policy.Retryable = func(err error) bool { return !delivered && retryable(err) }
	// The attempt's bound is on the wait for the first reply: once the
	// batch flows, each message may take its time.
	firstReply := policy.Attempt
	policy.Attempt = 0
	err := Retry(ctx, policy, func(ctx context.Context) error {
		if begin != nil {
			begin()
		}
		return s.readReplies(ctx, firstReply, req, body, func(msg *nats.Msg) (bool, error) {
			more, err := handle(msg)
			if more {
				delivered = true
			}
			return more, err
		})
	})
	if err != nil {
		return fmt.Errorf("read a batch of %s: %w", s.name, err)
	}
	return nil
}

// readReplies is one attempt of readBatch.
func (s *Stream) readReplies(ctx context.Context, firstReply time.Duration, req BatchRequest, body []byte, handle func(msg *nats.Msg) (bool, error)) error {
	reply, next, done, err := s.replies(req)
	if err != nil {
		return err
	}
	defer done()
	if err := s.nc.PublishRequest(s.api, reply, body); err != nil {
		return err
	}
	for first := true; ; first = false {
		var msg *nats.Msg
		if first && firstReply > 0 {
			fctx, cancel := context.WithTimeout(ctx, firstReply)
			msg, err = next(fctx)
			cancel()
		} else {
			msg, err = next(ctx)
		}
		if err != nil {
			return err
		}
		if more, err := handle(msg); err != nil || !more {
			return err
		}
	}
}

// replies subscribes to the replies of one batched read: they are sent to
// reply, and next returns them one by one.
func (s *Stream) replies(req BatchRequest) (reply string, next func(context.Context) (*nats.Msg, error), done func(), err error) {
	if s.inbox == nil {
		reply = s.nc.NewInbox()
		sub, err := s.nc.SubscribeSync(reply)
		if err != nil {
			return "", nil, nil, err
		}
		return reply, sub.NextMsgWithContext, func() { _ = sub.Unsubscribe() }, nil
	}
	// The channel must hold every message of the reply and its end-of-batch
	// status until they are read.
	buffer := maxMultiLast + 1
	if req.Batch > 0 {
		buffer = req.Batch + 1
	}
	reply, ch, done, err := s.inbox.Register(buffer)
	if err != nil {
		return "", nil, nil, err
	}
	next = func(ctx context.Context) (*nats.Msg, error) {
		select {
		case msg := <-ch:
			return msg, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return reply, next, done, nil
}

// PayloadBatch is the end of a batched read of payloads: Last is the
// sequence of the last message the server sent, and Count how many it
// sent. When Count is Last-Seq+1, the messages were the consecutive
// sequences from the request's Seq.
type PayloadBatch struct {
	Last  uint64
	Count int
}

// GetPayloads is GetBatch without headers: the server sends each
// message's payload alone (no_hdr), neither its stored headers nor its
// subject, sequence and time, which spares re-encoding headers for each
// message and decoding them in the reader. each gets the payloads in
// stream order; the batch's end tells the last sequence sent. Use it
// for requests without NextBySubject or MultiLast (it refuses them),
// where the sequence of each payload follows from the count when the
// batch holds no gap (Count == Last-Seq+1). Errors, bounds and retries
// are GetBatch's.
func (s *Stream) GetPayloads(ctx context.Context, req BatchRequest, each func(data []byte) bool) (PayloadBatch, error) {
	if req.NextBySubject != "" || len(req.MultiLast) > 0 || req.Batch <= 0 {
		return PayloadBatch{}, errors.New("a batched read of payloads needs Batch and takes no subject filter")
	}
	body, err := json.Marshal(payloadRequest{BatchRequest: req, NoHeaders: true})
	if err != nil {
		return PayloadBatch{}, err
	}
	var end PayloadBatch
	err = s.readBatch(ctx, req, body, func() { end = PayloadBatch{} }, func(msg *nats.Msg) (bool, error) {
		// A payload comes without headers; the server's statuses, the
		// batch's end among them, come with headers and no payload.
		if len(msg.Header) > 0 && len(msg.Data) == 0 {
			_, last, err := stored(msg)
			switch {
			case errors.Is(err, ErrNotFound):
				return false, nil
			case err != nil:
				return false, err
			case !last:
				return false, fmt.Errorf("direct-get reply with headers in a batch of payloads")
			}
			end.Last, err = strconv.ParseUint(msg.Header.Get(lastSequenceHeader), 10, 64)
			if err != nil && end.Count > 0 {
				return false, fmt.Errorf("end of a batch of payloads without its last sequence")
			}
			return false, nil
		}
		end.Count++
		if !each(msg.Data) {
			// The batch's end, which tells its last sequence, is not read.
			end.Last = 0
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return PayloadBatch{}, err
	}
	return end, nil
}

// payloadRequest is a batched direct get whose messages come without
// headers.
type payloadRequest struct {
	BatchRequest
	NoHeaders bool `json:"no_hdr"`
}

// lastSequenceHeader is the header of a batch's end that holds the
// sequence of its last message.
const lastSequenceHeader = "Nats-Last-Sequence"
