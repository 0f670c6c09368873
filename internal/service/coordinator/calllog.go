package coordinator

import (
	"bytes"
	"context"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/transport"
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
// reading the window itself. The windows are read without headers
// (payloads alone, a third of the cost of a message with the headers
// the server adds to each): the sequence of each payload follows from
// its place in a window without gaps, and its call ID and kind from the
// start of the payload. A payload does not tell the subject it was
// stored on, which says who wrote it, so it only chooses the page: each
// call listed is then read whole by subject with batched multi-last gets
// (ledger.Snapshots), as calls.get reads one, and one whose queued event
// is not at the scanned sequence under the namespace the scan saw, or
// that the filters refuse once read whole, is left out. A window with a
// gap of deleted messages, or a payload that does not read as an event,
// is read again with headers, and its calls as the headers tell. A call
// held for an approval and queued again once approved has two queued
// events: it is listed once, at the later one (see logCandidate.held).

const (
	// CallsListScanBudget bounds the events one calls.list request reads
	// while it looks for its page. When it runs out first, the reply holds
	// the matches found so far and a cursor that continues the scan.
	CallsListScanBudget = 50_000
	// callsListMaxWindow is the most events one read of the scan asks
	// for; the first read asks for a few per call of the page, and each
	// next one for twice as many.
	callsListMaxWindow = 4096
	// callsListWindowBytes bounds the bytes of one read: a window of large
	// results is read in several.
	callsListWindowBytes = 8 << 20
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
	// budget is CallsListScanBudget, windowBytes callsListWindowBytes;
	// tests make them smaller.
	budget, windowBytes int
}

// logReads answers the operators' reads of the events stream as a whole:
// calls.list (the execution log) and stats.calls.
type logReads struct {
	nc              *nats.Conn
	js              jetstream.JetStream
	names           messages.Names
	ledger          *ledger.Ledger
	view            *toolView
	depths          *depthHistory
	statsScans      *statsShare
	unavailableWait time.Duration
}

// listCalls is calls.list: a page of the execution log, newest call first.
func (lr *logReads) listCalls(ctx context.Context, r *messages.CallsListRequest) (*messages.CallsListReply, error) {
	l := &callLog{
		names:  lr.names,
		js:     lr.js,
		events: transport.NewStream(lr.nc, nil, lr.names.EventsStream()),
		ledger: lr.ledger,
		wait:   lr.unavailableWait,
		budget: CallsListScanBudget,

		windowBytes: callsListWindowBytes,
	}
	if lr.view != nil {
		l.catalog = lr.view.catalog
	}
	return l.list(ctx, r)
}

// logCandidate is a call whose queued event passed the request's
// filters, with the events the scan read of it.
type logCandidate struct {
	seq    uint64
	callID string
	ns     string
	// turn is the call's turn, whose bucket its events are written under.
	turn   string
	queued *messages.CallEvent
	// started is the call's latest started event the scan read, result
	// its first result, each written under the call's namespace.
	started *messages.CallEvent
	result  *messages.CallResult
	// state is known once the call has a result, or was read whole.
	state messages.CallState
	// verified is set once the subjects of the call's events were read:
	// a candidate found in payloads alone is read whole before it is
	// listed.
	verified bool
	// dropped is set when the call read whole is not the one the scan
	// found, or the filters refuse it.
	dropped bool
	// held is set for the queued event of a call held for an approval:
	// once approved, the call has a later queued event, where it is
	// listed, and this one is dropped when the call is read whole.
	held bool
}

// rawEvent is a started or result event the scan read before it reached
// its call's queued event, decoded only if the call is listed.
type rawEvent struct {
	ns   string
	kind messages.EventKind
	msg  *nats.Msg
}

// logFilter is a calls.list request as the scan applies it.
type logFilter struct {
	*messages.CallsListRequest
	// tool is the request's tool in its canonical spelling.
	tool string
	// method is the tool's method, which the encoded event holds as is.
	method string
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
		f.tool, f.method = name.String(), name.Method
	}
	if id := identityOf(ctx); id != nil && !id.user.Operator {
		f.ownAgents = true
	}
	limit := r.Limit
	if limit == 0 {
		limit = messages.DefaultCallsListLimit
	}

	reply := &messages.CallsListReply{Calls: []messages.CallLogEntry{}}
	top, floor, err := l.scanRange(ctx, r)
	if err != nil {
		return nil, err
	}

	// One match more than the page tells whether an older one exists.
	want := limit + 1
	var found []*logCandidate
	sc := &logScan{l: l, f: &f, pending: make(map[string][]rawEvent), results: make(map[string][][]byte)}
	hi, window, scanned := top, uint64(4*want+64), 0
	for hi > floor && len(found) < want && scanned < l.budget {
		span := min(window, hi-floor, uint64(l.budget-scanned))
		lo := hi - span
		cands, err := sc.window(ctx, lo, hi)
		if err != nil {
			return nil, err
		}
		scanned += int(span)
		if len(r.States) > 0 {
			if cands, err = l.keepByState(ctx, &f, cands); err != nil {
				return nil, err
			}
		}
		found = append(found, cands...)
		hi = lo
		window = nextWindow(window, want-len(found), scanned, len(found))
	}

	switch {
	case len(found) > limit:
		found = found[:limit]
		reply.NextCursor = callsListCursor(found[limit-1].seq)
	case hi > floor:
		// The budget ran out before the page was full.
		reply.NextCursor = callsListCursor(hi)
	}
	// A call found in payloads, or whose result the scan did not read (it
	// has none yet, or it was stored above where the scan began), is read
	// whole.
	if err := l.complete(ctx, &f, found); err != nil {
		return nil, err
	}
	for _, c := range found {
		if !c.dropped && (len(r.States) == 0 || r.Matches(c.state)) {
			reply.Calls = append(reply.Calls, l.entry(c))
		}
	}
	return reply, nil
}

