package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/support/reuse"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// writeTimeout bounds each write to the ledger.
const writeTimeout = 10 * time.Second

// results writes the results of calls to the ledger and settles the calls'
// messages once a result stands: this attempt's, or another's.
type results struct {
	workerID string
	ackWait  time.Duration
	js       jetstream.JetStream
	names    messages.Names
	ledger   *ledger.Ledger
	log      *slog.Logger
	// goroutines run what follows a write the stream answered.
	goroutines *reuse.Pool
	// abandoned is closed when Stop gives up on the calls still running
	// (see stragglers).
	abandoned <-chan struct{}
	// retries counts the retried writes of results.
	retries atomic.Int64
}

// interrupted builds the result of a call whose context ended before the
// tool answered. retry is true when the worker is stopping: the call goes
// back to JetStream without a result.
func interrupted(base messages.CallResult, ctx context.Context) (messages.CallResult, bool) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrStopping):
		return base, true
	case errors.Is(cause, ErrSuperseded):
		// The commit will find the result that already stands and drop this one.
		return failure(base, messages.StateCancelled, messages.ResultCancelled, cause.Error()), false
	case errors.Is(cause, ErrCancelled):
		return failure(base, messages.StateCancelled, messages.ResultCancelled, cause.Error()), false
	default:
		return failure(base, messages.StateTimedOut, messages.ResultTimedOut, "the call's deadline passed while the tool ran"), false
	}
}

// maxResultContent bounds a result's content whatever the tool says, so
// that its event stays under the 1 MiB message limit.
const maxResultContent = 768 << 10

// fit keeps a result within the tool's size limit: a larger one is stored
// whole in the results object store, and the result the caller and the
// model get is cut down to the limit, saying where the whole one is.
func (r *results) fit(ns string, res messages.CallResult, def *messages.ToolDefinition, log interface{ Warn(string, ...any) }) messages.CallResult {
	limit := def.Metadata.MaxResultSize
	if limit <= 0 {
		limit = messages.DefaultMaxResultSize
	}
	limit = min(limit, maxResultContent)
	size := messages.ContentSize(&res)
	if size <= limit {
		return res
	}
	var ref *messages.ObjectRef
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if data, err := json.Marshal(&res); err == nil {
		if obj, err := resources.EnsureResultsBucket(ctx, r.js, r.names, ns); err != nil {
			log.Warn("results store unavailable; the result is cut without a copy", "error", err)
		} else if info, err := obj.PutBytes(ctx, res.CallID, data); err != nil {
			log.Warn("whole result not stored; the result is cut without a copy", "error", err)
		} else {
			ref = &messages.ObjectRef{Bucket: info.Bucket, Name: info.Name, Size: int64(info.Size)}
		}
	}
	cut, _ := messages.Truncate(res, limit, ref)
	return cut
}

func failure(base messages.CallResult, status messages.CallState, code, message string) messages.CallResult {
	base.Status = status
	base.IsError = true
	base.Content = []messages.ContentBlock{messages.TextBlock(message)}
	base.Error = &messages.ResultError{Code: code, Message: message}
	if base.FinishedAt.IsZero() {
		base.FinishedAt = time.Now().UTC()
	}
	return base
}

// logger is what the result's paths log with: a callLog, or the worker's.
type logger interface {
	Warn(string, ...any)
	Info(string, ...any)
}

// finish commits the result and removes the call from the queue. A result
// already committed by another attempt stands; this one is dropped. A
// write that fails is retried (see commitAgain).
func (r *results) finish(msg jetstream.Msg, log logger, bucket, ns, notify string, res messages.CallResult) {
	if res.FinishedAt.IsZero() {
		res.FinishedAt = time.Now().UTC()
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.commitTimeout())
	defer cancel()
	won, err := r.ledger.Commit(ctx, bucket, ns, &res, notify)
	switch {
	case err != nil:
		r.commitAgain(msg, log, bucket, ns, &res, notify, err)
	case !won:
		r.refused(msg, log, bucket, ns, &res, notify)
	default:
		settle(msg, log, res.Status, true, nil)
	}
}

