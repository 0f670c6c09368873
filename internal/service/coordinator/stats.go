package coordinator

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// The statistics of the last hour (stats.calls), for the console's
// dashboard: how many calls entered each state minute by minute, their
// queue waits and run times by namespace, and each namespace's queue
// depth. The counts and durations are read from the events stream, as
// the execution log is, backwards from its newest event, so that when
// the scan's budget runs out the latest minutes are the ones counted.
// The queue depths are not in the stream: they are the samples the
// sweeper takes of each namespace's consumer as it sweeps, kept in
// memory by minute (depthHistory).

const (
	// StatsScanBudget bounds the events one stats.calls request reads.
	StatsScanBudget = 100_000
	// statsScanBytes bounds the bytes of the events one request reads.
	statsScanBytes = 64 << 20
	// statsWindow is the most events one read of the scan asks for.
	statsWindow = 4096
	// maxStatsScans bounds the scans one coordinator runs at once.
	maxStatsScans = 2
)

// callStats is stats.calls.
func (lr *logReads) callStats(ctx context.Context, r *messages.CallStatsRequest) (*messages.CallStatsReply, error) {
	if err := requireOperator(ctx, messages.EndpointStatsCalls); err != nil {
		return nil, err
	}
	return lr.statsScans.do(ctx, *r, func(ctx context.Context) (*messages.CallStatsReply, error) {
		sr := &statsReader{
			log: &callLog{
				names: lr.names, js: lr.js, events: transport.NewStream(lr.nc, nil, lr.names.EventsStream()),
				wait: lr.unavailableWait, windowBytes: callsListWindowBytes,
			},
			budget: StatsScanBudget, maxBytes: statsScanBytes, depths: lr.depths,
		}
		return sr.read(ctx, r, time.Now())
	})
}

// statsShare holds the scans of stats.calls under way: a request that
// comes while the same one (same namespace and minutes) is being read
// takes that scan's reply, and at most maxStatsScans scans run at once,
// so that operators' dashboards that all refresh cost one scan each time.
type statsShare struct {
	mu      sync.Mutex
	flights map[messages.CallStatsRequest]*statsFlight
	slots   chan struct{}
}

type statsFlight struct {
	done  chan struct{}
	reply *messages.CallStatsReply
	err   error
	// joined counts the requests that wait for this scan's reply.
	joined int
}

func newStatsShare() *statsShare {
	return &statsShare{flights: map[messages.CallStatsRequest]*statsFlight{}, slots: make(chan struct{}, maxStatsScans)}
}

// do answers r with the scan under way of the same request, or with a
// scan of its own. A scan that ended because its own request's context
// did is not taken by the others: they try again.
func (s *statsShare) do(ctx context.Context, r messages.CallStatsRequest, scan func(context.Context) (*messages.CallStatsReply, error)) (*messages.CallStatsReply, error) {
	for {
		s.mu.Lock()
		f, joined := s.flights[r]
		if !joined {
			f = &statsFlight{done: make(chan struct{})}
			s.flights[r] = f
		} else {
			f.joined++
		}
		s.mu.Unlock()
		if joined {
			select {
			case <-f.done:
				if f.err != nil && ctx.Err() == nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
					continue
				}
				return f.reply, f.err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		f.reply, f.err = s.run(ctx, scan)
		s.mu.Lock()
		delete(s.flights, r)
		s.mu.Unlock()
		close(f.done)
		return f.reply, f.err
	}
}

// run runs a scan in one of the slots.
func (s *statsShare) run(ctx context.Context, scan func(context.Context) (*messages.CallStatsReply, error)) (*messages.CallStatsReply, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.slots }()
	return scan(ctx)
}

// statsReader answers stats.calls for one request.
type statsReader struct {
	log *callLog
	// budget bounds the events read, maxBytes their bytes; tests make
	// them smaller.
	budget, maxBytes int
	depths           *depthHistory
}

// read counts the events of the window that ends at now.
func (sr *statsReader) read(ctx context.Context, r *messages.CallStatsRequest, now time.Time) (*messages.CallStatsReply, error) {
	minutes := r.Minutes
	if minutes == 0 {
		minutes = messages.DefaultStatsMinutes
	}
	now = now.UTC()
	since := now.Truncate(time.Minute).Add(-time.Duration(minutes-1) * time.Minute)
	tally := newStatsTally(since, now, minutes, r.Namespace)
	counted, scanned, err := sr.scan(ctx, tally)
	if err != nil {
		return nil, err
	}
	var depths map[string]*namespaceDepths
	if sr.depths != nil {
		depths = sr.depths.window(since, minutes, r.Namespace)
	}
	reply := tally.reply(depths)
	reply.CountedSince, reply.Scanned = counted, scanned
	return reply, nil
}

