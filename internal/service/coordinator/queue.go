package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// callQueue queues calls for workers: a call's queued event, in the
// ledger, is also its work item, which its namespace's consumer on the
// events stream delivers. It files calls under their turns and waits for
// their results.
type callQueue struct {
	names  messages.Names
	writes callWriter
	turns  *turns
	// reads is the ledger the results are awaited on; nil in tests of
	// sending that write no duplicate.
	reads callReader
	nc    *nats.Conn
	// publish sends a message and asks for no acknowledgement (the
	// connection's PublishMsg): see sendUnacknowledged.
	publish func(*nats.Msg) error
	// maxWait bounds how long a submit with wait holds its reply.
	maxWait time.Duration
	// unavailableWait bounds how long a write or read is retried while
	// JetStream does not answer (Config.UnavailableWait).
	unavailableWait time.Duration
	// ensureConsumer creates a namespace's consumer if it has none, so
	// that the consumer exists before the namespace's first call is
	// queued (it delivers what is queued after its creation); nil in
	// tests. consumers holds the namespaces it was done for.
	ensureConsumer func(ctx context.Context, ns string) error
	consumers      sync.Map
	// consumerChecks holds, by namespace, the check of its consumer under
	// way (a *consumerCheck), which the other submits of the namespace
	// wait for.
	consumerChecks sync.Map
	// flights holds, by message ID, the writes of queued events under way
	// in this process, each with the outcome callbacks of the submits that
	// joined it (see sendWith).
	flightsMu sync.Mutex
	flights   map[string][]func(duplicate bool, err error)
	// inHand counts the submits being checked and written, those whose
	// write is acknowledged until its answer: past
	// maxUnacknowledgedInHand a quiet submit's write waits for its
	// acknowledgement too (submitPipeline.runClaimed).
	inHand atomic.Int64
	log    *slog.Logger
}

// callWriter is what sending a call writes with: the ledger's events and
// JetStream's acknowledged publishes.
type callWriter interface {
	EventMsg(bucket, ns string, ev *messages.CallEvent) (*nats.Msg, error)
	PublishThen(msg *nats.Msg, timeout time.Duration, then func(seq uint64, duplicate bool, err error)) error
	Commit(ctx context.Context, bucket, ns string, res *messages.CallResult, notify string) (bool, error)
}

// callReader is what the queue reads of the ledger. The calls it reads
// are of the namespace it names, that of the submitted tool.
type callReader interface {
	Last(ctx context.Context, bucket, ns, callID string, kind messages.EventKind) (*ledger.Event, error)
	SnapshotIn(ctx context.Context, ns, callID string) (*ledger.Snapshot, error)
	WaitForWrite(ctx context.Context, bucket, ns, callID string, writes <-chan *nats.Msg) (*messages.CallResult, error)
	SubjectAt(ctx context.Context, seq uint64) (string, error)
}

// queuedMsgID is the Nats-Msg-Id of a call's queued event, so that the
// events stream stores one queued event per call however often its write
// is retried, and the first of concurrent submits of one call ID wins.
func queuedMsgID(callID string) string { return callID + ".queued" }

// sendWait is send, waiting for the outcome: whether another submit
// queued the call first.
func (q *callQueue) sendWait(ctx context.Context, call *messages.CallRequest) (bool, error) {
	return q.sendWaitAs(ctx, call, false)
}

// sendFirstWait is sendFirst, waiting for the outcome.
func (q *callQueue) sendFirstWait(ctx context.Context, call *messages.CallRequest) (bool, error) {
	return q.sendWaitAs(ctx, call, true)
}

func (q *callQueue) sendWaitAs(ctx context.Context, call *messages.CallRequest, first bool) (bool, error) {
	type outcome struct {
		duplicate bool
		err       error
	}
	done := make(chan outcome, 1)
	if err := q.sendAs(ctx, call, first, func(duplicate bool, err error) { done <- outcome{duplicate, err} }); err != nil {
		return false, err
	}
	select {
	case o := <-done:
		return o.duplicate, o.err
	case <-ctx.Done():
		return false, messages.Errorf(messages.CodeUnavailable, "queue call %s: %v", call.CallID, ctx.Err())
	}
}