// finishThen is finish without waiting for the stream: the message is
// settled, and the call's slot released, once the stream has answered the
// result's write, on the ledger's goroutine. The slot stays taken until
// then, and while a failed write is retried or a refused one confirmed.
func (r *results) finishThen(msg jetstream.Msg, log *callLog, bucket, ns, notify string, res messages.CallResult, s *slot) {
	if res.FinishedAt.IsZero() {
		res.FinishedAt = time.Now().UTC()
	}
	status := res.Status
	later := func(then func()) {
		r.goroutines.Go(func() {
			then()
			s.Release(slotCommitted)
		})
	}
	retry := func(err error) {
		later(func() { r.commitAgain(msg, log, bucket, ns, &res, notify, err) })
	}
	err := r.ledger.CommitThen(bucket, ns, &res, notify, r.commitTimeout(), func(won bool, err error) {
		switch {
		case err != nil:
			retry(err)
		case !won:
			later(func() { r.refused(msg, log, bucket, ns, &res, notify) })
		default:
			settle(msg, log, status, true, nil)
			s.Release(slotCommitted)
		}
	})
	if err != nil {
		retry(err)
	}
}

// refused settles a call whose result's write the stream refused because
// the call has a result already: the leader found a message on the
// call's result subject. The worker confirms it by reading that result
// before it lets go of the call, so that no refusal, whatever it was, can
// take a call's work item away while no result stands: it acknowledges
// the call if the result read is this attempt's own (an earlier try of
// the write was stored and its answer lost), terminates it if it is
// another's, and otherwise keeps the call and retries the write (see
// commitAgain): a replica behind the leader shows the result a moment
// later, and a write made again is refused again while it stands.
func (r *results) refused(msg jetstream.Msg, log logger, bucket, ns string, res *messages.CallResult, notify string) {
	stands, ours, err := r.standing(bucket, ns, res)
	if err == nil && stands {
		settle(msg, log, res.Status, ours, nil)
		return
	}
	if err == nil {
		err = errors.New("the stream refused the result as if another stood, and none can be read yet")
	}
	r.commitAgain(msg, log, bucket, ns, res, notify, err)
}

// standing reads the result that stands for the call, and tells whether
// there is one and whether it is res itself (the same attempt of the same
// worker).
func (r *results) standing(bucket, ns string, res *messages.CallResult) (stands, ours bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.commitTimeout())
	defer cancel()
	snap, err := r.ledger.ReadOwn(ctx, bucket, ns, res.CallID, messages.EventResult)
	if err != nil || snap.Result == nil {
		return false, false, err
	}
	stored := snap.Result
	return true, stored.Attempt == res.Attempt && stored.Worker == res.Worker, nil
}

// The retries of a result's write that failed (no answer within the
// timeout, no responders while the events stream has no leader, ...).
const (
	// commitRetryMin is the wait before the first retry; it doubles with
	// each failure, with jitter, up to commitRetryMax (or a third of
	// AckWait, when shorter, so that the lease is renewed in time).
	// commitRetryMax is short because a caller waits for this write: the
	// writes fail while the events stream elects a leader (5–10 s), and a
	// pause that had grown to 5 s left callers waiting up to that long
	// after the election; a try a second costs one small message.
	commitRetryMin = 100 * time.Millisecond
	commitRetryMax = time.Second
	// commitGiveUp is how long a worker keeps trying to store a result
	// before it hands the call back, at the risk of the tool running again.
	commitGiveUp = 10 * time.Minute
)

// commitAttempt bounds one write of a result. A write that reached a
// stream leader as it died is never answered; the new leader, elected in
// a few seconds, takes the next try, and trying again is safe. So tries
// are short, as the coordinator's are, rather than as long as an election.
const commitAttempt = 2 * time.Second

// commitTimeout bounds one write of a result: commitAttempt, or a third of
// AckWait when shorter, so that a lease renewed before the write still
// holds when it times out.
func (r *results) commitTimeout() time.Duration { return min(commitAttempt, r.ackWait/3) }

