package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/pkg/messages"
)

// resultWait is one wait for a call's result: the messages on the call's
// result subject (or the copies sent to its notify subject) that the
// waiter passes, and, for a result written before it listened or missed
// during a reconnect, a look at the stream at first and every
// ResultCheckInterval, at the stream's leader now and then
// (LeaderChecks). It holds no consumer on the server.
type resultWait struct {
	r          *reader
	reconnects *reconnects
	// bucket and ns are the call's, empty until its queued event tells
	// them when the waiter did not know them.
	bucket, ns, callID string
}

// newResultWait returns a wait for the result of a call of namespace ns
// under bucket, or, if either is empty, of the ones its queued event names.
func newResultWait(r *reader, reconnects *reconnects, bucket, ns, callID string) *resultWait {
	if ns == "" || bucket == "" {
		ns, bucket = "", ""
	}
	return &resultWait{r: r, reconnects: reconnects, bucket: bucket, ns: ns, callID: callID}
}

// run waits for a message on results, then returns the result. Copies
// sent to a notify subject are sent only once committed; a message seen
// on the result subject itself is any attempt's write, which JetStream
// may have refused, so the committed result is read from the stream.
func (w *resultWait) run(ctx context.Context, results <-chan *nats.Msg, checkFirst, committed bool) (*messages.CallResult, error) {
	if checkFirst {
		if res, ok, _ := w.check(ctx, false); ok {
			return res, nil
		}
	}
	if committed {
		// Often the result is already there: no ticker for that.
		select {
		case msg := <-results:
			if res := w.committedResult(msg); res != nil {
				return res, nil
			}
		default:
		}
	}
	t := time.NewTicker(ResultCheckInterval)
	defer t.Stop()
	var checks LeaderChecks
	reconnected := w.reconnects.next()
	for {
		select {
		case <-reconnected:
			// A result sent while the connection was away is lost: look
			// now, at the leader, and again at the next checks.
			reconnected = w.reconnects.next()
			checks.Restart()
			confirm := checks.Next()
			res, ok, err := w.check(ctx, confirm)
			if ok {
				return res, nil
			}
			if err != nil {
				checks.Failed(confirm)
			}
		case msg := <-results:
			if !committed {
				// Subscribers can see a write before the stream has stored
				// it: read it back a few times, soon.
				for pause := time.Millisecond; pause <= 128*time.Millisecond; pause *= 2 {
					if res, ok, _ := w.check(ctx, false); ok {
						return res, nil
					}
					if err := Sleep(ctx, pause); err != nil {
						return nil, fmt.Errorf("wait for call %s: %w", w.callID, err)
					}
				}
				continue
			}
			if res := w.committedResult(msg); res != nil {
				return res, nil
			}
		case <-t.C:
			confirm := checks.Next()
			res, ok, err := w.check(ctx, confirm)
			if ok {
				return res, nil
			}
			if err != nil {
				checks.Failed(confirm)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for call %s: %w", w.callID, ctx.Err())
		}
	}
}

// check reports the result, or whether the read failed. A read retries
// transient failures; a check gives up at the next one, so that the
// messages on results are not left waiting. A result not found is looked
// for again at the next check; the leader is asked to confirm it only
// when confirm is set.
func (w *resultWait) check(ctx context.Context, confirm bool) (*messages.CallResult, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, ResultCheckInterval)
	defer cancel()
	if w.ns == "" {
		// The call's namespace is its queued event's: one batched read
		// finds both, for every reader of events (an account that
		// imports the direct gets included).
		m, err := w.r.snapshots(cctx, w.r.eventsOwnReply, "", []string{w.callID}, true)
		if err != nil {
			return nil, false, err
		}
		s := m[w.callID]
		w.ns, w.bucket = s.Namespace, s.Bucket
		if s.Result != nil && s.Result.Result != nil {
			return s.Result.Result, true, nil
		}
		return nil, false, nil
	}
	ev, err := w.r.last(cctx, w.bucket, w.ns, w.callID, messages.EventResult, confirm)
	if err == nil && ev != nil && ev.Result != nil {
		return ev.Result, true, nil
	}
	return nil, false, err
}

// committedResult is the result a message on results carries, if it is
// the call's own.
func (w *resultWait) committedResult(msg *nats.Msg) *messages.CallResult {
	if evNS := w.r.names.Events().Namespace(msg.Subject); evNS != "" && (evNS != w.ns || w.r.names.Events().Bucket(msg.Subject) != w.bucket) {
		// Written under another namespace or bucket (or ones not known
		// yet): not the call's.
		return nil
	}
	var ev messages.CallEvent
	if _, err := messages.DecodeStored(messages.Header(msg.Header), msg.Data, &ev); err != nil {
		return nil
	}
	// Whoever may publish to the subject could send anything there: only
	// this call's result counts.
	if ev.Kind != messages.EventResult || ev.CallID != w.callID || ev.Result == nil || ev.Result.CallID != w.callID {
		return nil
	}
	return ev.Result
}
