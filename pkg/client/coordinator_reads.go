package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Reading through the coordinator.
//
// A client whose account has no JetStream of its own — an agent's user of
// an installation with identities, whose agents' account imports only the
// API and its routed results — cannot read the events stream. With
// Options.CoordinatorReads it follows calls with the API instead: Watch
// polls calls.events, Wait and Call poll calls.get with wait_ms, and the
// coordinator answers only for the calls of the agents the user may act
// as. Watch also switches to it by itself, for the rest of the client's
// life, when the server answers that the account has no JetStream.

// callReads reads what became of the client's calls: whether a call
// exists, its result, its whole result when it was truncated, its events.
// It reads them from JetStream (the events stream, the results stores),
// or, for an account without JetStream, through the coordinator's API, as
// above.
type callReads struct {
	api    *coordinatorAPI
	ledger *ledger.Ledger
	js     jetstream.JetStream
}

// coordinatorPoll is how long one calls.get or calls.events request of a
// wait or a watch is held by the coordinator before it answers with the
// call as it stands; the next request follows at once.
const coordinatorPoll = 20 * time.Second

// isNoJetStream reports the server's answer to a JetStream request from an
// account without JetStream.
func isNoJetStream(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// getWaiting is calls.get, held by the coordinator up to wait for the
// call's result.
func (r *callReads) getWaiting(ctx context.Context, callID string, wait time.Duration) (*messages.CallInfo, error) {
	var out messages.CallInfo
	req := &messages.GetCallRequest{CallID: callID, WaitMS: wait.Milliseconds()}
	return &out, r.api.request(ctx, messages.EndpointCallsGet, req, &out, heldRead(wait), wait)
}

// heldRead is the safety of a read the coordinator holds for wait: sent
// again, and copied only while no coordinator has sent a receipt for it
// (see hedged), since a copy that reaches another coordinator than the
// one holding the first holds one of the user's waits there.
func heldRead(wait time.Duration) safety {
	if wait > 0 {
		return repeatable
	}
	return read
}

// pollFor is the wait of the next poll: coordinatorPoll, or what is left
// of ctx's deadline when that is sooner.
func pollFor(ctx context.Context) time.Duration {
	wait := coordinatorPoll
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline))
	}
	return max(wait, time.Millisecond)
}

// waitViaCoordinator is Wait through calls.get: one held request after
// another until the call has its result or ctx ends.
func (r *callReads) waitViaCoordinator(ctx context.Context, callID string) (*messages.CallResult, error) {
	failures := 0
	for {
		info, err := r.getWaiting(ctx, callID, pollFor(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("wait for call %s: %w", callID, ctx.Err())
			}
			if !undecided(err) {
				return nil, err
			}
			// No coordinator answered, or none could read JetStream: the
			// call goes on all the same, and is waited for while the
			// context allows, whatever its caller was told of its submit.
			failures++
			if err := transport.Sleep(ctx, requestRetry.Delay(failures)); err != nil {
				return nil, fmt.Errorf("wait for call %s: %w", callID, err)
			}
			continue
		}
		failures = 0
		if info.Result != nil {
			return info.Result, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("wait for call %s: %w", callID, err)
		}
	}
}

// callEvents is one calls.events request.
func (r *callReads) callEvents(ctx context.Context, req *messages.CallEventsRequest) (*messages.CallEventsReply, error) {
	var out messages.CallEventsReply
	wait := time.Duration(req.WaitMS) * time.Millisecond
	return &out, r.api.request(ctx, messages.EndpointCallsEvents, req, &out, heldRead(wait), wait)
}

// watchViaCoordinator is Watch through calls.events: events in the order
// they were stored, from the first, until the result.
func (r *callReads) watchViaCoordinator(ctx context.Context, callID string) iter.Seq2[*messages.CallEvent, error] {
	return func(yield func(*messages.CallEvent, error) bool) {
		var after uint64
		failures := 0
		for {
			reply, err := r.callEvents(ctx, &messages.CallEventsRequest{CallID: callID, After: after, WaitMS: pollFor(ctx).Milliseconds()})
			if err != nil && ctx.Err() == nil && undecided(err) {
				// As in waitViaCoordinator: the call goes on.
				failures++
				if transport.Sleep(ctx, requestRetry.Delay(failures)) == nil {
					continue
				}
			}
			if err != nil {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(nil, fmt.Errorf("watch call %s: %w", callID, err))
				return
			}
			failures = 0
			for i := range reply.Events {
				if !yield(&reply.Events[i], nil) {
					return
				}
			}
			if reply.Finished {
				return
			}
			after = reply.Last
		}
	}
}

