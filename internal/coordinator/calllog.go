package coordinator

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/transport"
	"github.com/toolbus/toolbus/pkg/catalog"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
)

// The execution log (calls.list) is read from the events stream itself:
// no write per call serves it. A page is found by reading the stream
// backwards from the newest event (or the cursor) in windows of
// consecutive sequences, each one batched direct get without a subject
// filter, and keeping the queued events that match. Only the server's
// cheapest reads are used: a batched get filtered by a wildcard subject
// makes the server count the matching messages from its start to the
// stream's end, which in a stream of millions of calls costs more than
// reading the window itself. The page's calls are then read with one
// batched multi-last get (ledger.Snapshots), as calls.get reads one.

const (
	// CallsListScanBudget bounds the events one calls.list request reads
	// while it looks for its page. When it runs out first, the reply holds
	// the matches found so far and a cursor that continues the scan.
	CallsListScanBudget = 50_000
	// callsListMaxWindow is the most events one read of the scan asks
	// for; the first read asks for a few per call of the page, and each
	// next one for twice as many.
	callsListMaxWindow = 4096
	// callsListCursorPrefix starts every cursor: the version of its form.
	callsListCursorPrefix = "v1."
)

// callLog answers calls.list for one request.
type callLog struct {
	names   messages.Names
	js      jetstream.JetStream
	events  *transport.Stream
	ledger  *ledger.Ledger
	catalog *catalog.View
	// wait bounds the retries of a read while JetStream does not answer.
	wait time.Duration
	// budget is CallsListScanBudget; tests make it smaller.
	budget int
}

// listCalls is calls.list: a page of the execution log, newest call first.
func (c *Coordinator) listCalls(ctx context.Context, r *messages.CallsListRequest) (*messages.CallsListReply, error) {
	l := &callLog{
		names:  c.names,
		js:     c.js,
		events: transport.NewStream(c.nc, nil, c.names.EventsStream()),
		ledger: c.ledger,
		wait:   c.cfg.UnavailableWait,
		budget: CallsListScanBudget,
	}
	if c.view != nil {
		l.catalog = c.view.catalog
	}
	return l.list(ctx, r)
}

// logCandidate is a queued event that passed the request's filters.
type logCandidate struct {
	seq    uint64
	callID string
	ns     string
}

// seenResult is a result event the scan read: the state it gives its
// call, if it was written under the call's namespace.
type seenResult struct {
	ns     string
	status messages.CallState
}

// logFilter is a calls.list request as the scan applies it.
type logFilter struct {
	*messages.CallsListRequest
	// tool is the request's tool in its canonical spelling.
	tool string
	// decode tells that a queued event's payload is needed to decide:
	// a filter on agent, turn or tool, or a caller who sees only its own
	// agents' calls.
	decode bool
	// ownAgents limits the calls to those of agents the caller may act as.
	ownAgents bool
}