// scan reads the events stored from the tally's start to its end, newest
// first, within the budgets, and counts them. It returns when the oldest
// event counted was stored: the tally's start when the scan reached it.
func (sr *statsReader) scan(ctx context.Context, tally *statsTally) (counted time.Time, scanned int, err error) {
	l := sr.log
	_, last, err := l.bounds(ctx)
	if err != nil || last == 0 {
		return tally.since, 0, err // nothing was ever stored
	}
	floor, err := l.seqAt(ctx, tally.since, last)
	if err != nil {
		return time.Time{}, 0, err
	}
	counted = tally.until
	hi, read := last+1, 0
	for hi > floor && scanned < sr.budget && read < sr.maxBytes {
		lo := hi - min(statsWindow, hi-floor, uint64(sr.budget-scanned))
		window, bytes, whole, err := sr.window(ctx, lo, hi, sr.maxBytes-read)
		if err != nil {
			return time.Time{}, 0, err
		}
		if !whole {
			break // the bytes ran out within the window: it is not counted
		}
		for i := len(window) - 1; i >= 0; i-- {
			if t := tally.add(l.names, window[i]); !t.IsZero() && t.Before(counted) {
				counted = t
			}
		}
		scanned += int(hi - lo)
		read += bytes
		hi = lo
	}
	if hi <= floor {
		counted = tally.since
	}
	return counted, scanned, nil
}

// window reads the events of sequences [lo, hi) with their headers: their
// subjects say who wrote them, and when the server stored them. whole is
// false when their bytes passed room before the window's end.
func (sr *statsReader) window(ctx context.Context, lo, hi uint64, room int) (window []*nats.Msg, bytes int, whole bool, err error) {
	l := sr.log
	for next, past := lo, false; next < hi && !past; {
		var read []*nats.Msg
		var last uint64
		err := l.retry(ctx, func(ctx context.Context) error {
			read, past, last = read[:0], false, 0
			req := transport.BatchRequest{Seq: next, Batch: int(hi - next), MaxBytes: l.windowBytes}
			return l.events.GetBatch(ctx, req, func(seq uint64, msg *nats.Msg) bool {
				if seq >= hi {
					past = true // over a gap of deleted messages, into what was read before
					return false
				}
				read, last = append(read, msg), seq
				return true
			})
		})
		if err != nil {
			return nil, 0, false, unavailable(err, "read the events stream")
		}
		if len(read) == 0 {
			break
		}
		for _, msg := range read {
			bytes += len(msg.Subject) + len(msg.Data)
		}
		if bytes > room {
			return nil, bytes, false, nil
		}
		window = append(window, read...)
		next = last + 1
	}
	return window, bytes, true, nil
}

// statsTally counts the events of a window of minutes.
type statsTally struct {
	since, until time.Time
	minutes      int
	// namespace, when set, is the only namespace counted.
	namespace string
	states    []map[messages.CallState]int
	byNS      map[string]*namespaceTally
	// running holds the calls counted as running, by namespace and call
	// ID: a call is counted once, at the start of the attempt that wrote
	// its result, or of its latest attempt while it has none.
	running map[string]bool
}

// namespaceTally is what a tally counted of one namespace.
type namespaceTally struct {
	active, ended int
	// By minute: results stored, and the durations of those that started.
	endedIn           []int
	waits, runs       [][]int64
	allWaits, allRuns []int64
}

func newStatsTally(since, until time.Time, minutes int, namespace string) *statsTally {
	return &statsTally{since: since, until: until, minutes: minutes, namespace: namespace,
		states: make([]map[messages.CallState]int, minutes), byNS: map[string]*namespaceTally{}, running: map[string]bool{}}
}

// resultTimes is what the tally reads of a result: its state and times.
type resultTimes struct {
	Result *struct {
		Status     messages.CallState `json:"status"`
		QueuedAt   time.Time          `json:"queued_at"`
		StartedAt  time.Time          `json:"started_at,omitzero"`
		FinishedAt time.Time          `json:"finished_at"`
	} `json:"result,omitempty"`
}