// nextWindow is the size of the scan's next read: enough for the need
// more matches at the rate the scan has found them (with a quarter more),
// twice the last one while it has found none, at most callsListMaxWindow.
func nextWindow(last uint64, need, scanned, found int) uint64 {
	if found == 0 {
		return min(2*last, callsListMaxWindow)
	}
	next := uint64(need)*uint64(scanned)*5/(4*uint64(found)) + 64
	return min(next, callsListMaxWindow)
}

// scanRange returns the sequences the request's scan reads, [floor, top):
// from the stream's newest event, or the cursor, or until, down to its
// first, or since. An empty stream gives an empty range.
func (l *callLog) scanRange(ctx context.Context, r *messages.CallsListRequest) (top, floor uint64, err error) {
	var cursor uint64
	if r.Cursor != "" {
		if cursor, err = parseCallsListCursor(r.Cursor); err != nil {
			return 0, 0, err
		}
	}
	first, last, err := l.bounds(ctx)
	if err != nil || last == 0 {
		return 0, 0, err // nothing was ever stored
	}
	top, floor = last+1, max(first, 1)
	if cursor > top {
		return 0, 0, messages.Errorf(messages.CodeBadRequest, "cursor %q is past the end of the execution log: pass the next_cursor of a reply unchanged", r.Cursor)
	}
	if cursor != 0 {
		top = cursor
	}
	// The queued records are stored in time order: since and until are
	// sequences of the stream.
	if !r.Until.IsZero() {
		seq, err := l.seqAt(ctx, r.Until, last)
		if err != nil {
			return 0, 0, err
		}
		top = min(top, seq)
	}
	if !r.Since.IsZero() {
		seq, err := l.seqAt(ctx, r.Since, last)
		if err != nil {
			return 0, 0, err
		}
		floor = max(floor, seq)
	}
	return top, floor, nil
}

// logScan reads the events stream backwards for one request.
type logScan struct {
	l *callLog
	f *logFilter
	// pending holds the started and result events read with their
	// subjects of calls whose queued event is further down, newest first.
	pending map[string][]rawEvent
	// results holds the result payloads read of calls whose queued event
	// is further down, for a request that asks for states.
	results map[string][][]byte
	// windows counts the windows read.
	windows int
	// listed holds the calls whose queued events read with their
	// subjects were listed: an earlier queued event of one of them (held
	// for an approval, then queued again) is passed over.
	listed map[string]bool
}