// sendFirst is sendAs for a call that has no queued event yet: the event
// is stored only if no queued event of the call ID is in the stream,
// under any turn or namespace (Nats-Expected-Last-Subject-Sequence 0 on
// the call's queued-event filter). JetStream refuses a second one with
// wrong last sequence (err_code 10071), which is a duplicate as a
// repeated Nats-Msg-Id is: so a submit of a call ID that has a call
// needs no read before it, and the call runs once also when it is
// submitted again after the events stream's duplicate window. A call
// released by its approval has its held queued event already, and is
// sent by sendAs without first.
func (q *callQueue) sendFirst(ctx context.Context, call *messages.CallRequest, then func(duplicate bool, err error)) error {
	return q.sendAs(ctx, call, true, then)
}

// sendAs queues the call, writing its queued event: the call's record, its
// work item and, as its subject names the call's turn, its entry in the
// turn's index. Nothing waits here: then gets the outcome (whether another submit
// queued the call first) once JetStream has stored the event, from the
// ledger's goroutine or one of its own. If sendAs returns an error, then is
// not called.
//
// A write that JetStream does not answer (a stream without a leader) is
// sent again with backoff until ctx's deadline or unavailableWait, as the
// same message: it carries a Nats-Msg-Id (queuedMsgID), so an event stored
// twice is stored once. A publish refused because another publish of the
// same ID is being stored (err_code 10158) is a duplicate.
func (q *callQueue) sendAs(ctx context.Context, call *messages.CallRequest, first bool, then func(duplicate bool, err error)) error {
	return q.sendWith(ctx, call, first, queuedMsgID(call.CallID), then)
}

// sendWith is sendAs with the queued event's message ID.
//
// While a write of the same message ID is under way in this process, the
// submit joins it instead of writing: its outcome is a duplicate once
// that write has stored the event (or found it stored), and that write's
// failure otherwise. A client sends copies of a submit that goes
// unanswered (see the client package's retries), so a busy coordinator
// gets the copies of the submits it is slowest to store; were each copy
// written, and each write retried after its acknowledgement's timeout,
// the load would grow with the delay that it causes. The joined outcome
// is reported on a goroutine of its own, as a duplicate is read.
func (q *callQueue) sendWith(ctx context.Context, call *messages.CallRequest, first bool, msgID string, then func(duplicate bool, err error)) error {
	q.flightsMu.Lock()
	if joined, ok := q.flights[msgID]; ok {
		q.flights[msgID] = append(joined, then)
		q.flightsMu.Unlock()
		return nil
	}
	if q.flights == nil {
		q.flights = map[string][]func(bool, error){}
	}
	q.flights[msgID] = nil
	q.flightsMu.Unlock()
	landed := func(err error) {
		q.flightsMu.Lock()
		all := q.flights[msgID]
		delete(q.flights, msgID)
		q.flightsMu.Unlock()
		for _, joined := range all {
			go joined(err == nil, err)
		}
	}
	err := q.sendAlone(ctx, call, first, msgID, func(duplicate bool, err error) {
		landed(err)
		then(duplicate, err)
	})
	if err != nil {
		landed(err)
	}
	return err
}

// sendAlone is sendWith's write.
func (q *callQueue) sendAlone(ctx context.Context, call *messages.CallRequest, first bool, msgID string, then func(duplicate bool, err error)) error {
	if err := q.haveConsumer(ctx, call.Namespace); err != nil {
		return err
	}
	queuedMsg, err := q.queuedMsg(ctx, call, first, msgID)
	if err != nil {
		return err
	}
	// The quiet submit's context ends when its handler returns; the
	// writes go on until their own deadline.
	bound := q.retryBound()
	if d, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(d)) // a deadline passed allows one short attempt
	}
	s := &sending{q: q, parent: ctx, call: call, then: then, first: first, msgID: msgID}
	s.record = retryingPublish{q: q, msg: queuedMsg, retry: retryWithin(bound).Start(), then: s.recorded, conditional: first}
	record := &s.record
	if err := q.writes.PublishThen(queuedMsg, record.retry.AttemptTimeout(), record.acked); err != nil && !transient(err) {
		return messages.Errorf(messages.CodeUnavailable, "queue call: %v", err)
	} else if err != nil {
		record.acked(0, false, err)
	}
	return nil
}