// add counts one stored event, and returns when the server stored it
// (zero for a message that is no event with a time). The kind and
// namespace are the subject's: the server let only the namespace's
// workers and the coordinators write there. Events are added newest
// first: a call's result before its started events.
//
// A worker writes a started event only for an attempt that runs longer
// than a moment, so a call is counted as running where its result says
// its attempt started, and by its latest started event while it has no
// result.
func (t *statsTally) add(names messages.Names, msg *nats.Msg) time.Time {
	stored, err := time.Parse(time.RFC3339Nano, msg.Header.Get(nats.JSTimeStamp))
	if err != nil {
		return time.Time{}
	}
	callID, kind, ns, ok := names.Events().Parse(msg.Subject)
	if !ok || (t.namespace != "" && ns != t.namespace) {
		return stored
	}
	i, ok := t.minute(stored)
	if !ok {
		return stored
	}
	switch kind {
	case messages.EventQueued:
		if msg.Header.Get(messages.HeaderAwaiting) != "" {
			t.count(ns, i, messages.StateAwaitingApproval)
		} else {
			t.count(ns, i, messages.StateQueued)
		}
	case messages.EventStarted:
		if call := ns + " " + callID; !t.running[call] {
			t.running[call] = true
			t.count(ns, i, messages.StateRunning)
		}
	case messages.EventResult:
		var r resultTimes
		if _, err := messages.DecodeStored(messages.Header(msg.Header), msg.Data, &r); err != nil || r.Result == nil {
			return stored
		}
		res := r.Result
		if !t.ended(ns, i, res.Status, res.QueuedAt, res.StartedAt, res.FinishedAt) || res.StartedAt.IsZero() {
			return stored
		}
		if call := ns + " " + callID; !t.running[call] {
			t.running[call] = true
			if j, ok := t.minute(res.StartedAt); ok {
				t.count(ns, j, messages.StateRunning)
			}
		}
	}
	return stored
}

// minute returns the index of the minute t falls in.
func (t *statsTally) minute(at time.Time) (int, bool) {
	if at.Before(t.since) || !at.Before(t.until) {
		return 0, false
	}
	i := int(at.Sub(t.since) / time.Minute)
	return i, i < t.minutes
}

func (t *statsTally) ns(name string) *namespaceTally {
	n := t.byNS[name]
	if n == nil {
		n = &namespaceTally{endedIn: make([]int, t.minutes), waits: make([][]int64, t.minutes), runs: make([][]int64, t.minutes)}
		t.byNS[name] = n
	}
	return n
}

// count counts a call of namespace ns that entered state in minute i.
func (t *statsTally) count(ns string, i int, state messages.CallState) {
	if t.states[i] == nil {
		t.states[i] = map[messages.CallState]int{}
	}
	t.states[i][state]++
	t.ns(ns).active++
}

// ended counts a result stored in minute i, with the call's queue wait
// and run time when it started. A status that is no end state is not
// one Toolbus writes: the result is not counted, and ended is false.
func (t *statsTally) ended(ns string, i int, status messages.CallState, queued, started, finished time.Time) bool {
	if !status.Terminal() {
		return false
	}
	t.count(ns, i, status)
	n := t.ns(ns)
	n.ended++
	n.endedIn[i]++
	if started.IsZero() {
		return true
	}
	if !queued.IsZero() {
		wait := max(0, started.Sub(queued).Milliseconds())
		n.waits[i] = append(n.waits[i], wait)
		n.allWaits = append(n.allWaits, wait)
	}
	if !finished.IsZero() {
		run := max(0, finished.Sub(started).Milliseconds())
		n.runs[i] = append(n.runs[i], run)
		n.allRuns = append(n.allRuns, run)
	}
	return true
}

// reply is the tally as stats.calls answers it, with the namespaces'
// queue depths.
func (t *statsTally) reply(depths map[string]*namespaceDepths) *messages.CallStatsReply {
	reply := &messages.CallStatsReply{Since: t.since, Until: t.until, Minutes: make([]messages.StatsMinute, t.minutes), Namespaces: []messages.NamespaceStats{}}
	for i := range reply.Minutes {
		reply.Minutes[i] = messages.StatsMinute{Start: t.since.Add(time.Duration(i) * time.Minute), States: t.states[i]}
	}
	names := make(map[string]bool, len(t.byNS)+len(depths))
	for ns := range t.byNS {
		names[ns] = true
	}
	for ns := range depths {
		names[ns] = true
	}
	for name := range names {
		s := messages.NamespaceStats{Namespace: name, Minutes: make([]messages.NamespaceMinute, t.minutes)}
		if n := t.byNS[name]; n != nil {
			s.Active, s.Ended = n.active, n.ended
			s.QueueWaitMS, s.RunMS = percentiles(n.allWaits), percentiles(n.allRuns)
			for i := range s.Minutes {
				s.Minutes[i] = messages.NamespaceMinute{Ended: n.endedIn[i], QueueWaitMS: percentiles(n.waits[i]), RunMS: percentiles(n.runs[i])}
			}
		}
		if d := depths[name]; d != nil {
			last := d.last
			s.QueueDepth = &last
			for i := range s.Minutes {
				s.Minutes[i].QueueDepth = d.most[i]
			}
		}
		reply.Namespaces = append(reply.Namespaces, s)
	}
	slices.SortFunc(reply.Namespaces, func(a, b messages.NamespaceStats) int {
		return cmp.Or(cmp.Compare(b.Active, a.Active), cmp.Compare(depthOf(b), depthOf(a)), cmp.Compare(a.Namespace, b.Namespace))
	})
	if len(reply.Namespaces) > messages.MaxStatsNamespaces {
		reply.Namespaces, reply.Truncated = reply.Namespaces[:messages.MaxStatsNamespaces], true
	}
	return reply
}

