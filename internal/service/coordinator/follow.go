package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Reading and following calls through the coordinator: calls.get with a
// wait, calls.events, turns.get, each for the callers who may read them
// (with identities, the users of the call's or turn's agent, and
// operators), and each user's bound on the long waits it holds open.

// follower answers the reads that may wait: calls.get with a wait,
// calls.events and turns.get.
type follower struct {
	nc      *nats.Conn
	names   messages.Names
	ledger  *ledger.Ledger
	calls   *calls
	waits   *waitLimit
	maxWait time.Duration
	// feed, once enough waits are held, keeps the events of the calls
	// asked about, so that their waits walk the stream no more.
	feed *eventFeed
}

// DefaultMaxWaitsPerUser is Config.MaxWaitsPerUser's default.
const DefaultMaxWaitsPerUser = 256

// callOwner is the agent a call was submitted for: its queued request's,
// or, for a call held for an approval, the approval's.
func callOwner(snap *ledger.Snapshot) string {
	if q := snap.Queued; q != nil && q.Request != nil {
		return q.Request.Agent
	}
	if a := snap.Approval; a != nil && a.Approval != nil {
		return a.Approval.Agent
	}
	return ""
}

// mayReadCall refuses, with forbidden, a caller that may not act as the
// call's agent (see mayRead).
func mayReadCall(ctx context.Context, snap *ledger.Snapshot) error {
	return mayRead(ctx, "call "+snap.CallID, callOwner(snap))
}

