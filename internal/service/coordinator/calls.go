package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

// calls answers for calls once they are submitted: their state, their
// cancellation, and the calls of a turn.
type calls struct {
	ledger *ledger.Ledger
	turns  *turns
	// approvals withdraws the pending approval of a call cancelled
	// before anyone decided.
	approvals *approvals
	nc        *nats.Conn
	// js reads the namespaces' consumers: whether a call was delivered.
	js    jetstream.JetStream
	names messages.Names
	// kept is how long the ledger keeps a call's events.
	kept time.Duration
	// wait bounds the retries of a read while JetStream does not answer
	// (Config.UnavailableWait); 0 is DefaultUnavailableWait.
	wait time.Duration
	log  *slog.Logger
}

// snapshots reads the latest events of calls, retrying while the events
// stream does not answer.
func (cs *calls) snapshots(ctx context.Context, callIDs ...string) (map[string]*ledger.Snapshot, error) {
	var snaps map[string]*ledger.Snapshot
	err := cs.retry(ctx, func(ctx context.Context) (err error) {
		snaps, err = cs.ledger.Snapshots(ctx, callIDs...)
		return err
	})
	return snaps, err
}

// retry runs op as retryTransient does, within cs.wait.
func (cs *calls) retry(ctx context.Context, op func(ctx context.Context) error) error {
	wait := cs.wait
	if wait <= 0 {
		wait = DefaultUnavailableWait
	}
	return retryTransient(ctx, wait, op)
}

// snapshot is snapshots of one call.
func (cs *calls) snapshot(ctx context.Context, callID string) (*ledger.Snapshot, error) {
	snaps, err := cs.snapshots(ctx, callID)
	if err != nil {
		return nil, err
	}
	return snaps[callID], nil
}

// get answers calls.get.
func (cs *calls) get(ctx context.Context, gr *messages.GetCallRequest) (*messages.CallInfo, error) {
	if err := messages.ValidateID("call ID", gr.CallID); err != nil {
		return nil, err
	}
	snap, err := cs.snapshot(ctx, gr.CallID)
	if err != nil {
		return nil, unavailable(err, "read call %s", gr.CallID)
	}
	if !snap.Exists() {
		return nil, messages.Errorf(messages.CodeCallNotFound, "no call %s (calls are kept for %v)", gr.CallID, cs.kept)
	}
	if err := mayReadCall(ctx, snap); err != nil {
		return nil, err
	}
	if gr.Confirm && snap.Result == nil {
		if err := cs.retry(ctx, func(ctx context.Context) error { return cs.ledger.ConfirmResult(ctx, snap) }); err != nil {
			return nil, unavailable(err, "read call %s", gr.CallID)
		}
	}
	info := callInfo(snap)
	return &info, nil
}

// cancel cancels a call (the calls.cancel endpoint). A queued call gets
// its cancelled result here, and the worker its queued event is delivered
// to finds that result and does not run it; a call awaiting an approval
// gets it too, and its approval is withdrawn (approvals.withdraw); a running call
// gets a durable cancel record and a signal to its worker, which writes the
// result; a finished call keeps its result.
func (cs *calls) cancel(ctx context.Context, cr *messages.CancelRequest) (*messages.CancelReply, error) {
	if err := messages.ValidateID("call ID", cr.CallID); err != nil {
		return nil, err
	}
	info := &messages.CancelInfo{Reason: cr.Reason, By: cr.By}
	if info.Reason == "" {
		info.Reason = "cancelled by request"
	}
	for range 10 {
		snap, err := cs.snapshot(ctx, cr.CallID)
		if err != nil {
			return nil, unavailable(err, "read call %s", cr.CallID)
		}
		if !snap.Exists() {
			return nil, messages.Errorf(messages.CodeCallNotFound, "no call %s", cr.CallID)
		}
		if err := mayReadCall(ctx, snap); err != nil {
			return nil, err
		}
		reply := &messages.CancelReply{CallID: cr.CallID}
		if snap.Result == nil && snap.Started == nil && snap.State() == messages.StateAwaitingApproval && cs.approvals != nil {
			res, err := cs.approvals.withdraw(ctx, cr.CallID, info)
			switch {
			case errors.Is(err, errNotWithdrawn):
				// Decided meanwhile: cancelled as a queued call, below.
			case err != nil:
				return nil, err
			case res.Status == messages.StateCancelled:
				reply.Outcome, reply.State, reply.Result = messages.CancelDone, res.Status, res
				return reply, nil
			default:
				reply.Outcome, reply.State, reply.Result = messages.CancelTooLate, res.Status, res
				return reply, nil
			}
		}
		switch {
		case snap.Result != nil:
			reply.Outcome, reply.State, reply.Result = messages.CancelTooLate, snap.State(), snap.Result.Result
			return reply, nil
		case snap.Started == nil:
			// The notice goes first, then the consumer says whether the
			// queued event was delivered: if not, every worker hears the
			// notice before the call reaches it, and none runs it (see
			// docs/reliability.md, "Cancel before run"); if so, a worker
			// may hold it, and decides.
			if err := cs.notify(ctx, snap, info); err != nil {
				return nil, unavailable(err, "cancel call %s", cr.CallID)
			}
			var delivered bool
			if err := cs.retry(ctx, func(ctx context.Context) (err error) {
				delivered, err = cs.delivered(ctx, snap)
				return err
			}); err != nil {
				return nil, unavailable(err, "cancel call %s", cr.CallID)
			}
			if delivered {
				if err := cs.requestCancel(ctx, snap, info); err != nil {
					return nil, err
				}
				reply.Outcome, reply.State = messages.CancelSignalled, snap.State()
				return reply, nil
			}
			res := cancelledResult(snap, info)
			notify := ""
			if snap.Queued != nil && snap.Queued.Request != nil {
				notify = snap.Queued.Request.Notify
			}
			// A retried commit whose first attempt was stored unanswered
			// finds the call changed, and the next round finds its result.
			err := cs.retry(ctx, func(ctx context.Context) error {
				return cs.ledger.CommitIfUnchanged(ctx, snap.Bucket, snap.Namespace, &res, snap.ChangeSeq(), notify)
			})
			if errors.Is(err, ledger.ErrChanged) {
				continue // a worker started it meanwhile
			}
			if err != nil {
				return nil, unavailable(err, "cancel call %s", cr.CallID)
			}
			reply.Outcome, reply.State, reply.Result = messages.CancelDone, messages.StateCancelled, &res
			return reply, nil
		default:
			if err := cs.requestCancel(ctx, snap, info); err != nil {
				return nil, err
			}
			cs.signalCancel(snap, info)
			reply.Outcome, reply.State = messages.CancelSignalled, messages.StateRunning
			return reply, nil
		}
	}
	return nil, messages.Errorf(messages.CodeConflict, "call %s kept changing; try again", cr.CallID)
}