// resultViaCoordinator reads the call's result, nil while it has none;
// with confirm, the coordinator asks the stream's leader for a result its
// replica does not show (GetCallRequest.Confirm).
func (r *callReads) resultViaCoordinator(ctx context.Context, callID string, confirm bool) (*messages.CallResult, error) {
	var info messages.CallInfo
	if err := r.api.request(ctx, messages.EndpointCallsGet, &messages.GetCallRequest{CallID: callID, Confirm: confirm}, &info, read, 0); err != nil {
		return nil, err
	}
	return info.Result, nil
}

// checkResult is a waiting call's periodic look for a result it may have
// missed: from the events stream (with confirm, no result found is
// confirmed with the stream's leader; see ledger.ConfirmsAtLeader), or
// through the coordinator.
func (r *callReads) checkResult(ctx context.Context, bucket, ns, callID string, confirm bool) (*messages.CallResult, error) {
	if r.api.readsViaCoordinator() {
		return r.resultViaCoordinator(ctx, callID, confirm)
	}
	read := r.ledger.LastSeen
	if confirm {
		read = r.ledger.Last
	}
	ev, err := read(ctx, bucket, ns, callID, messages.EventResult)
	if err != nil || ev == nil {
		return nil, err
	}
	return ev.Result, nil
}

// fullResultViaCoordinator reads a call's whole result a page at a time
// with calls.full_result, and checks it against its size and digest. A
// result stored again while it was read (conflict) is read again from
// its start, a few times at most.
func (r *callReads) fullResultViaCoordinator(ctx context.Context, callID string) ([]byte, error) {
	var err error
	for range 3 {
		var data []byte
		if data, err = r.fullResultPages(ctx, callID); err == nil || messages.AsError(err).Code != messages.CodeConflict {
			return data, err
		}
	}
	return nil, err
}

// fullResultPages is one read of a whole result, from its first page.
func (r *callReads) fullResultPages(ctx context.Context, callID string) ([]byte, error) {
	var data []byte
	req := &messages.FullResultRequest{CallID: callID}
	for {
		var page messages.FullResultReply
		if err := r.api.request(ctx, messages.EndpointCallsFullResult, req, &page, read, 0); err != nil {
			return nil, err
		}
		if page.Offset != int64(len(data)) || page.Size < page.Offset+int64(len(page.Data)) {
			return nil, fmt.Errorf("whole result of call %s: a page at byte %d of %d, after %d bytes read", callID, page.Offset, page.Size, len(data))
		}
		if data == nil {
			data = make([]byte, 0, page.Size)
		}
		data = append(data, page.Data...)
		if page.NextCursor == "" {
			if int64(len(data)) != page.Size {
				return nil, fmt.Errorf("whole result of call %s: %d bytes read of %d", callID, len(data), page.Size)
			}
			if sum := sha256.Sum256(data); page.Digest != "SHA-256="+base64.URLEncoding.EncodeToString(sum[:]) {
				return nil, fmt.Errorf("whole result of call %s: the bytes read do not match its digest %s", callID, page.Digest)
			}
			return data, nil
		}
		req.Cursor = page.NextCursor
	}
}

// lookupCall tells whether the call exists, as the events stream's leader
// or a coordinator says, with what a reply to its submit would hold; an
// error when neither answered.
func (r *callReads) lookupCall(ctx context.Context, ns, callID string) (*messages.SubmitReply, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, ledger.ResultCheckInterval)
	defer cancel()
	if r.api.readsViaCoordinator() {
		var info messages.CallInfo
		err := r.api.request(cctx, messages.EndpointCallsGet, &messages.GetCallRequest{CallID: callID}, &info, read, 0)
		switch {
		case errors.Is(err, messages.ErrCallNotFound):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		return &messages.SubmitReply{CallID: callID, State: info.State, Result: info.Result, Approval: info.Approval}, true, nil
	}
	snap, err := r.ledger.SnapshotIn(cctx, ns, callID)
	if err != nil {
		return nil, false, err
	}
	if !snap.Exists() {
		return nil, false, nil
	}
	reply := &messages.SubmitReply{CallID: callID, State: snap.State()}
	if snap.Result != nil {
		reply.Result = snap.Result.Result
	}
	return reply, true, nil
}

// fullResultFromStore reads a whole result from its results store.
func (r *callReads) fullResultFromStore(ctx context.Context, ref *messages.ObjectRef) ([]byte, error) {
	obj, err := r.js.ObjectStore(ctx, ref.Bucket)
	if err != nil {
		return nil, fmt.Errorf("results store %s: %w", ref.Bucket, err)
	}
	data, err := obj.GetBytes(ctx, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("result %s: %w", ref.Name, err)
	}
	return data, nil
}