// getCall answers calls.get: the call as it stands, after waiting up to
// wait_ms (and MaxWait) for its result when it has none yet.
func (f *follower) getCall(ctx context.Context, gr *messages.GetCallRequest) (*messages.CallInfo, error) {
	info, err := f.calls.get(ctx, gr)
	if err != nil || gr.WaitMS == 0 || info.Result != nil {
		return info, err
	}
	release, err := f.waits.hold(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	wctx, cancel := context.WithTimeout(ctx, min(time.Duration(gr.WaitMS)*time.Millisecond, f.maxWait))
	// No result within the wait is not an error: the reply says where the call stands.
	// The call's namespace, under which alone its result counts; a tool
	// name that does not parse leaves it to the ledger to find.
	tool, _ := messages.ParseToolName(info.Tool)
	res, _ := f.ledger.AwaitResult(wctx, messages.TurnBucket(info.Turn), tool.Namespace, gr.CallID)
	cancel()
	// A result the wait found may be one the replica that answers the
	// next read does not hold yet: that read then asks the leader.
	return f.calls.get(ctx, &messages.GetCallRequest{CallID: gr.CallID, Confirm: gr.Confirm || res != nil})
}

// callEvents answers calls.events: the call's events after the request's
// After, at once or, with wait_ms, as soon as there is one.
func (f *follower) callEvents(ctx context.Context, r *messages.CallEventsRequest) (*messages.CallEventsReply, error) {
	limit := r.Max
	if limit == 0 {
		limit = messages.DefaultCallEvents
	}
	snap, err := f.calls.snapshot(ctx, r.CallID)
	if err != nil {
		return nil, unavailable(err, "read call %s", r.CallID)
	}
	if !snap.Exists() {
		return nil, messages.Errorf(messages.CodeCallNotFound, "no call %s (calls are kept for %v)", r.CallID, f.calls.kept)
	}
	if err := mayReadCall(ctx, snap); err != nil {
		return nil, err
	}
	finishedBy := func(seq uint64) bool { return snap.Result != nil && snap.Result.Seq <= seq }
	var arrivals <-chan struct{}
	if r.WaitMS > 0 && !finishedBy(r.After) {
		leave := f.feed.enter()
		defer leave()
		events, ok, err := f.keptEvents(ctx, snap, r, limit)
		if err != nil {
			return nil, err
		}
		if ok {
			return eventsReply(r, events, finishedBy), nil
		}
		// Subscribed before the read, so that no event stored after it slips past.
		ch, stop, err := f.eventArrivals(r.CallID)
		if err != nil {
			return nil, err
		}
		defer stop()
		arrivals = ch
	}
	events, _, err := f.eventsAfter(ctx, snap.Bucket, snap.Namespace, r.CallID, r.After, limit)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 && arrivals != nil {
		release, err := f.waits.hold(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		if events, err = f.awaitEvents(ctx, snap.Bucket, snap.Namespace, r, limit, arrivals); err != nil {
			return nil, err
		}
	}
	return eventsReply(r, events, finishedBy), nil
}

// eventsReply is the reply to r with events, the call being finished by
// the event at a sequence when finishedBy says so.
func eventsReply(r *messages.CallEventsRequest, events []*ledger.Event, finishedBy func(seq uint64) bool) *messages.CallEventsReply {
	reply := &messages.CallEventsReply{CallID: r.CallID, Events: make([]messages.CallEvent, 0, len(events)), Last: r.After}
	for _, ev := range events {
		reply.Events = append(reply.Events, ev.CallEvent)
		reply.Last = ev.Seq
		reply.Finished = reply.Finished || ev.Kind == messages.EventResult
	}
	reply.Finished = reply.Finished || finishedBy(reply.Last)
	return reply
}

// keptEvents answers a waiting calls.events from the event feed when it
// runs: ok is false when the request must be answered by walking the
// stream. The call's first request through the feed walks once, which
// tells the feed from where it has every event of the call.
func (f *follower) keptEvents(ctx context.Context, snap *ledger.Snapshot, r *messages.CallEventsRequest, limit int) (events []*ledger.Event, ok bool, err error) {
	// The feed leaves queued events out: it answers only after the call's.
	if snap.Queued == nil || !f.feed.track(r.CallID, snap.Namespace, snap.Bucket, time.Now()) {
		return nil, false, nil
	}
	budget := replyBudget(f.nc)
	var changed <-chan struct{}
	if r.After >= snap.Queued.Seq {
		events, changed, ok = f.feed.after(r.CallID, r.After, limit, budget)
	}
	if !ok {
		walked, complete, err := f.eventsAfter(ctx, snap.Bucket, snap.Namespace, r.CallID, r.After, limit)
		if err != nil || len(walked) > 0 {
			f.feed.walked(r.CallID, r.After, walked, complete && err == nil)
			return walked, true, err
		}
		f.feed.walked(r.CallID, r.After, nil, complete)
		if events, changed, ok = f.feed.after(r.CallID, r.After, limit, budget); !ok {
			return nil, false, nil
		}
	}
	if len(events) > 0 {
		return events, true, nil
	}
	release, err := f.waits.hold(ctx)
	if err != nil {
		return nil, true, err
	}
	defer release()
	wctx, cancel := context.WithTimeout(ctx, min(time.Duration(r.WaitMS)*time.Millisecond, f.maxWait))
	defer cancel()
	for {
		select {
		case <-changed:
		case <-wctx.Done():
			return nil, true, nil
		}
		if events, changed, ok = f.feed.after(r.CallID, r.After, limit, budget); !ok {
			// The feed stopped, or forgot the call: the wait goes on
			// reading the stream.
			return nil, false, nil
		}
		if len(events) > 0 {
			return events, true, nil
		}
	}
}

// eventsAfter reads the call's events after a sequence, retrying while
// the events stream does not answer; complete is ledger.EventsAfter's.
func (f *follower) eventsAfter(ctx context.Context, bucket, ns, callID string, after uint64, limit int) (events []*ledger.Event, complete bool, err error) {
	err = f.calls.retry(ctx, func(ctx context.Context) (err error) {
		events, complete, err = f.ledger.EventsAfter(ctx, bucket, ns, callID, after, limit, replyBudget(f.nc))
		return err
	})
	return events, complete, unavailable(err, "read events of call %s", callID)
}

// replyBudget bounds the stored size of the events of one calls.events
// reply: half the server's maximum message, leaving room for a JSON
// reply's base64 and field names. A reply always holds at least one event.
func replyBudget(nc *nats.Conn) int { return int(nc.MaxPayload() / 2) }

// eventArrivals signals each event written for the call, as it is written.
func (f *follower) eventArrivals(callID string) (<-chan struct{}, func(), error) {
	filter, err := f.names.Filters().CallEvents(callID)
	if err != nil {
		return nil, nil, err
	}
	arrived := make(chan struct{}, 1)
	sub, err := f.nc.Subscribe(filter, func(*nats.Msg) {
		select {
		case arrived <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, nil, unavailable(err, "follow call %s", callID)
	}
	return arrived, func() { _ = sub.Unsubscribe() }, nil
}

// awaitEvents waits for the first events after r.After, until wait_ms (at
// most MaxWait) passes; none by then is an empty answer, not an error.
func (f *follower) awaitEvents(ctx context.Context, bucket, ns string, r *messages.CallEventsRequest, limit int, arrivals <-chan struct{}) ([]*ledger.Event, error) {
	wctx, cancel := context.WithTimeout(ctx, min(time.Duration(r.WaitMS)*time.Millisecond, f.maxWait))
	defer cancel()
	for {
		select {
		case <-arrivals:
			// A subscriber can see an event before the stream has stored
			// it: read it back a few times, soon.
			for pause := time.Millisecond; pause <= 128*time.Millisecond; pause *= 2 {
				events, _, err := f.eventsAfter(ctx, bucket, ns, r.CallID, r.After, limit)
				if err != nil || len(events) > 0 {
					return events, err
				}
				if transport.Sleep(wctx, pause) != nil {
					return nil, nil
				}
			}
		case <-wctx.Done():
			return nil, nil
		}
	}
}

// getTurn answers turns.get for a caller that may act as the turn's
// agent, and as the agent of each of its calls.
func (f *follower) getTurn(ctx context.Context, tr *messages.GetTurnRequest) (*messages.TurnInfo, error) {
	what := "turn " + tr.Turn
	if identityOf(ctx) != nil {
		t, err := f.calls.turns.load(ctx, tr.Turn)
		if err != nil {
			return nil, err
		}
		if t.state.Agent != "" {
			if err := mayRead(ctx, what, t.state.Agent); err != nil {
				return nil, err
			}
		}
	}
	info, err := f.calls.turn(ctx, tr.Turn)
	if err != nil {
		return nil, err
	}
	for _, call := range info.Calls {
		if err := mayRead(ctx, what, call.Agent); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// waitLimit counts the long waits each authenticated user holds open in
// this coordinator (Config.MaxWaitsPerUser).
type waitLimit struct {
	max  int
	mu   sync.Mutex
	held map[string]int
}

func newWaitLimit(max int) *waitLimit { return &waitLimit{max: max, held: map[string]int{}} }

// hold takes one of the caller's places for a long wait, or refuses with
// too_many_requests when the caller holds them all; release gives it
// back. Without identities there is no user to count, and no bound.
func (w *waitLimit) hold(ctx context.Context) (release func(), err error) {
	id := identityOf(ctx)
	if id == nil {
		return func() {}, nil
	}
	user := id.caller.String()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[user] >= w.max {
		return nil, messages.Errorf(messages.CodeTooManyRequests, "user %s already waits on %d requests, the most one user may; send it again once one has ended", id.caller.User, w.max)
	}
	w.held[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.held[user]--; w.held[user] == 0 {
				delete(w.held, user)
			}
		})
	}, nil
}