// sendUnacknowledged writes the call's first queued event without asking
// the stream to acknowledge it: for a quiet submit whose caller asked for
// no receipt, whose look for the call (docs/protocol.md, "Quiet
// submits") finds a write the stream refused or lost as it finds a lost
// submit, and sends copies, which are written as sendFirst writes. The
// write is conditional on the call having no queued event, which keeps
// one queued event per call without a message ID: nothing would hear
// the stream say it had the ID already. It returns only the errors of
// sending.
func (q *callQueue) sendUnacknowledged(ctx context.Context, call *messages.CallRequest) error {
	if err := q.haveConsumer(ctx, call.Namespace); err != nil {
		return err
	}
	queuedMsg, err := q.queuedMsg(ctx, call, true, "")
	if err != nil {
		return err
	}
	if err := q.publish(queuedMsg); err != nil {
		return messages.Errorf(messages.CodeUnavailable, "queue call: %v", err)
	}
	return nil
}

// queuedMsg is the call's queued event as it is written: first, only if
// the call has no queued event yet; with msgID unless it is empty.
func (q *callQueue) queuedMsg(ctx context.Context, call *messages.CallRequest, first bool, msgID string) (*nats.Msg, error) {
	bucket := messages.TurnBucket(call.Turn)
	queuedMsg, err := q.writes.EventMsg(bucket, call.Namespace, &messages.CallEvent{CallID: call.CallID, Kind: messages.EventQueued, Time: call.QueuedAt, Request: call, Audit: queuedAuditOf(ctx)})
	if err != nil {
		return nil, messages.Errorf(messages.CodeBadRequest, "encode call: %v", err)
	}
	if msgID != "" {
		queuedMsg.Header.Set(messages.HeaderMsgID, msgID)
	}
	// This coordinator sends a cancel notice before it decides whether the
	// call was delivered: workers may trust their notices (calls.cancel).
	queuedMsg.Header.Set(messages.HeaderVersion, messages.NoticeVersion)
	if first {
		// The subject's IDs were checked as it was made.
		filter := q.names.QueuedEventFilter(queuedMsg.Subject)
		if filter == "" {
			return nil, messages.Errorf(messages.CodeInternal, "no queued event's subject: %s", queuedMsg.Subject)
		}
		queuedMsg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		queuedMsg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, filter)
	}
	tracing.Inject(sendSpan(ctx, queuedMsg.Subject, call), queuedMsg.Header)
	return queuedMsg, nil
}

// haveConsumer makes sure the namespace's consumer exists before a call
// of it is queued: once per namespace and process, a read (and a create
// when it is missing).
func (q *callQueue) haveConsumer(ctx context.Context, ns string) error {
	if q.ensureConsumer == nil {
		return nil
	}
	for {
		if _, ok := q.consumers.Load(ns); ok {
			return nil
		}
		// One check of a namespace's consumer at a time: the first submits
		// of a namespace, which may come by the thousand, wait for it
		// rather than each asking JetStream, which on a busy server times
		// out the requests it queues and has them all asked again.
		fresh := &consumerCheck{done: make(chan struct{})}
		c, running := q.consumerChecks.LoadOrStore(ns, fresh)
		check := c.(*consumerCheck)
		if !running {
			// A check may have ended between the look above and this one:
			// it stored the namespace before it went.
			var err error
			if _, ok := q.consumers.Load(ns); !ok {
				err = retryTransient(ctx, q.retryBound(), func(ctx context.Context) error { return q.ensureConsumer(ctx, ns) })
			}
			if err == nil {
				q.consumers.Store(ns, struct{}{})
			}
			q.consumerChecks.Delete(ns)
			close(check.done)
			if err != nil {
				return unavailable(err, "the consumer of namespace %s", ns)
			}
			return nil
		}
		// A check that failed, within its own request's deadline, is
		// made again by a submit that still has time.
		select {
		case <-check.done:
		case <-ctx.Done():
			return unavailable(context.Cause(ctx), "the consumer of namespace %s", ns)
		}
	}
}