// depthOf is the calls in a namespace's queue at its latest sample.
func depthOf(s messages.NamespaceStats) int64 {
	if s.QueueDepth == nil {
		return -1
	}
	return s.QueueDepth.Waiting + s.QueueDepth.Delivered
}

// percentiles sums up durations; nil when there are none. The p-th
// percentile is the smallest duration that p percent of them do not
// exceed (the nearest rank).
func percentiles(ms []int64) *messages.Percentiles {
	n := len(ms)
	if n == 0 {
		return nil
	}
	sorted := slices.Clone(ms)
	slices.Sort(sorted)
	rank := func(p int) int64 { return sorted[(p*n+99)/100-1] }
	return &messages.Percentiles{Count: n, P50: rank(50), P90: rank(90), P99: rank(99), Max: sorted[n-1]}
}

// maxDepthNamespaces bounds the namespaces whose queue depths a
// coordinator keeps; a namespace past it is not sampled until one whose
// latest sample is older than the window is forgotten.
const maxDepthNamespaces = 1000

// depthHistory keeps, for each namespace, the largest queue depth sampled
// in each of the last MaxStatsMinutes minutes, and the latest sample.
type depthHistory struct {
	mu sync.Mutex
	ns map[string]*depthRing
}

// depthRing is one namespace's samples: minute m (in minutes since the
// Unix epoch) in slot m % MaxStatsMinutes.
type depthRing struct {
	slots [messages.MaxStatsMinutes]depthSlot
	last  messages.QueueDepth
}

type depthSlot struct {
	minute int64
	most   int64
	set    bool
}

func newDepthHistory() *depthHistory { return &depthHistory{ns: map[string]*depthRing{}} }

// record keeps a sample of a namespace's queue.
func (h *depthHistory) record(ns string, s messages.QueueDepth) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ring := h.ns[ns]
	if ring == nil {
		if len(h.ns) >= maxDepthNamespaces {
			h.forget(s.Time.Add(-messages.MaxStatsMinutes * time.Minute))
			if len(h.ns) >= maxDepthNamespaces {
				return
			}
		}
		ring = &depthRing{}
		h.ns[ns] = ring
	}
	minute := s.Time.Unix() / 60
	slot := &ring.slots[minute%messages.MaxStatsMinutes]
	depth := s.Waiting + s.Delivered
	if !slot.set || slot.minute != minute {
		*slot = depthSlot{minute: minute, most: depth, set: true}
	} else if depth > slot.most {
		slot.most = depth
	}
	if !s.Time.Before(ring.last.Time) {
		ring.last = s
	}
}

// forget drops the namespaces whose latest sample is before cutoff.
func (h *depthHistory) forget(cutoff time.Time) {
	for ns, ring := range h.ns {
		if ring.last.Time.Before(cutoff) {
			delete(h.ns, ns)
		}
	}
}

// namespaceDepths are one namespace's samples in a window: the most by
// minute (nil where none was taken), and the latest.
type namespaceDepths struct {
	most []*int64
	last messages.QueueDepth
}

// window returns the samples of the minutes from since on, of the
// namespaces (or the one named) sampled in them.
func (h *depthHistory) window(since time.Time, minutes int, namespace string) map[string]*namespaceDepths {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := since.Unix() / 60
	out := map[string]*namespaceDepths{}
	for ns, ring := range h.ns {
		if namespace != "" && ns != namespace {
			continue
		}
		if ring.last.Time.Before(since) {
			continue
		}
		d := &namespaceDepths{most: make([]*int64, minutes), last: ring.last}
		for i := range minutes {
			minute := first + int64(i)
			if slot := ring.slots[minute%messages.MaxStatsMinutes]; slot.set && slot.minute == minute {
				d.most[i] = new(slot.most)
			}
		}
		out[ns] = d
	}
	return out
}