func (l *callLog) list(ctx context.Context, r *messages.CallsListRequest) (*messages.CallsListReply, error) {
	if r.Agent != "" {
		if err := mayActFor(ctx, r.Agent); err != nil {
			return nil, err
		}
	}
	f := logFilter{CallsListRequest: r}
	if r.Tool != "" {
		name, err := messages.ParseToolName(r.Tool)
		if err != nil {
			return nil, messages.Errorf(messages.CodeBadRequest, "tool: %v", err)
		}
		f.tool = name.String()
	}
	if id := identityOf(ctx); id != nil && !id.user.Operator {
		f.ownAgents = true
	}
	f.decode = f.ownAgents || r.Agent != "" || r.Turn != "" || f.tool != ""
	limit := r.Limit
	if limit == 0 {
		limit = messages.DefaultCallsListLimit
	}

	first, last, err := l.bounds(ctx)
	if err != nil {
		return nil, err
	}
	reply := &messages.CallsListReply{Calls: []messages.CallLogEntry{}}
	if last == 0 {
		return reply, nil // nothing was ever stored
	}
	// The scan reads [floor, top), from top down.
	top, floor := last+1, max(first, 1)
	if r.Cursor != "" {
		seq, err := parseCallsListCursor(r.Cursor)
		if err != nil {
			return nil, err
		}
		if seq > top {
			return nil, messages.Errorf(messages.CodeBadRequest, "cursor %q is past the end of the execution log: pass the next_cursor of a reply unchanged", r.Cursor)
		}
		top = seq
	}
	// The queued records are stored in time order: since and until are
	// sequences of the stream.
	if !r.Until.IsZero() {
		seq, err := l.seqAt(ctx, r.Until, last)
		if err != nil {
			return nil, err
		}
		top = min(top, seq)
	}
	if !r.Since.IsZero() {
		seq, err := l.seqAt(ctx, r.Since, last)
		if err != nil {
			return nil, err
		}
		floor = max(floor, seq)
	}

	// One match more than the page tells whether an older one exists.
	want := limit + 1
	var found []logCandidate
	var results map[string][]seenResult
	if len(r.States) > 0 {
		results = make(map[string][]seenResult)
	}
	hi, window, scanned := top, uint64(4*want+64), 0
	for hi > floor && len(found) < want && scanned < l.budget {
		span := min(window, hi-floor, uint64(l.budget-scanned))
		lo := hi - span
		cands, err := l.scanWindow(ctx, lo, hi, &f, results)
		if err != nil {
			return nil, err
		}
		scanned += int(span)
		if len(r.States) > 0 {
			if cands, err = l.keepByState(ctx, r, cands, results); err != nil {
				return nil, err
			}
		}
		found = append(found, cands...)
		hi = lo
		window = min(2*window, callsListMaxWindow)
	}

	switch {
	case len(found) > limit:
		found = found[:limit]
		reply.NextCursor = callsListCursor(found[limit-1].seq)
	case hi > floor:
		// The budget ran out before the page was full.
		reply.NextCursor = callsListCursor(hi)
	}
	if len(found) == 0 {
		return reply, nil
	}
	ids := make([]string, len(found))
	for i, c := range found {
		ids[i] = c.callID
	}
	snaps, err := l.snapshots(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, c := range found {
		if e, ok := l.entry(snaps[c.callID]); ok {
			reply.Calls = append(reply.Calls, e)
		}
	}
	return reply, nil
}

// scanWindow reads the events of sequences [lo, hi) and returns the
// queued events among them that pass f's filters other than state,
// newest first. With a state filter it records the results it reads.
func (l *callLog) scanWindow(ctx context.Context, lo, hi uint64, f *logFilter, results map[string][]seenResult) ([]logCandidate, error) {
	type stored struct {
		seq uint64
		msg *nats.Msg
	}
	var window []stored
	err := l.retry(ctx, func(ctx context.Context) error {
		window = window[:0]
		return l.events.GetBatch(ctx, transport.BatchRequest{Seq: lo, Batch: int(hi - lo)}, func(seq uint64, msg *nats.Msg) bool {
			if seq >= hi {
				return false // past a gap of deleted messages, into what was read before
			}
			window = append(window, stored{seq, msg})
			return true
		})
	})
	if err != nil {
		return nil, unavailable(err, "read the execution log")
	}
	var out []logCandidate
	for i := len(window) - 1; i >= 0; i-- {
		seq, msg := window[i].seq, window[i].msg
		callID, kind, ns, ok := l.names.ParseEventSubject(msg.Subject)
		if !ok {
			continue
		}
		switch kind {
		case messages.EventResult:
			if results != nil {
				var ev messages.CallEvent
				if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &ev); err == nil && ev.Result != nil {
					results[callID] = append(results[callID], seenResult{ns: ns, status: ev.Result.Status})
				}
			}
		case messages.EventQueued:
			if f.Namespace != "" && ns != f.Namespace {
				continue
			}
			if f.decode && !l.admits(ctx, f, msg) {
				continue
			}
			out = append(out, logCandidate{seq: seq, callID: callID, ns: ns})
		}
	}
	return out, nil
}

// admits reports whether a queued event passes f's filters on its
// payload, and is of an agent the caller may see.
func (l *callLog) admits(ctx context.Context, f *logFilter, msg *nats.Msg) bool {
	var ev messages.CallEvent
	if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &ev); err != nil || ev.Request == nil {
		return false
	}
	call := ev.Request
	switch {
	case f.Agent != "" && call.Agent != f.Agent,
		f.Turn != "" && call.Turn != f.Turn,
		f.tool != "" && call.ToolName().String() != f.tool:
		return false
	}
	return !f.ownAgents || mayReadQuietly(ctx, call.Agent)
}

// keepByState keeps the candidates in one of the request's states. A
// result the scan read tells a call's final state; the others are read.
func (l *callLog) keepByState(ctx context.Context, r *messages.CallsListRequest, cands []logCandidate, results map[string][]seenResult) ([]logCandidate, error) {
	states := make(map[string]messages.CallState, len(cands))
	var unknown []string
	for _, c := range cands {
		st, ok := finalState(results[c.callID], c.ns)
		if ok {
			states[c.callID] = st
		} else {
			unknown = append(unknown, c.callID)
		}
	}
	if len(unknown) > 0 {
		snaps, err := l.snapshots(ctx, unknown)
		if err != nil {
			return nil, err
		}
		for _, id := range unknown {
			if s := snaps[id]; s != nil && s.Exists() {
				states[id] = s.State()
			}
		}
	}
	kept := cands[:0]
	for _, c := range cands {
		if st, ok := states[c.callID]; ok && r.Matches(st) {
			kept = append(kept, c)
		}
	}
	return kept, nil
}