// consumerCheck is a check of a namespace's consumer under way; done is
// closed when it has ended.
type consumerCheck struct{ done chan struct{} }

// retryBound is how long writes and reads are retried (unavailableWait).
func (q *callQueue) retryBound() time.Duration {
	if q.unavailableWait > 0 {
		return q.unavailableWait
	}
	return DefaultUnavailableWait
}

// retryingPublish publishes a message until JetStream stores it, refuses
// it, or the deadline passes, pausing after each transient failure as
// retryWithin says (the asynchronous form of the retry policy, since the
// acknowledgement comes on the ledger's goroutine). then gets the outcome
// once, on the ledger's goroutine or a timer's: whether the stream had the
// message ID already (also when another publish of it was in process), or
// the error.
type retryingPublish struct {
	q     *callQueue
	msg   *nats.Msg
	retry *transport.Retrier
	then  func(duplicate bool, err error)
	// conditional tells that msg is stored only if its call has no queued
	// event: a refusal for a wrong last sequence is a duplicate.
	conditional bool

	// seq is where the stream stored the message.
	seq uint64
}

func (r *retryingPublish) publish() {
	if err := r.q.writes.PublishThen(r.msg, r.retry.AttemptTimeout(), r.acked); err != nil {
		r.acked(0, false, err)
	}
}

func (r *retryingPublish) acked(seq uint64, duplicate bool, err error) {
	switch {
	case err == nil:
		r.seq = seq
		r.then(duplicate, nil)
		return
	case transport.DuplicateInProcess(err), r.conditional && errors.Is(err, transport.ErrWrongLastSequence):
		r.then(true, nil)
		return
	}
	pause, again := r.retry.Failed(err)
	if !again {
		r.then(false, r.retry.GiveUp(err))
		return
	}
	time.AfterFunc(pause, r.publish)
}

// sending collects the outcomes of send's writes.
type sending struct {
	q *callQueue
	// parent is the submit's context, which may end before the writes are
	// answered; the record's retries bound them.
	parent context.Context
	call   *messages.CallRequest
	then   func(duplicate bool, err error)

	// record writes the queued event, first (see sendFirst) or not, with
	// the message ID msgID.
	record retryingPublish
	first  bool
	msgID  string

	recordErr       error
	recordDuplicate bool
}

// recorded reports the outcome of the queued event's write.
func (s *sending) recorded(duplicate bool, err error) {
	s.recordDuplicate, s.recordErr = duplicate, err
	q := s.q
	if s.recordErr == nil && !s.recordDuplicate {
		s.then(false, nil)
		return
	}
	// Off the ledger's goroutine: what is left reads.
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.parent), q.retryBound())
		defer cancel()
		s.then(s.settle(ctx))
	}()
}

// settle decides the outcome of a send that did not simply store its
// queued event: a duplicate (another submit's call, or a retried write of
// this one) or a failure.
func (s *sending) settle(ctx context.Context) (duplicate bool, err error) {
	q, call := s.q, s.call
	if transport.TooLarge(s.recordErr) {
		return false, messages.Errorf(messages.CodePayloadTooLarge, "queue call %s: the events stream refuses its queued event: %v", call.CallID, s.recordErr)
	}
	if s.recordErr != nil {
		return false, messages.Errorf(messages.CodeUnavailable, "queue call %s: %v", call.CallID, s.recordErr)
	}
	if s.recordDuplicate && s.record.seq > 0 && s.msgID == queuedMsgID(call.CallID) {
		// The stream had the message ID: normally this call's queued
		// event, stored by another submit or an earlier try. A worker may
		// set message IDs on its namespace's events too, and one that
		// guessed a call's ID can have taken its queued event's: then the
		// event is written again under an ID of its own, only if the call
		// still has no queued event.
		if taken, err := q.idTakenBy(ctx, call, s.record.seq); err != nil {
			return false, unavailable(err, "read call %s", call.CallID)
		} else if taken {
			q.log.Warn("the message ID of a call's queued event was used by another message; queuing it under another", "call", call.CallID, "seq", s.record.seq)
			done := make(chan struct{})
			var dup bool
			var err error
			if serr := q.sendWith(ctx, call, true, queuedMsgID(call.CallID)+"."+nuid.Next(), func(d bool, e error) { dup, err = d, e; close(done) }); serr != nil {
				return false, serr
			}
			select {
			case <-done:
				return dup, err
			case <-ctx.Done():
				return false, messages.Errorf(messages.CodeUnavailable, "queue call %s: %v", call.CallID, ctx.Err())
			}
		}
	}
	// The ledger has a queued event of this call ID; whose?
	ours, err := q.ownsCall(ctx, call, s.recordDuplicate)
	if err != nil {
		return false, unavailable(err, "read call %s", call.CallID)
	}
	return !ours, nil
}