// requestCancel stores the call's cancel event, unless it has one: what
// a worker holding the call, or taking it again, finds.
func (cs *calls) requestCancel(ctx context.Context, snap *ledger.Snapshot, info *messages.CancelInfo) error {
	if snap.Cancel != nil {
		return nil
	}
	ev := &messages.CallEvent{CallID: snap.CallID, Kind: messages.EventCancel, Time: time.Now().UTC(), Cancel: info}
	// A cancel event stored twice is the same request twice.
	if err := cs.retry(ctx, func(ctx context.Context) error {
		_, err := cs.ledger.Append(ctx, snap.Bucket, snap.Namespace, ev)
		return err
	}); err != nil {
		return unavailable(err, "cancel call %s", snap.CallID)
	}
	return nil
}

// notify sends the call's cancel notice to its namespace's workers and
// waits until the server has it (a flush): from then on, the server
// delivers the notice to every worker subscribed before anything it sends
// them later.
func (cs *calls) notify(ctx context.Context, snap *ledger.Snapshot, info *messages.CancelInfo) error {
	if !cs.signalCancel(snap, info) {
		return errors.New("the cancel notice could not be sent")
	}
	fctx, cancel := context.WithTimeout(ctx, cs.waitBound())
	defer cancel()
	return cs.nc.FlushWithContext(fctx)
}

// delivered tells whether the call's queued event was delivered by its
// namespace's consumer: whether a worker may hold it. A namespace without
// a consumer delivered nothing.
func (cs *calls) delivered(ctx context.Context, snap *ledger.Snapshot) (bool, error) {
	if snap.Queued == nil {
		return false, nil
	}
	durable, err := cs.names.Consumers().Durable(snap.Namespace)
	if err != nil {
		return false, err
	}
	c, err := cs.js.Consumer(ctx, cs.names.EventsStream(), durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return c.CachedInfo().Delivered.Stream >= snap.Queued.Seq, nil
}

// waitBound is cs.wait or its default.
func (cs *calls) waitBound() time.Duration {
	if cs.wait > 0 {
		return cs.wait
	}
	return DefaultUnavailableWait
}

// signalCancel tells the namespace's workers that the call is cancelled:
// the one that holds it stops it, and one that takes it later does not
// run it. The notice carries the call's deadline, until which workers
// keep it. It reports whether the notice was sent.
func (cs *calls) signalCancel(snap *ledger.Snapshot, info *messages.CancelInfo) bool {
	if snap.Queued == nil || snap.Queued.Request == nil {
		return false
	}
	subject, err := cs.names.CancelSubject(snap.Queued.Request.Namespace, snap.CallID)
	if err != nil {
		return false
	}
	msg, err := newMsg(subject, info)
	if err != nil {
		return false
	}
	if d := snap.Queued.Request.Deadline; !d.IsZero() {
		msg.Header.Set(messages.HeaderDeadline, d.UTC().Format(time.RFC3339Nano))
	}
	if err := cs.nc.PublishMsg(msg); err != nil {
		cs.log.Warn("cancel signal not sent", "call", snap.CallID, "error", err)
		return false
	}
	return true
}

func cancelledResult(snap *ledger.Snapshot, info *messages.CancelInfo) messages.CallResult {
	res := messages.CallResult{
		CallID:     snap.CallID,
		Status:     messages.StateCancelled,
		IsError:    true,
		Content:    []messages.ContentBlock{messages.TextBlock("the call was cancelled before it started: " + info.Reason)},
		Error:      &messages.ResultError{Code: messages.ResultCancelled, Message: info.Reason},
		FinishedAt: time.Now().UTC(),
	}
	if q := snap.Queued; q != nil && q.Request != nil {
		res.Tool, res.QueuedAt = q.Request.Tool, q.Request.QueuedAt
	}
	return res
}

// turn returns a turn's calls with their states and results, oldest first
// (turns.get).
func (cs *calls) turn(ctx context.Context, turn string) (*messages.TurnInfo, error) {
	out, ids, err := cs.turns.info(ctx, turn)
	if err != nil {
		return nil, err
	}
	snaps, err := cs.snapshots(ctx, ids...)
	if err != nil {
		return nil, unavailable(err, "read calls of turn %s", turn)
	}
	for _, id := range ids {
		if s := snaps[id]; s != nil && s.Exists() {
			out.Calls = append(out.Calls, callInfo(s))
		}
	}
	slices.SortFunc(out.Calls, func(a, b messages.CallInfo) int {
		if d := a.QueuedAt.Compare(b.QueuedAt); d != 0 {
			return d
		}
		return strings.Compare(a.CallID, b.CallID)
	})
	return out, nil
}