// window reads the events of sequences [lo, hi) and returns the calls
// whose queued events among them pass the filters other than state,
// newest first. Without filters, the first window is read with headers:
// nearly all its calls are listed, and their subjects spare reading them
// again. The others are read as payloads when they can be.
func (sc *logScan) window(ctx context.Context, lo, hi uint64) ([]*logCandidate, error) {
	sc.windows++
	if sc.windows == 1 && sc.f.listsAll() {
		return sc.windowWithSubjects(ctx, lo, hi)
	}
	payloads, ok, err := sc.readPayloads(ctx, lo, hi)
	if err != nil {
		return nil, err
	}
	if !ok {
		return sc.windowWithSubjects(ctx, lo, hi)
	}
	var out []*logCandidate
	for i := len(payloads) - 1; i >= 0; i-- {
		data := payloads[i]
		callID, kind, _ := peekEvent(data)
		switch kind {
		case messages.EventResult:
			if len(sc.f.States) > 0 {
				sc.results[string(callID)] = append(sc.results[string(callID)], data)
			}
		case messages.EventQueued:
			id := string(callID)
			seen := sc.results[id]
			delete(sc.results, id)
			if c := sc.queuedCandidate(ctx, lo+uint64(i), id, data, seen); c != nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// readPayloads reads the payloads of sequences [lo, hi). ok is false when
// the window holds a gap of deleted messages, or a payload that does not
// read as an event: its sequences or kinds are not known.
func (sc *logScan) readPayloads(ctx context.Context, lo, hi uint64) (payloads [][]byte, ok bool, err error) {
	payloads = make([][]byte, 0, hi-lo)
	// A read ends early once its messages reach windowBytes: the next
	// read goes on from there.
	for next := lo; next < hi; {
		var read [][]byte
		var end transport.PayloadBatch
		err := sc.l.retry(ctx, func(ctx context.Context) (err error) {
			read = read[:0]
			req := transport.BatchRequest{Seq: next, Batch: int(hi - next), MaxBytes: sc.l.windowBytes}
			end, err = sc.l.events.GetPayloads(ctx, req, func(data []byte) bool {
				read = append(read, data)
				return true
			})
			return err
		})
		if err != nil {
			return nil, false, unavailable(err, "read the execution log")
		}
		if end.Count == 0 || end.Last != next+uint64(end.Count)-1 {
			return nil, false, nil // a gap: the sequences do not follow from the count
		}
		for _, data := range read {
			if _, kind, ok := peekEvent(data); !ok || !kind.Valid() {
				return nil, false, nil
			}
		}
		payloads = append(payloads, read...)
		next = end.Last + 1
	}
	return payloads, true, nil
}

// queuedPeek is what the scan reads of a queued event's payload: the
// names the filters look at, not the arguments.
type queuedPeek struct {
	Request *struct {
		Namespace string `json:"namespace"`
		Method    string `json:"method"`
		Agent     string `json:"agent,omitempty"`
		Turn      string `json:"turn,omitempty"`
	} `json:"request,omitempty"`
}

// resultPeek is what the scan reads of a result's payload: its state.
type resultPeek struct {
	Result *struct {
		Status messages.CallState `json:"status"`
	} `json:"result,omitempty"`
}

// queuedCandidate returns the call of a queued event's payload if it
// passes the filters other than state, with the state its result's
// payload tells when the scan read exactly one. The call is read whole
// before it is listed.
func (sc *logScan) queuedCandidate(ctx context.Context, seq uint64, callID string, data []byte, results [][]byte) *logCandidate {
	f := sc.f
	// A call whose only result holds none of the states asked for is not
	// listed: its queued event is not decoded.
	if len(results) == 1 && !f.mayHaveState(results[0]) {
		return nil
	}
	for _, v := range [...]string{f.Namespace, f.Agent, f.Turn, f.method} {
		if v != "" && !bytes.Contains(data, []byte(v)) {
			return nil
		}
	}
	var q queuedPeek
	if err := messages.Msgpack.Unmarshal(data, &q); err != nil || q.Request == nil {
		return nil
	}
	call := q.Request
	if messages.ValidateNamespace(call.Namespace) != nil || !f.admits(ctx, call.Namespace, call.Method, call.Agent, call.Turn) {
		return nil
	}
	c := &logCandidate{seq: seq, callID: callID, ns: call.Namespace, turn: call.Turn}
	// A second result can only be another namespace's forgery: the state
	// is then left to the read by subject.
	if len(results) != 1 || len(f.States) == 0 {
		return c
	}
	var res resultPeek
	if messages.Msgpack.Unmarshal(results[0], &res) == nil && res.Result != nil {
		c.state = res.Result.Status
	}
	return c
}

// listsAll reports whether the request lists every call of the log.
func (f *logFilter) listsAll() bool {
	return f.Namespace == "" && f.Agent == "" && f.Turn == "" && f.tool == "" && len(f.States) == 0 && !f.ownAgents
}

// admits reports whether a call of namespace ns passes the filters other
// than state.
func (f *logFilter) admits(ctx context.Context, ns, method, agent, turn string) bool {
	switch {
	case f.Namespace != "" && ns != f.Namespace,
		f.Agent != "" && agent != f.Agent,
		f.Turn != "" && turn != f.Turn,
		f.tool != "" && (messages.ToolName{Namespace: ns, Method: method}).String() != f.tool,
		f.ownAgents && !mayReadQuietly(ctx, agent):
		return false
	}
	return true
}

// peekEvent returns the call ID and kind a stored event's payload starts
// with: a MessagePack map whose first two keys are call_id and kind (the
// order of CallEvent's fields), read without decoding the rest.
func peekEvent(data []byte) (callID []byte, kind messages.EventKind, ok bool) {
	rest, ok := msgpackMapHeader(data)
	if !ok {
		return nil, "", false
	}
	var key, value []byte
	for _, want := range [...]string{"call_id", "kind"} {
		if key, rest, ok = msgpackStr(rest); !ok || string(key) != want {
			return nil, "", false
		}
		if value, rest, ok = msgpackStr(rest); !ok {
			return nil, "", false
		}
		if want == "call_id" {
			callID = value
		}
	}
	return callID, messages.EventKind(value), true
}

// msgpackMapHeader returns what follows a MessagePack map's header.
func msgpackMapHeader(b []byte) ([]byte, bool) {
	switch {
	case len(b) > 0 && b[0]&0xf0 == 0x80:
		return b[1:], true
	case len(b) >= 3 && b[0] == 0xde:
		return b[3:], true
	case len(b) >= 5 && b[0] == 0xdf:
		return b[5:], true
	}
	return nil, false
}

// msgpackStr reads a MessagePack string, returning it and what follows.
func msgpackStr(b []byte) (str, rest []byte, ok bool) {
	if len(b) == 0 {
		return nil, nil, false
	}
	var n, head int
	switch {
	case b[0]&0xe0 == 0xa0:
		n, head = int(b[0]&0x1f), 1
	case b[0] == 0xd9 && len(b) >= 2:
		n, head = int(b[1]), 2
	case b[0] == 0xda && len(b) >= 3:
		n, head = int(b[1])<<8|int(b[2]), 3
	case b[0] == 0xdb && len(b) >= 5:
		n, head = int(b[1])<<24|int(b[2])<<16|int(b[3])<<8|int(b[4]), 5
	default:
		return nil, nil, false
	}
	if n < 0 || len(b)-head < n {
		return nil, nil, false
	}
	return b[head : head+n], b[head+n:], true
}

// windowWithSubjects reads the events of sequences [lo, hi) with their
// headers and returns the calls whose queued events among them pass the
// filters other than state, newest first.
func (sc *logScan) windowWithSubjects(ctx context.Context, lo, hi uint64) ([]*logCandidate, error) {
	type stored struct {
		seq uint64
		msg *nats.Msg
	}
	var window []stored
	// A read ends early once its messages reach windowBytes:
	// the next read goes on from there.
	for next, past := lo, false; next < hi && !past; {
		var read []stored
		err := sc.l.retry(ctx, func(ctx context.Context) error {
			read, past = read[:0], false
			req := transport.BatchRequest{Seq: next, Batch: int(hi - next), MaxBytes: sc.l.windowBytes}
			return sc.l.events.GetBatch(ctx, req, func(seq uint64, msg *nats.Msg) bool {
				if seq >= hi {
					past = true // over a gap of deleted messages, into what was read before
					return false
				}
				read = append(read, stored{seq, msg})
				return true
			})
		})
		if err != nil {
			return nil, unavailable(err, "read the execution log")
		}
		if len(read) == 0 {
			break
		}
		window = append(window, read...)
		next = read[len(read)-1].seq + 1
	}
	var out []*logCandidate
	for i := len(window) - 1; i >= 0; i-- {
		seq, msg := window[i].seq, window[i].msg
		callID, kind, ns, ok := sc.l.names.Events().Parse(msg.Subject)
		if !ok {
			continue
		}
		switch kind {
		case messages.EventStarted, messages.EventResult:
			sc.pending[callID] = append(sc.pending[callID], rawEvent{ns: ns, kind: kind, msg: msg})
		case messages.EventQueued:
			seen := sc.pending[callID]
			delete(sc.pending, callID)
			delete(sc.results, callID)
			if sc.listed[callID] {
				continue // the call's held queued event, below the one listed
			}
			if c := sc.candidate(ctx, seq, callID, ns, msg, seen); c != nil {
				if sc.listed == nil {
					sc.listed = make(map[string]bool)
				}
				sc.listed[callID] = true
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// candidate returns the call of a queued event if it passes the filters
// other than state, with what the scan read of its later events.
func (sc *logScan) candidate(ctx context.Context, seq uint64, callID, ns string, msg *nats.Msg, seen []rawEvent) *logCandidate {
	f := sc.f
	if f.Namespace != "" && ns != f.Namespace {
		return nil
	}
	// A name the filter gives appears as is in the encoded event (names
	// need no escaping in JSON): an event without it is passed over
	// undecoded.
	for _, v := range [...]string{f.Agent, f.Turn, f.method} {
		if v != "" && !bytes.Contains(msg.Data, []byte(v)) {
			return nil
		}
	}
	var queued messages.CallEvent
	if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &queued); err != nil || queued.Request == nil {
		return nil
	}
	call := queued.Request
	if !f.admits(ctx, ns, call.Method, call.Agent, call.Turn) {
		return nil
	}
	c := &logCandidate{seq: seq, callID: callID, ns: ns, turn: call.Turn, queued: &queued, verified: true,
		held: msg.Header.Get(messages.HeaderAwaiting) != ""}
	// seen is newest first: the first result written is the last one.
	for i := len(seen) - 1; i >= 0 && c.state == ""; i-- {
		e := seen[i]
		if e.ns != ns || e.kind != messages.EventResult {
			continue
		}
		if !f.mayHaveState(e.msg.Data) {
			c.state = stateNotAsked
			break
		}
		if ev := decodeEvent(e.msg); ev != nil && ev.Result != nil {
			c.result, c.state = ev.Result, ev.Result.Status
		}
	}
	for _, e := range seen {
		if e.ns == ns && e.kind == messages.EventStarted {
			if c.started = decodeEvent(e.msg); c.started != nil {
				break
			}
		}
	}
	return c
}

// stateNotAsked is the state of a call whose result holds none of the
// states a request asks for: it is not listed, and not decoded.
const stateNotAsked messages.CallState = "-"

// mayHaveState reports whether an encoded result may be in one of the
// states the filter asks for: each is written as is in it.
func (f *logFilter) mayHaveState(data []byte) bool {
	if len(f.States) == 0 {
		return true
	}
	for _, st := range f.States {
		if bytes.Contains(data, []byte(st)) {
			return true
		}
	}
	return false
}

func decodeEvent(msg *nats.Msg) *messages.CallEvent {
	var ev messages.CallEvent
	if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &ev); err != nil {
		return nil
	}
	return &ev
}

// keepByState keeps the candidates that may be in one of the request's
// states; those whose state the scan did not tell are read whole first.
// A state the scan read in a payload alone is checked again once the
// call is read whole (complete).
func (l *callLog) keepByState(ctx context.Context, f *logFilter, cands []*logCandidate) ([]*logCandidate, error) {
	var unknown []*logCandidate
	for _, c := range cands {
		if c.state == "" {
			unknown = append(unknown, c)
		}
	}
	if err := l.complete(ctx, f, unknown); err != nil {
		return nil, err
	}
	kept := cands[:0]
	for _, c := range cands {
		if !c.dropped && c.state != "" && f.Matches(c.state) {
			kept = append(kept, c)
		}
	}
	return kept, nil
}

// complete reads whole, in one batched read per 140 calls, the
// candidates found in payloads and those whose state the scan did not
// tell, and marks dropped those that are not the calls the scan found or
// that the filters refuse.
func (l *callLog) complete(ctx context.Context, f *logFilter, cands []*logCandidate) error {
	snaps, err := l.readCalls(ctx, cands)
	if err != nil {
		return err
	}
	for _, c := range cands {
		if c.dropped || c.verified && c.state != "" && !c.held {
			continue
		}
		s := snaps[c.callID]
		if c.held && (s == nil || s.Queued == nil || s.Queued.Seq != c.seq) {
			// Queued again once approved: listed where it was.
			c.dropped = true
			continue
		}
		if !c.verified {
			// The payload's call must be the one stored by subject at the
			// scanned sequence, and pass the filters as stored.
			var call *messages.CallRequest
			if s != nil && s.Queued != nil {
				call = s.Queued.Request
			}
			if call == nil || s.Queued.Seq != c.seq || s.Namespace != c.ns ||
				!f.admits(ctx, s.Namespace, call.Method, call.Agent, call.Turn) {
				c.dropped = true
				continue
			}
			c.queued, c.verified, c.state, c.started, c.result = &s.Queued.CallEvent, true, s.State(), nil, nil
		} else if s == nil || !s.Exists() || s.Namespace != c.ns {
			continue
		} else {
			c.state = s.State()
		}
		if s.Started != nil {
			c.started = &s.Started.CallEvent
		}
		if s.Result != nil && s.Result.Result != nil {
			c.result = s.Result.Result
		}
	}
	return nil
}

// callsListReadCalls is the most calls one batched read of complete
// asks for: each has at most 7 subjects (queued, started, progress, log,
// cancel, approval, result), under the server's 1,024 messages a
// multi-last get may answer.
const callsListReadCalls = 140

// readCalls reads whole the candidates complete needs: the latest event
// of each of the call's subjects under its turn's bucket and its
// namespace, with batched multi-last gets whose filters name both (the
// server finds them without walking the other buckets' subjects). A call
// the replica that answered does not have is read as calls.get reads it.
func (l *callLog) readCalls(ctx context.Context, cands []*logCandidate) (map[string]*ledger.Snapshot, error) {
	var want []*logCandidate
	for _, c := range cands {
		if !c.dropped && (!c.verified || c.state == "" || c.held) {
			want = append(want, c)
		}
	}
	snaps := make(map[string]*ledger.Snapshot, len(want))
	for start := 0; start < len(want); start += callsListReadCalls {
		batch := want[start:min(start+callsListReadCalls, len(want))]
		filters := make([]string, 0, 2*len(batch))
		for _, c := range batch {
			bucket := messages.TurnBucket(c.turn)
			queued, err := l.names.Events().Queued(c.callID, c.turn, c.ns)
			if err != nil {
				c.dropped = true
				continue
			}
			others, err := l.names.Filters().CallNamespaceEvents(bucket, c.callID, c.ns)
			if err != nil {
				c.dropped = true
				continue
			}
			filters = append(filters, queued, others)
			snaps[c.callID] = &ledger.Snapshot{CallID: c.callID, Namespace: c.ns, Bucket: bucket}
		}
		if len(filters) == 0 {
			continue
		}
		err := l.retry(ctx, func(ctx context.Context) error {
			return l.events.GetBatch(ctx, transport.BatchRequest{MultiLast: filters}, func(seq uint64, msg *nats.Msg) bool {
				callID, kind, ns, ok := l.names.Events().Parse(msg.Subject)
				s := snaps[callID]
				if !ok || s == nil || ns != s.Namespace || l.names.Events().Bucket(msg.Subject) != s.Bucket {
					return true
				}
				ev := &ledger.Event{Seq: seq, Namespace: ns, Bucket: s.Bucket}
				if _, err := messages.DecodeStored(messages.Header(msg.Header), msg.Data, &ev.CallEvent); err != nil {
					return true
				}
				ev.Kind = kind // the subject's, not the payload's
				s.Put(ev)
				return true
			})
		})
		if err != nil {
			return nil, unavailable(err, "read the calls of the execution log")
		}
	}
	var missing []string
	for id, s := range snaps {
		if !s.Exists() {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		read, err := l.snapshots(ctx, missing)
		if err != nil {
			return nil, err
		}
		maps.Copy(snaps, read)
	}
	return snaps, nil
}

// entry is a call's line of the log.
func (l *callLog) entry(c *logCandidate) messages.CallLogEntry {
	call := c.queued.Request
	e := messages.CallLogEntry{
		CallID:    c.callID,
		Tool:      call.ToolName().String(),
		Namespace: c.ns,
		Agent:     call.Agent,
		Turn:      call.Turn,
		State:     c.state,
		QueuedAt:  call.QueuedAt,
	}
	if e.State == "" {
		e.State = messages.StateQueued // not read whole: its events expired meanwhile
	}
	if st := c.started; st != nil {
		e.StartedAt, e.Attempts, e.Worker = st.Time, st.Attempt, st.Worker
	}
	if res := c.result; res != nil {
		if res.Attempt > 0 {
			e.Attempts, e.Worker = res.Attempt, res.Worker
		}
		if !res.StartedAt.IsZero() {
			e.StartedAt = res.StartedAt // the attempt that wrote the result
		}
		e.FinishedAt, e.IsError = res.FinishedAt, res.IsError
		if res.Error != nil {
			e.Error = &messages.Error{Code: messages.ErrorCode(res.Error.Code), Message: res.Error.Message}
		}
	}
	if !e.StartedAt.IsZero() && !e.QueuedAt.IsZero() {
		e.QueueWaitMS = new(max(0, e.StartedAt.Sub(e.QueuedAt).Milliseconds()))
	}
	if !e.FinishedAt.IsZero() && !e.StartedAt.IsZero() {
		e.RunMS = new(max(0, e.FinishedAt.Sub(e.StartedAt).Milliseconds()))
	}
	// Redacted as the audit log redacts them; without the tool's schema,
	// which tells what is secret, they are left out.
	if l.catalog != nil && len(call.Arguments) > 0 {
		if t, ok := l.catalog.Lookup(e.Tool); ok {
			e.Arguments = policy.Redact(t.Definition.InputSchema, call.Arguments)
		}
	}
	return e
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
	return retryRead(ctx, l.wait, op)
}

// retryRead retries a read of a log while its stream does not answer, at
// most wait (DefaultUnavailableWait when not set).
func retryRead(ctx context.Context, wait time.Duration, op func(ctx context.Context) error) error {
	if wait <= 0 {
		wait = DefaultUnavailableWait
	}
	return retryTransient(ctx, wait, op)
}

// callsListCursor is the cursor that continues a scan below seq.
func callsListCursor(seq uint64) string { return seqCursor(callsListCursorPrefix, seq) }

// parseCallsListCursor reads a cursor made by callsListCursor. It only
// says where a scan starts: whatever it holds, the scan keeps to the
// calls the caller may see.
func parseCallsListCursor(cursor string) (uint64, error) {
	return parseSeqCursor(callsListCursorPrefix, messages.EndpointCallsList, cursor)
}

// seqCursor is a log's cursor: its prefix (the version of its form) and
// the stream sequence a scan continues below.
func seqCursor(prefix string, seq uint64) string {
	return prefix + strconv.FormatUint(seq, 36)
}

// parseSeqCursor reads a cursor made by seqCursor with prefix for the
// requests of endpoint.
func parseSeqCursor(prefix, endpoint, cursor string) (uint64, error) {
	digits, ok := strings.CutPrefix(cursor, prefix)
	seq, err := strconv.ParseUint(digits, 36, 64)
	if !ok || err != nil || seq == 0 {
		return 0, messages.Errorf(messages.CodeBadRequest, "cursor %q is not one %s gave: pass the next_cursor of a reply unchanged", cursor, endpoint)
	}
	return seq, nil
}