// ownsCall reports whether the call's queued event in the ledger is this
// submit's (this call's, not another submit's of the same call ID). If
// recordDuplicate, the event was stored by another publish, maybe still
// in process: it is waited for.
func (q *callQueue) ownsCall(ctx context.Context, call *messages.CallRequest, recordDuplicate bool) (bool, error) {
	if !recordDuplicate {
		return true, nil
	}
	prev, err := q.queuedRequest(ctx, call.CallID, true)
	if err != nil {
		return false, err
	}
	return prev != nil && sameSubmit(prev, call), nil
}

// idTakenBy reports whether the message the stream stored at seq, whose
// message ID a write of the call's queued event repeated, is something
// else than a queued event of the call.
func (q *callQueue) idTakenBy(ctx context.Context, call *messages.CallRequest, seq uint64) (bool, error) {
	var subject string
	err := retryTransient(ctx, q.retryBound(), func(ctx context.Context) (err error) {
		subject, err = q.reads.SubjectAt(ctx, seq)
		return err
	})
	if errors.Is(err, transport.ErrNotFound) {
		return false, nil // gone with its age: whatever it was, it holds nothing up now
	}
	if err != nil {
		return false, err
	}
	callID, kind, _, ok := q.names.Events().Parse(subject)
	return !ok || kind != messages.EventQueued || callID != call.CallID, nil
}

// sameSubmit reports whether two requests of one call ID come from one submit.
func sameSubmit(a, b *messages.CallRequest) bool {
	return a.QueuedAt.Equal(b.QueuedAt) && a.Agent == b.Agent && a.Tool == b.Tool && a.ArgumentsDigest == b.ArgumentsDigest && a.Notify == b.Notify
}

// errNotYet is a read of a queued event that another submit is storing
// right now: transient, so it is read again.
var errNotYet = fmt.Errorf("queued event not stored yet: %w", context.DeadlineExceeded)

// queuedRequest reads the request of the call's queued event, retrying
// while JetStream does not answer; nil if the call has none. With
// appearing, a missing event is waited for, as another submit is storing
// it.
func (q *callQueue) queuedRequest(ctx context.Context, callID string, appearing bool) (*messages.CallRequest, error) {
	var prev *messages.CallRequest
	err := retryTransient(ctx, q.retryBound(), func(ctx context.Context) error {
		// The queued event of any namespace: a call ID used before for
		// another tool is a conflict, not a new call.
		ev, err := q.reads.Last(ctx, "", "", callID, messages.EventQueued)
		if err != nil {
			return err
		}
		if ev == nil || ev.Request == nil {
			if appearing {
				return errNotYet
			}
			return nil
		}
		prev = ev.Request
		return nil
	})
	return prev, err
}