// commitAgain keeps trying to store the result of a call whose tool ran,
// while it holds the call's message: before each try it renews the lease,
// so that the call is not delivered again meanwhile. Running the tool again
// would repeat its effects, and the next attempt could not read the ledger
// either; the write itself is safe to repeat, since a result is only stored
// if the call has none (a try whose answer was lost makes the next one
// find this result standing). It hands the call back after commitGiveUp,
// or when Stop gives up on the calls still running.
func (r *results) commitAgain(msg jetstream.Msg, log logger, bucket, ns string, res *messages.CallResult, notify string, err error) {
	log.Warn("result not stored; retrying while the call's lease is held", "error", err)
	retry := r.retryPolicy(commitGiveUp).Start()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for tries := 1; ; tries++ {
		pause, again := retry.Failed(err)
		if !again {
			log.Warn("result not stored; giving up and handing the call back", "error", err, "tries", tries, "after", commitGiveUp)
			acked(log, "handed back", msg.NakWithDelay(retryDelay))
			return
		}
		timer.Reset(pause)
		select {
		case <-timer.C:
		case <-r.abandoned:
			log.Warn("worker stopping: result not stored; the call will be delivered again", "error", err, "tries", tries)
			acked(log, "handed back", msg.Nak())
			return
		}
		if lerr := msg.InProgress(); lerr != nil {
			log.Warn("lease renewal failed while storing the result", "error", lerr)
		}
		r.retries.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), r.commitTimeout())
		var won bool
		won, err = r.ledger.Commit(ctx, bucket, ns, res, notify)
		cancel()
		if err == nil && !won {
			// An earlier try may have stored it and lost its answer, or
			// another attempt's stands: either way the read says which.
			var stands, ours bool
			if stands, ours, err = r.standing(bucket, ns, res); err == nil && stands {
				log.Info("a result of the call is stored", "tries", tries+1, "this_attempt", ours)
				settle(msg, log, res.Status, ours, nil)
				return
			}
			if err == nil {
				err = errors.New("the stream refused the result as if another stood, and none can be read yet")
			}
		} else if err == nil {
			log.Info("result stored after retrying", "tries", tries+1)
			settle(msg, log, res.Status, true, nil)
			return
		}
	}
}

// retryPolicy is the policy of a result's write, and of the reads before a
// call runs, when they fail: every failure is tried again, after a pause
// from commitRetryMin doubling to commitRetryMax (or a third of AckWait,
// so that the lease is renewed in time), each between half and all of
// that so that the workers that failed together do not retry in step,
// until within has passed.
func (r *results) retryPolicy(within time.Duration) transport.RetryPolicy {
	return transport.RetryPolicy{Initial: commitRetryMin, Max: min(commitRetryMax, r.ackWait/3), Within: within, Retryable: retryAny}
}

func retryAny(error) bool { return true }

// settle acknowledges a call's message once its result is committed,
// terminates it when another attempt's result stands or the call was
// cancelled, and hands it back when the result could not be stored.
func settle(msg jetstream.Msg, log logger, status messages.CallState, won bool, err error) {
	if err != nil {
		// The message stays unacknowledged and is delivered again; the next
		// attempt sees whether this result was stored after all.
		log.Warn("result not stored; the call will be delivered again", "error", err)
		acked(log, "handed back", msg.NakWithDelay(retryDelay))
		return
	}
	if !won {
		log.Info("the call already has a result (another attempt's, a cancel's or the deadline's); this attempt's is discarded")
	}
	if status == messages.StateCancelled || !won {
		acked(log, "terminated", msg.Term())
		return
	}
	acked(log, "acknowledged", msg.Ack())
}

// acked logs an acknowledgement that did not reach the server: the message
// is then delivered again after AckWait (or, for InProgress, may be).
func acked(log interface{ Warn(string, ...any) }, what string, err error) {
	if err != nil {
		log.Warn("call message not "+what, "error", err)
	}
}

// rejectUnreadable fails a call whose message cannot be decoded: no
// attempt could run it.
func (r *results) rejectUnreadable(msg jetstream.Msg, bucket, ns string, attempt int, decodeErr error) {
	// The message is a queued event: its subject names the call.
	callID, _, _, _ := r.names.Events().Parse(msg.Subject())
	r.log.Error("unreadable call message", "call", callID, "error", decodeErr)
	if messages.ValidateID("call ID", callID) == nil {
		res := failure(messages.CallResult{CallID: callID, Attempt: attempt, Worker: r.workerID}, messages.StateFailed, messages.ResultInvalidRequest,
			fmt.Sprintf("the call message could not be read: %v", decodeErr))
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if _, err := r.ledger.Commit(ctx, bucket, ns, &res, ""); err != nil {
			r.log.Warn("result of unreadable call not stored", "call", callID, "error", err)
		}
	}
	acked(r.log.With("call", callID), "terminated", msg.TermWithReason("unreadable call message"))
}

func firstText(blocks []messages.ContentBlock) string {
	for _, b := range blocks {
		if b.Type == messages.ContentText {
			return b.Text
		}
	}
	return ""
}
