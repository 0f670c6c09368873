package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/support/reuse"
	"github.com/toolbus/toolbus/internal/wire/ledger"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/toolformat"
	"github.com/toolbus/toolbus/pkg/toolschema"
)

// One model iteration in one request: calls.submit_batch reads the tool
// calls of a provider's response and submits each through the submit
// pipeline; calls.results waits for their results and renders them as
// the provider's next input. Reading the calls and rendering the results
// are pkg/toolformat's; the batch's room coordinates the rest.

// batches is the room of calls.submit_batch and calls.results.
type batches struct {
	nc        *nats.Conn
	names     messages.Names
	ledger    *ledger.Ledger
	calls     *calls
	submitter *submitPipeline
	// waits counts each user's long waits, as calls.get's are counted.
	waits    *waitLimit
	handlers *reuse.Pool
	maxWait  time.Duration
	log      *slog.Logger
}

// idempotencyKey is the key a batch's call is submitted with: the turn
// and the provider's tool-call ID, or, for a call without one, a digest
// of the response ID, the call's position in the batch, its name and its
// arguments.
func idempotencyKey(turn, responseID string, position int, tc *toolformat.Call) string {
	if tc.ID != "" {
		return turn + "/" + tc.ID
	}
	args := []byte(tc.Arguments)
	if decoded, err := policy.DecodeArguments(tc.Arguments); err == nil {
		args = []byte(policy.DigestOf(decoded))
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00", responseID, position, tc.Name)
	h.Write(args)
	return turn + "/#" + hex.EncodeToString(h.Sum(nil)[:16])
}

// submitBatch is calls.submit_batch: each tool call goes through the
// submit pipeline at once, as a submit of its own without wait, and the
// reply waits for all of them. A call's writes are published without
// waiting for those of the others (send awaits their acknowledgements
// on the ledger's goroutine). A call refused on its own (policy, exposure,
// schema, a name that is no tool) is answered as such; an error of
// JetStream or of the coordinator fails the request, which is safe to
// send again since every call has its idempotency key.
func (b *batches) submitBatch(ctx context.Context, req *request) (any, error) {
	var br messages.SubmitBatchRequest
	if err := req.decode(&br); err != nil {
		return nil, err
	}
	// The identity check reads the agent of a submit; a batch acts as its
	// agent as each of its submits does, and its notify is refused as theirs.
	probe := messages.SubmitRequest{Agent: br.Agent, Turn: br.Turn, Notify: br.Notify}
	ctx, err := req.admit(ctx, &probe)
	if err != nil {
		return nil, err
	}
	br.Agent = probe.Agent
	if err := br.Validate(); err != nil {
		return nil, err
	}
	format, field := br.ResultsFormat, "results_format"
	if format == "" {
		// The results are rendered in the batch's own format.
		format, field = br.Format, "format"
	}
	if _, ok := toolformat.RendererOf(format); !ok {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown %s %q; use one of %v", field, format, toolschema.Formats())
	}
	if br.WaitMS <= 0 {
		return b.submitBatchCalls(ctx, &br, req.Headers(), nil)
	}
	done, isCopy := req.takeHeld(ctx)
	if isCopy {
		return noReply{}, nil // the first's answer answers it
	}
	defer done()
	// The wait is held from the start, against the user's waits, and
	// bounded by MaxWait: the results may come before the batch's writes
	// are acknowledged, and are taken as they come.
	release, err := b.waits.hold(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { release() }()
	wctx, cancel := context.WithTimeout(ctx, min(time.Duration(br.WaitMS)*time.Millisecond, b.maxWait))
	defer cancel()
	var waits *copyWaits
	defer func() {
		if waits != nil {
			waits.stop()
		}
	}()
	out, err := b.submitBatchCalls(ctx, &br, req.Headers(), func(submits []*messages.SubmitRequest) error {
		waits, err = b.awaitCopies(wctx, submits)
		return err
	})
	if err != nil {
		return nil, err
	}
	if out.Results = b.renderFresh(ctx, out, format, waits); out.Results != nil {
		return out, nil
	}
	// A call the batch did not queue itself (a batch sent again): as
	// calls.results answers, for what is left of the wait.
	waits.stop()
	release()
	release = func() {}
	left := time.Until(deadlineOf(wctx))
	if wctx.Err() != nil || left < time.Millisecond {
		left = 0
	}
	if out.Results, err = b.results(ctx, &messages.ResultsRequest{Format: format, Calls: out.Calls, WaitMS: left.Milliseconds()}); err != nil {
		return nil, err
	}
	return out, nil
}

// deadlineOf is ctx's deadline; ctx has one.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// copyWaits waits, for each call a batch queues, for the copy of its
// committed result that the events stream republishes
// (messages.RouteNames.RepublishFrom), on a subscription made before the
// call is queued, so that no result slips past it: a result is taken
// without reading the stream (each wait also asks the stream now and then,
// Ledger.WaitOn). The waits go on while the batch's writes are
// acknowledged.
type copyWaits struct {
	subs []*nats.Subscription
	log  *slog.Logger
	wg   sync.WaitGroup
	mu   sync.Mutex
	// got holds the results that came, and stops each wait, by call ID.
	got   map[string]*messages.CallResult
	stops map[string]context.CancelFunc
}

// copySubject is the subject the events stream republishes the result of
// a call without a route to: its ID split after RouteLength characters,
// as messages.RouteNames.RepublishTo splits every result's,
// and the namespace that wrote it.
func copySubject(names messages.Names, callID, ns string) (string, bool) {
	if len(callID) <= messages.RouteLength {
		return "", false
	}
	return names.Prefix() + ".results." + callID[:messages.RouteLength] + "." + callID[messages.RouteLength:] + "." + ns, true
}

// awaitCopies subscribes to the result copies of the calls of submits
// (nil entries are calls refused already) and waits for them until ctx
// ends or stop.
func (b *batches) awaitCopies(ctx context.Context, submits []*messages.SubmitRequest) (*copyWaits, error) {
	w := &copyWaits{log: b.log, got: map[string]*messages.CallResult{}, stops: map[string]context.CancelFunc{}}
	for _, sr := range submits {
		if sr == nil || sr.IdempotencyKey == "" {
			continue
		}
		name, err := messages.ParseToolName(sr.Tool)
		if err != nil {
			continue // refused by its submit
		}
		id := messages.IdempotentCallID(sr.Agent, sr.IdempotencyKey)
		subject, ok := copySubject(b.names, id, name.Namespace)
		if !ok {
			continue
		}
		copies := make(chan *nats.Msg, 4)
		sub, err := b.nc.ChanSubscribe(subject, copies)
		if err != nil {
			w.stop()
			return nil, unavailable(err, "subscribe to results")
		}
		w.subs = append(w.subs, sub)
		cctx, stop := context.WithCancel(ctx)
		w.stops[id] = stop
		w.wg.Add(1)
		b.handlers.Go(func() {
			defer w.wg.Done()
			if res, err := b.ledger.WaitOn(cctx, messages.TurnBucket(sr.Turn), name.Namespace, id, copies); err == nil {
				w.mu.Lock()
				w.got[id] = res
				w.mu.Unlock()
			}
		})
	}
	return w, nil
}

// results ends the waits of all calls but keep, waits for those, and
// returns the results that came.
func (w *copyWaits) results(keep map[string]bool) map[string]*messages.CallResult {
	for id, stop := range w.stops {
		if !keep[id] {
			stop()
		}
	}
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got
}

// stop ends every wait and subscription.
func (w *copyWaits) stop() {
	for _, stop := range w.stops {
		stop()
	}
	w.wg.Wait()
	for _, sub := range w.subs {
		if err := sub.Unsubscribe(); err != nil {
			w.log.Debug("unsubscribe from result copies", "subject", sub.Subject, "error", err)
		}
	}
	w.subs = nil
}

// renderFresh renders a batch's calls as calls.results does once the
// calls it queued have ended or the wait has: the calls still unfinished
// then are read, as they are. It returns nil, waiting for nothing, when
// a call the batch accepted was not queued by it (a duplicate): that is
// calls.results' to answer.
func (b *batches) renderFresh(ctx context.Context, out *messages.SubmitBatchReply, format string, waits *copyWaits) *messages.ResultsReply {
	fresh := map[string]bool{}
	for _, bc := range out.Calls {
		switch {
		case bc.Error != nil, bc.State == messages.StateAwaitingApproval && !bc.Duplicate:
		case bc.State == messages.StateQueued && !bc.Duplicate && waits.stops[bc.CallID] != nil:
			fresh[bc.CallID] = true
		default:
			return nil
		}
	}
	got := waits.results(fresh)
	var still []string
	for id := range fresh {
		if got[id] == nil {
			still = append(still, id)
		}
	}
	snaps := map[string]*ledger.Snapshot{}
	if len(still) > 0 {
		if read, err := b.calls.snapshots(ctx, still...); err == nil {
			snaps = read
		}
	}
	res := &messages.ResultsReply{Calls: make([]messages.BatchCall, len(out.Calls)), Complete: true}
	outcomes := make([]toolformat.Outcome, len(out.Calls))
	for i, bc := range out.Calls {
		o := toolformat.Outcome{Call: bc}
		if r := got[bc.CallID]; r != nil && bc.CallID != "" {
			o.Call.State, o.Result, o.Tool = r.Status, r, r.Tool
		} else if s := snaps[bc.CallID]; s != nil && bc.CallID != "" {
			observe(&o, s)
		}
		if o.Result == nil && o.Call.Error == nil {
			res.Complete = false
		}
		outcomes[i], res.Calls[i] = o, o.Call
	}
	// The reply holds the calls twice: as the batch's and as the results'.
	render, _ := toolformat.RendererOf(format)
	res.Messages = toolformat.Fit(render, outcomes, b.messagesBudget(2*encodedSize(out.Calls)))
	return res
}

// SubmitBatch checks and queues the tool calls of one model iteration, as
// calls.submit_batch does; headers carry the caller's trace context.
func (c *Coordinator) SubmitBatch(ctx context.Context, br *messages.SubmitBatchRequest, headers map[string][]string) (*messages.SubmitBatchReply, error) {
	return c.batches.submitBatchCalls(ctx, br, headers, nil)
}

// submitBatchCalls is SubmitBatch; before, when set, is given the submits
// before any is run (nil for a call refused already).
func (b *batches) submitBatchCalls(ctx context.Context, br *messages.SubmitBatchRequest, headers map[string][]string, before func(submits []*messages.SubmitRequest) error) (*messages.SubmitBatchReply, error) {
	calls, responseID, err := toolformat.Read(br.Format, br.ToolCalls)
	if err != nil {
		return nil, err
	}
	if br.ResponseID != "" {
		responseID = br.ResponseID
	}
	// Claimed once for the batch, the turn's owner is remembered, and each
	// call's own claim reads nothing: the calls do not race to create the
	// turn. The claim goes on while the calls are read and checked; each
	// call waits for it before anything of the call is decided or written.
	claimed := make(chan struct{})
	b.handlers.Go(func() {
		defer close(claimed)
		b.claimBatchTurn(ctx, br.Turn, br.Agent)
	})
	out := &messages.SubmitBatchReply{Calls: make([]messages.BatchCall, len(calls))}
	submits := make([]*messages.SubmitRequest, len(calls))
	for i := range calls {
		tc := &calls[i]
		out.Calls[i] = messages.BatchCall{ToolCallID: tc.ID, Name: tc.Name}
		if tc.Refused != nil {
			out.Calls[i].Error = tc.Refused
			continue
		}
		submits[i] = &messages.SubmitRequest{
			Tool:           tc.Name,
			Arguments:      tc.Arguments,
			Agent:          br.Agent,
			Turn:           br.Turn,
			IdempotencyKey: idempotencyKey(br.Turn, responseID, i, tc),
			TimeoutMS:      br.TimeoutMS,
			Notify:         br.Notify,
		}
	}
	if before != nil {
		if err := before(submits); err != nil {
			<-claimed
			return nil, err
		}
	}
	// The claim's reads and writes end with ctx.
	claimTurn := func(ctx context.Context) error {
		<-claimed
		if ts := b.submitter.turns; ts != nil {
			return ts.claimForCall(ctx, br.Turn, br.Agent)
		}
		return nil
	}
	defer func() { <-claimed }()
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, sr := range submits {
		if sr == nil {
			continue
		}
		answer := func(reply *messages.SubmitReply, err error) {
			errs[i] = settleBatchCall(&out.Calls[i], reply, err)
			wg.Done()
		}
		wg.Add(1)
		// On a goroutine of the handlers, as a single submit runs: its
		// stack has grown already, where a new goroutine's would grow by
		// copying on every call (see reuse).
		b.handlers.Go(func() {
			reply, pending, err := b.submitter.runClaimed(ctx, sr, headers, answer, claimTurn)
			if !pending {
				answer(reply, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// claimBatchTurn claims a batch's turn for its agent before its calls
// do. A turn the coordinator has not seen is most often new: it is
// created with its agent at once, and read only if it exists. A claim
// that fails is left to each call's own claim to report.
func (b *batches) claimBatchTurn(ctx context.Context, turn, agent string) {
	ts := b.submitter.turns
	if ts == nil || turn == "" || agent == "" {
		return
	}
	if _, known := ts.owner(turn); known {
		return
	}
	if err := ts.save(ctx, &turnRecord{state: messages.TurnState{Turn: turn, Agent: agent}}); err == nil {
		ts.remember(turn, agent)
		return
	}
	_ = ts.claimForCall(ctx, turn, agent)
}

// settleBatchCall fills in one call of a batch's reply from its submit's
// outcome, and returns the error that fails the whole batch, if any.
func settleBatchCall(bc *messages.BatchCall, reply *messages.SubmitReply, err error) error {
	if err != nil {
		e := messages.AsError(err)
		switch e.Code {
		case messages.CodeUnavailable, messages.CodeTimeout, messages.CodeInternal, messages.CodeForbidden:
			return err
		}
		bc.Error = e
		return nil
	}
	bc.CallID, bc.State, bc.Duplicate, bc.Approval = reply.CallID, reply.State, reply.Duplicate, reply.Approval
	return nil
}

// results is calls.results: it reads the calls, waits up to the request's
// wait (at most MaxWait) for those queued or running, and renders every
// call as the provider's next input. A call that waits for an approval is
// rendered as such at once; a refused call (the batch's error) as an
// error result.
func (b *batches) results(ctx context.Context, rr *messages.ResultsRequest) (*messages.ResultsReply, error) {
	render, ok := toolformat.RendererOf(rr.Format)
	if !ok {
		return nil, messages.Errorf(messages.CodeBadRequest, "unknown format %q; use one of %v", rr.Format, toolschema.Formats())
	}
	var ids []string
	seen := map[string]bool{}
	for _, bc := range rr.Calls {
		if bc.CallID != "" && !seen[bc.CallID] {
			seen[bc.CallID] = true
			ids = append(ids, bc.CallID)
		}
	}
	wait := min(time.Duration(rr.WaitMS)*time.Millisecond, b.maxWait)
	var watch *resultWatch
	if wait > 0 && len(ids) > 0 {
		// Subscribed before the calls are read, so that a result written
		// after the read cannot slip past the wait.
		var err error
		if watch, err = b.watchResults(ids); err != nil {
			return nil, err
		}
		defer watch.stop()
	}
	snaps := map[string]*ledger.Snapshot{}
	if len(ids) > 0 {
		var err error
		if snaps, err = b.calls.snapshots(ctx, ids...); err != nil {
			return nil, unavailable(err, "read calls")
		}
	}
	for _, s := range snaps {
		if s.Exists() {
			if err := mayReadCall(ctx, s); err != nil {
				return nil, err
			}
		}
	}
	var unfinished []string
	for _, id := range ids {
		if s := snaps[id]; s != nil && s.Exists() && (s.State() == messages.StateQueued || s.State() == messages.StateRunning) {
			unfinished = append(unfinished, id)
		}
	}
	if wait > 0 && len(unfinished) > 0 {
		// A held wait, counted against the user's as calls.get's is.
		release, err := b.waits.hold(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		got := b.awaitResults(ctx, snaps, unfinished, wait, watch)
		var still []string
		for _, id := range unfinished {
			if res := got[id]; res != nil {
				snaps[id].Result = &ledger.Event{CallEvent: messages.CallEvent{CallID: id, Kind: messages.EventResult, Result: res}}
			} else {
				still = append(still, id)
			}
		}
		if len(still) > 0 {
			// Queued calls may have started meanwhile.
			if later, err := b.calls.snapshots(ctx, still...); err == nil {
				maps.Copy(snaps, later)
			}
		}
	}
	out := &messages.ResultsReply{Calls: make([]messages.BatchCall, len(rr.Calls)), Complete: true}
	outcomes := make([]toolformat.Outcome, len(rr.Calls))
	for i, bc := range rr.Calls {
		o := toolformat.Outcome{Call: bc}
		if bc.CallID != "" {
			o.Call.Error = nil
			observe(&o, snaps[bc.CallID])
		}
		if o.Result == nil && o.Call.Error == nil {
			out.Complete = false
		}
		outcomes[i], out.Calls[i] = o, o.Call
	}
	// Room for the calls twice: a batch sent again with wait_ms replies
	// with its calls beside these results.
	out.Messages = toolformat.Fit(render, outcomes, b.messagesBudget(2*encodedSize(out.Calls)))
	return out, nil
}

// replySlack is room kept in a reply for its headers and encoding.
const replySlack = 8 << 10

// messagesBudget is how many bytes of rendered messages a reply can hold
// beside calls bytes of calls: what one message may carry on the
// coordinator's connection (the server's max_payload).
func (b *batches) messagesBudget(calls int) int {
	return int(b.nc.MaxPayload()) - calls - replySlack
}

// resultWatch holds a subscription per call to the writes of its result
// under any namespace: a call's namespace is known only once it is read,
// and the wait counts a write under another one as no result (see
// Ledger.WaitForWrite, which reads the committed result under the call's).
type resultWatch struct {
	writes map[string]chan *nats.Msg
	subs   []*nats.Subscription
	log    *slog.Logger
}

// watchResults subscribes to the result writes of calls.
func (b *batches) watchResults(callIDs []string) (*resultWatch, error) {
	w := &resultWatch{writes: make(map[string]chan *nats.Msg, len(callIDs)), log: b.log}
	for _, id := range callIDs {
		subject, err := b.names.Filters().CallKind(id, messages.EventResult)
		if err != nil {
			w.stop()
			return nil, err
		}
		writes := make(chan *nats.Msg, 4)
		sub, err := b.nc.ChanSubscribe(subject, writes)
		if err != nil {
			w.stop()
			return nil, unavailable(err, "subscribe to results")
		}
		w.writes[id], w.subs = writes, append(w.subs, sub)
	}
	return w, nil
}

func (w *resultWatch) stop() {
	for _, sub := range w.subs {
		if err := sub.Unsubscribe(); err != nil {
			w.log.Debug("unsubscribe from result", "subject", sub.Subject, "error", err)
		}
	}
}

// Rereads of a results wait: a result written before the wait's
// subscriptions were made reaches none of them, and the stream may store
// it only after the calls were read, so the calls still unfinished are
// read again, in one batched read, after pauses of 1, 2, 4 … up to
// maxRecheckPause; the wait of each (Ledger.WaitForWrite) looks again
// only every ledger.ResultCheckInterval.
const maxRecheckPause = 128 * time.Millisecond

// awaitResults waits up to wait for the results of calls, on watch's
// subscriptions to their writes and reading them again soon (see
// maxRecheckPause), and returns those that came.
func (b *batches) awaitResults(ctx context.Context, snaps map[string]*ledger.Snapshot, callIDs []string, wait time.Duration, watch *resultWatch) map[string]*messages.CallResult {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	q := b.submitter.queue
	var mu sync.Mutex
	got := make(map[string]*messages.CallResult, len(callIDs))
	stops := make(map[string]context.CancelFunc, len(callIDs))
	var wg sync.WaitGroup
	for _, id := range callIDs {
		ns, bucket := snaps[id].Namespace, snaps[id].Bucket // the call's: only a result under them counts
		writes := watch.writes[id]
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		stops[id] = stop
		wg.Add(1)
		b.handlers.Go(func() {
			defer wg.Done()
			if res, err := q.reads.WaitForWrite(wctx, bucket, ns, id, writes); err == nil {
				mu.Lock()
				got[id] = res
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for pause := time.Millisecond; pause <= maxRecheckPause; pause *= 2 {
		t := time.NewTimer(pause)
		select {
		case <-done:
			t.Stop()
			return got
		case <-t.C:
		}
		mu.Lock()
		var pending []string
		for _, id := range callIDs {
			if got[id] == nil {
				pending = append(pending, id)
			}
		}
		mu.Unlock()
		later, err := b.ledger.Snapshots(ctx, pending...)
		if err != nil {
			continue
		}
		for id, s := range later {
			if s.Namespace != snaps[id].Namespace || s.Result == nil || s.Result.Result == nil {
				continue
			}
			mu.Lock()
			if got[id] == nil {
				got[id] = s.Result.Result
			}
			mu.Unlock()
			stops[id]()
		}
	}
	<-done
	return got
}

// observe takes o's state from the call's snapshot.
func observe(o *toolformat.Outcome, s *ledger.Snapshot) {
	if s == nil || !s.Exists() {
		o.Call.State = ""
		o.Call.Error = messages.Errorf(messages.CodeCallNotFound, "no call %s", o.Call.CallID)
		return
	}
	o.Call.State, o.Call.Approval = s.State(), nil
	if s.Queued != nil && s.Queued.Request != nil {
		o.Tool = s.Queued.Request.Tool
	}
	if s.Result != nil && s.Result.Result != nil {
		o.Result = s.Result.Result
		o.Call.State = o.Result.Status
		if o.Tool == "" {
			o.Tool = o.Result.Tool
		}
	} else if o.Call.State == messages.StateAwaitingApproval && s.Approval != nil {
		o.Call.Approval = s.Approval.Approval
	}
}

// encodedSize is the size of v as compact JSON without HTML escaping,
// as rendered messages are encoded.
func encodedSize(v any) int {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return 0
	}
	return buf.Len() - 1
}