// existing answers a submit of a call ID that already has a call (from
// an idempotency key or the caller): the same call, or a conflict if the
// ID was used for another tool or other arguments. With no such call it
// returns no reply; with appearing, it waits for the call, which another
// submit is storing (see queuedRequest).
func (q *callQueue) existing(ctx context.Context, call *messages.CallRequest, sr *messages.SubmitRequest, appearing bool) (*messages.SubmitReply, error) {
	prev, err := q.queuedRequest(ctx, call.CallID, appearing)
	if err != nil {
		return nil, unavailable(err, "read call %s", call.CallID)
	}
	if prev == nil {
		return nil, nil
	}
	snap, err := q.snapshot(ctx, prev.Namespace, call.CallID)
	if err != nil {
		return nil, err
	}
	if prev.Tool != call.Tool || prev.ArgumentsDigest != call.ArgumentsDigest {
		what := "with other arguments"
		if prev.Tool != call.Tool {
			what = "not of " + call.Tool
		}
		if sr.IdempotencyKey == "" {
			return nil, messages.Errorf(messages.CodeIdempotencyConflict, "call %s is a call of %s, %s", call.CallID, prev.Tool, what)
		}
		return nil, messages.Errorf(messages.CodeIdempotencyConflict,
			"idempotency key %q was used for call %s of %s, %s", sr.IdempotencyKey, call.CallID, prev.Tool, what)
	}
	reply := &messages.SubmitReply{CallID: call.CallID, State: snap.State(), Duplicate: true}
	if snap.Approval != nil && reply.State == messages.StateAwaitingApproval {
		reply.Approval = snap.Approval.Approval
		return reply, nil
	}
	if snap.Result != nil {
		reply.Result = snap.Result.Result
		return reply, nil
	}
	if !sr.Wait {
		return reply, nil
	}
	writes, stop, err := q.resultWrites(messages.TurnBucket(prev.Turn), prev.Namespace, call.CallID)
	if err != nil {
		return nil, err
	}
	defer stop()
	return q.awaitResult(ctx, messages.TurnBucket(prev.Turn), prev.Namespace, reply, writes, waitDuration(sr, prev.Deadline, q.maxWait))
}

// duplicate answers a submit whose call another submit queued first: as
// that call (see existing), which is in the ledger or about to be.
func (q *callQueue) duplicate(ctx context.Context, call *messages.CallRequest, sr *messages.SubmitRequest) (*messages.SubmitReply, error) {
	reply, err := q.existing(ctx, call, sr, true)
	if err == nil && reply == nil {
		err = messages.Errorf(messages.CodeUnavailable, "call %s was queued by another submit that is not in the ledger", call.CallID)
	}
	return reply, err
}

// resultWrites subscribes to the writes of the result of a call of
// namespace ns.
func (q *callQueue) resultWrites(bucket, ns, callID string) (<-chan *nats.Msg, func(), error) {
	subject, err := q.names.Events().Subject(bucket, callID, messages.EventResult, ns)
	if err != nil {
		return nil, nil, err
	}
	writes := make(chan *nats.Msg, 4)
	sub, err := q.nc.ChanSubscribe(subject, writes)
	if err != nil {
		return nil, nil, unavailable(err, "subscribe to result")
	}
	return writes, func() {
		if err := sub.Unsubscribe(); err != nil {
			q.log.Debug("unsubscribe from result", "call", callID, "error", err)
		}
	}, nil
}

func waitDuration(sr *messages.SubmitRequest, deadline time.Time, max time.Duration) time.Duration {
	d := time.Until(deadline) + time.Second
	if sr.WaitMS > 0 {
		d = min(d, time.Duration(sr.WaitMS)*time.Millisecond)
	}
	return min(d, max)
}

// awaitResult waits for the result to be published. If it does not come in
// time the reply carries the call's current state instead.
func (q *callQueue) awaitResult(ctx context.Context, bucket, ns string, reply *messages.SubmitReply, writes <-chan *nats.Msg, wait time.Duration) (*messages.SubmitReply, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if res, err := q.reads.WaitForWrite(wctx, bucket, ns, reply.CallID, writes); err == nil {
		reply.State, reply.Result = res.Status, res
		return reply, nil
	}
	if snap, err := q.snapshot(ctx, ns, reply.CallID); err == nil {
		reply.State = snap.State()
		if snap.Result != nil {
			reply.Result = snap.Result.Result
		}
	}
	return reply, nil
}

// snapshot reads the latest events of a call of namespace ns, retrying
// while JetStream does not answer.
func (q *callQueue) snapshot(ctx context.Context, ns, callID string) (*ledger.Snapshot, error) {
	var snap *ledger.Snapshot
	err := retryTransient(ctx, q.retryBound(), func(ctx context.Context) (err error) {
		snap, err = q.reads.SnapshotIn(ctx, ns, callID)
		return err
	})
	return snap, unavailable(err, "read call %s", callID)
}