// finalState is the state the first result written under the call's
// namespace gives it; results under other namespaces are not the call's.
func finalState(seen []seenResult, ns string) (messages.CallState, bool) {
	// seen is newest first; the first result written is the one that counts.
	for i := len(seen) - 1; i >= 0; i-- {
		if seen[i].ns == ns {
			return seen[i].status, true
		}
	}
	return "", false
}

// entry is a call's line of the log, from its latest events.
func (l *callLog) entry(s *ledger.Snapshot) (messages.CallLogEntry, bool) {
	if s == nil || !s.Exists() || s.Queued == nil || s.Queued.Request == nil {
		return messages.CallLogEntry{}, false
	}
	call := s.Queued.Request
	info := s.Info()
	e := messages.CallLogEntry{
		CallID:    s.CallID,
		Tool:      call.ToolName().String(),
		Namespace: s.Namespace,
		Agent:     call.Agent,
		Turn:      call.Turn,
		State:     info.State,
		QueuedAt:  info.QueuedAt,
		StartedAt: info.StartedAt,
		Attempts:  info.Attempt,
		Worker:    info.Worker,
	}
	if res := info.Result; res != nil {
		if !res.StartedAt.IsZero() {
			e.StartedAt = res.StartedAt // the attempt that wrote the result
		}
		e.FinishedAt, e.IsError = res.FinishedAt, res.IsError
		if res.Error != nil {
			e.Error = &messages.Error{Code: messages.ErrorCode(res.Error.Code), Message: res.Error.Message}
		}
	}
	if !e.StartedAt.IsZero() && !e.QueuedAt.IsZero() {
		e.QueueWaitMS = max(0, e.StartedAt.Sub(e.QueuedAt).Milliseconds())
	}
	if !e.FinishedAt.IsZero() && !e.StartedAt.IsZero() {
		e.RunMS = max(0, e.FinishedAt.Sub(e.StartedAt).Milliseconds())
	}
	// Redacted as the audit log redacts them; without the tool's schema,
	// which tells what is secret, they are left out.
	if l.catalog != nil && len(call.Arguments) > 0 {
		if t, ok := l.catalog.Lookup(e.Tool); ok {
			e.Arguments = policy.Redact(t.Definition.InputSchema, call.Arguments)
		}
	}
	return e, true
}

// bounds returns the first and last sequences of the events stream.
func (l *callLog) bounds(ctx context.Context) (first, last uint64, err error) {
	err = l.retry(ctx, func(ctx context.Context) error {
		s, err := l.js.Stream(ctx, l.names.EventsStream())
		if err != nil {
			return err
		}
		st := s.CachedInfo().State
		first, last = st.FirstSeq, st.LastSeq
		return nil
	})
	if err != nil {
		return 0, 0, unavailable(err, "read the events stream's state")
	}
	return first, last, nil
}

// seqAt returns the sequence of the first event stored at or after t,
// or last+1 when there is none.
func (l *callLog) seqAt(ctx context.Context, t time.Time, last uint64) (uint64, error) {
	seq := last + 1
	err := l.retry(ctx, func(ctx context.Context) error {
		return l.events.GetBatch(ctx, transport.BatchRequest{StartTime: &t, Batch: 1}, func(s uint64, _ *nats.Msg) bool {
			seq = s
			return false
		})
	})
	if err != nil {
		return 0, unavailable(err, "find the events stored at %s", t.Format(time.RFC3339Nano))
	}
	return seq, nil
}

// snapshots reads the latest events of calls, retrying while the events
// stream does not answer.
func (l *callLog) snapshots(ctx context.Context, ids []string) (map[string]*ledger.Snapshot, error) {
	var snaps map[string]*ledger.Snapshot
	err := l.retry(ctx, func(ctx context.Context) (err error) {
		snaps, err = l.ledger.Snapshots(ctx, ids...)
		return err
	})
	if err != nil {
		return nil, unavailable(err, "read the calls of the execution log")
	}
	return snaps, nil
}

func (l *callLog) retry(ctx context.Context, op func(ctx context.Context) error) error {
	wait := l.wait
	if wait <= 0 {
		wait = DefaultUnavailableWait
	}
	return retryTransient(ctx, wait, op)
}

// callsListCursor is the cursor that continues a scan below seq.
func callsListCursor(seq uint64) string {
	return callsListCursorPrefix + strconv.FormatUint(seq, 36)
}

// parseCallsListCursor reads a cursor made by callsListCursor. It only
// says where a scan starts: whatever it holds, the scan keeps to the
// calls the caller may see.
func parseCallsListCursor(cursor string) (uint64, error) {
	digits, ok := strings.CutPrefix(cursor, callsListCursorPrefix)
	seq, err := strconv.ParseUint(digits, 36, 64)
	if !ok || err != nil || seq == 0 {
		return 0, messages.Errorf(messages.CodeBadRequest, "cursor %q is not one calls.list gave: pass the next_cursor of a reply unchanged", cursor)
	}
	return seq, nil
}
