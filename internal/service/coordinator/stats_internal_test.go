package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestPercentilesNearestRank(t *testing.T) {
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(100 - i) // 100 down to 1
	}
	for _, tc := range []struct {
		name string
		ms   []int64
		want *messages.Percentiles
	}{
		{"none", nil, nil},
		{"one", []int64{7}, &messages.Percentiles{Count: 1, P50: 7, P90: 7, P99: 7, Max: 7}},
		{"1 to 100", hundred, &messages.Percentiles{Count: 100, P50: 50, P90: 90, P99: 99, Max: 100}},
		// Ranks ceil(0.5×4)=2, ceil(0.9×4)=4, ceil(0.99×4)=4.
		{"four", []int64{40, 10, 30, 20}, &messages.Percentiles{Count: 4, P50: 20, P90: 40, P99: 40, Max: 40}},
		// Ranks ceil(0.5×10)=5, ceil(0.9×10)=9, ceil(0.99×10)=10.
		{"ten", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 1000}, &messages.Percentiles{Count: 10, P50: 5, P90: 9, P99: 1000, Max: 1000}},
	} {
		before := slices.Clone(tc.ms)
		got := percentiles(tc.ms)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		if !slices.Equal(tc.ms, before) {
			t.Errorf("%s: the durations were reordered: %v", tc.name, tc.ms)
		}
	}
}

// statsEvent is a stored event as a batched direct get hands it: its
// subject, the server's time stamp, and its payload.
func statsEvent(t *testing.T, names messages.Names, ns string, stored time.Time, ev *messages.CallEvent, header ...string) *nats.Msg {
	t.Helper()
	var subject string
	var err error
	if ev.Kind == messages.EventQueued {
		subject, err = names.Events().Queued(ev.CallID, "", ns)
	} else {
		subject, err = names.Events().Subject(messages.TurnBucket(""), ev.CallID, ev.Kind, ns)
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := messages.Msgpack.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(nats.JSTimeStamp, stored.Format(time.RFC3339Nano))
	for i := 0; i+1 < len(header); i += 2 {
		msg.Header.Set(header[i], header[i+1])
	}
	return msg
}

// TestStatsTallyCountsByMinute: events are counted in the minute the
// server stored them, under their subject's kind and namespace: queued
// (held ones as awaiting_approval) and each end state, whose calls' queue
// waits and run times make each minute's and the window's percentiles.
// A call is counted running once: in the minute its result says its
// attempt started, or, while it has no result, in the minute its latest
// started event was stored. Events outside the window, of another
// namespace than the one asked for, and results that hold no end state
// are not counted.
func TestStatsTallyCountsByMinute(t *testing.T) {
	names := messages.MustNames("")
	since := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	until := since.Add(2*time.Minute + 30*time.Second)
	at := func(minute, second int) time.Time {
		return since.Add(time.Duration(minute)*time.Minute + time.Duration(second)*time.Second)
	}
	result := func(id string, status messages.CallState, queued, started, finished time.Time) *messages.CallEvent {
		return &messages.CallEvent{CallID: id, Kind: messages.EventResult, Result: &messages.CallResult{
			CallID: id, Status: status, QueuedAt: queued, StartedAt: started, FinishedAt: finished}}
	}
	queued := func(id string) *messages.CallEvent {
		return &messages.CallEvent{CallID: id, Kind: messages.EventQueued, Request: &messages.CallRequest{CallID: id}}
	}
	started := func(id string) *messages.CallEvent {
		return &messages.CallEvent{CallID: id, Kind: messages.EventStarted, Attempt: 1}
	}
	events := []*nats.Msg{
		// Before the window: not counted.
		statsEvent(t, names, "alpha", since.Add(-time.Second), queued("early")),
		// Minute 0: two calls of alpha queued and started, one held.
		statsEvent(t, names, "alpha", at(0, 1), queued("a1")),
		statsEvent(t, names, "alpha", at(0, 2), queued("a2")),
		statsEvent(t, names, "alpha", at(0, 3), started("a1")),
		statsEvent(t, names, "alpha", at(0, 4), started("a2")),
		statsEvent(t, names, "alpha", at(0, 5), queued("held"), messages.HeaderAwaiting, "approval"),
		// Minute 1: a1 completes (waited 2 s, ran 10 s), a2 fails (1 s,
		// 30 s); beta's call is cancelled before it started.
		statsEvent(t, names, "alpha", at(1, 0), result("a1", messages.StateCompleted, at(0, 1), at(0, 3), at(0, 13))),
		statsEvent(t, names, "alpha", at(1, 1), result("a2", messages.StateFailed, at(0, 2), at(0, 3), at(0, 33))),
		statsEvent(t, names, "beta", at(1, 2), queued("b1")),
		statsEvent(t, names, "beta", at(1, 3), result("b1", messages.StateCancelled, at(1, 2), time.Time{}, at(1, 3))),
		// A result that holds no end state, and a progress line: not counted.
		statsEvent(t, names, "beta", at(1, 4), result("b2", messages.StateRunning, at(1, 2), at(1, 2), at(1, 4))),
		statsEvent(t, names, "beta", at(1, 5), &messages.CallEvent{CallID: "b2", Kind: messages.EventProgress, Progress: &messages.Progress{Progress: 1}}),
		// Minute 2: a call of alpha that started at once, in minute 1, and
		// whose worker wrote no started event; a call still running; a
		// call started again, still running.
		statsEvent(t, names, "alpha", at(2, 0), result("a3", messages.StateCompleted, at(1, 59), at(1, 59), at(2, 0))),
		statsEvent(t, names, "alpha", at(1, 30), started("a5")),
		statsEvent(t, names, "alpha", at(2, 10), started("a4")),
		statsEvent(t, names, "alpha", at(2, 20), started("a5")),
		// After the window's end: not counted.
		statsEvent(t, names, "alpha", until, queued("late")),
	}
	// Events are added newest first, as the scan reads them.
	slices.SortStableFunc(events, func(a, b *nats.Msg) int {
		return strings.Compare(b.Header.Get(nats.JSTimeStamp), a.Header.Get(nats.JSTimeStamp))
	})
	tally := newStatsTally(since, until, 3, "")
	for _, m := range events {
		tally.add(names, m)
	}
	reply := tally.reply(nil)
	wantStates := []map[messages.CallState]int{
		{messages.StateQueued: 2, messages.StateRunning: 2, messages.StateAwaitingApproval: 1},
		{messages.StateCompleted: 1, messages.StateFailed: 1, messages.StateQueued: 1, messages.StateCancelled: 1, messages.StateRunning: 1},
		{messages.StateCompleted: 1, messages.StateRunning: 2},
	}
	if len(reply.Minutes) != 3 {
		t.Fatalf("%d minutes, want 3", len(reply.Minutes))
	}
	for i, m := range reply.Minutes {
		if !m.Start.Equal(since.Add(time.Duration(i) * time.Minute)) {
			t.Errorf("minute %d starts at %s", i, m.Start)
		}
		if fmt.Sprint(m.States) != fmt.Sprint(wantStates[i]) {
			t.Errorf("minute %d: %v, want %v", i, m.States, wantStates[i])
		}
	}
	if len(reply.Namespaces) != 2 || reply.Namespaces[0].Namespace != "alpha" || reply.Namespaces[1].Namespace != "beta" {
		t.Fatalf("namespaces %+v, want alpha then beta", reply.Namespaces)
	}
	alpha, beta := reply.Namespaces[0], reply.Namespaces[1]
	if alpha.Active != 11 || alpha.Ended != 3 || beta.Active != 2 || beta.Ended != 1 {
		t.Errorf("alpha active %d ended %d, beta active %d ended %d; want 11 3, 2 1", alpha.Active, alpha.Ended, beta.Active, beta.Ended)
	}
	if w := alpha.QueueWaitMS; w == nil || *w != (messages.Percentiles{Count: 3, P50: 1000, P90: 2000, P99: 2000, Max: 2000}) {
		t.Errorf("alpha's queue waits: %+v", w)
	}
	if r := alpha.RunMS; r == nil || *r != (messages.Percentiles{Count: 3, P50: 10000, P90: 30000, P99: 30000, Max: 30000}) {
		t.Errorf("alpha's run times: %+v", r)
	}
	if m := alpha.Minutes[1]; m.Ended != 2 || m.RunMS == nil || m.RunMS.P50 != 10000 || m.RunMS.Max != 30000 || m.QueueWaitMS.Max != 2000 {
		t.Errorf("alpha's minute 1: %+v", m)
	}
	if m := alpha.Minutes[2]; m.Ended != 1 || m.RunMS.P50 != 1000 || m.QueueWaitMS.P50 != 0 {
		t.Errorf("alpha's minute 2: ended %d, run %+v, wait %+v", m.Ended, m.RunMS, m.QueueWaitMS)
	}
	if m := alpha.Minutes[0]; m.Ended != 0 || m.RunMS != nil || m.QueueWaitMS != nil {
		t.Errorf("alpha's minute 0, where nothing ended: %+v", m)
	}
	if beta.RunMS != nil || beta.QueueWaitMS != nil {
		t.Errorf("beta's call never started, yet it has durations: %+v %+v", beta.RunMS, beta.QueueWaitMS)
	}

	// Of beta alone.
	only := newStatsTally(since, until, 3, "beta")
	for _, m := range events {
		only.add(names, m)
	}
	reply = only.reply(nil)
	if len(reply.Namespaces) != 1 || reply.Namespaces[0].Namespace != "beta" {
		t.Fatalf("namespaces of beta alone: %+v", reply.Namespaces)
	}
	if got := fmt.Sprint(reply.Minutes[1].States); got != fmt.Sprint(map[messages.CallState]int{messages.StateQueued: 1, messages.StateCancelled: 1}) || reply.Minutes[0].States != nil {
		t.Errorf("the minutes of beta alone: %+v", reply.Minutes)
	}
}

// TestStatsReplyOrdersAndBoundsNamespaces: the namespaces are listed
// busiest first (then by queue depth, then by name), at most
// MaxStatsNamespaces of them.
func TestStatsReplyOrdersAndBoundsNamespaces(t *testing.T) {
	since := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	tally := newStatsTally(since, since.Add(time.Minute), 1, "")
	for i := range messages.MaxStatsNamespaces + 5 {
		for range i % 7 {
			tally.count(fmt.Sprintf("ns%02d", i), 0, messages.StateQueued)
		}
	}
	depths := map[string]*namespaceDepths{
		"idle-deep":    {most: []*int64{new(int64(9))}, last: messages.QueueDepth{Waiting: 9, Time: since}},
		"idle-shallow": {most: []*int64{nil}, last: messages.QueueDepth{Waiting: 1, Time: since}},
	}
	reply := tally.reply(depths)
	if len(reply.Namespaces) != messages.MaxStatsNamespaces || !reply.Truncated {
		t.Fatalf("%d namespaces, truncated %v; want %d, truncated", len(reply.Namespaces), reply.Truncated, messages.MaxStatsNamespaces)
	}
	for i := 1; i < len(reply.Namespaces); i++ {
		if reply.Namespaces[i-1].Active < reply.Namespaces[i].Active {
			t.Errorf("%s (%d) before %s (%d)", reply.Namespaces[i-1].Namespace, reply.Namespaces[i-1].Active, reply.Namespaces[i].Namespace, reply.Namespaces[i].Active)
		}
	}
	if first := reply.Namespaces[0]; first.Namespace != "ns06" || first.Active != 6 {
		t.Errorf("first %s with %d, want ns06 with 6", first.Namespace, first.Active)
	}

	// Without calls, the deeper queue comes first.
	idle := newStatsTally(since, since.Add(time.Minute), 1, "").reply(depths)
	if len(idle.Namespaces) != 2 || idle.Namespaces[0].Namespace != "idle-deep" || *idle.Namespaces[0].Minutes[0].QueueDepth != 9 || idle.Namespaces[1].Minutes[0].QueueDepth != nil {
		t.Errorf("idle namespaces: %+v", idle.Namespaces)
	}
}

// TestDepthHistory: the history keeps each minute's largest sample of a
// namespace for an hour, and its latest; a minute an hour old gives way
// to the new one in its slot; past maxDepthNamespaces, a namespace not
// sampled within the hour is forgotten to make room, and none other is.
func TestDepthHistory(t *testing.T) {
	h := newDepthHistory()
	start := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	at := func(minute, second int) time.Time {
		return start.Add(time.Duration(minute)*time.Minute + time.Duration(second)*time.Second)
	}
	h.record("alpha", messages.QueueDepth{Waiting: 3, Delivered: 1, Time: at(0, 5)})
	h.record("alpha", messages.QueueDepth{Waiting: 7, Delivered: 2, Time: at(0, 10)})
	h.record("alpha", messages.QueueDepth{Waiting: 1, Delivered: 0, Time: at(0, 15)})
	h.record("alpha", messages.QueueDepth{Waiting: 0, Delivered: 2, Time: at(2, 0)})
	h.record("beta", messages.QueueDepth{Waiting: 4, Time: at(1, 0)})

	got := h.window(start, 3, "")
	alpha := got["alpha"]
	if alpha == nil || got["beta"] == nil || len(got) != 2 {
		t.Fatalf("window: %v", got)
	}
	if alpha.most[0] == nil || *alpha.most[0] != 9 || alpha.most[1] != nil || alpha.most[2] == nil || *alpha.most[2] != 2 {
		t.Errorf("alpha by minute: %v, want 9, none, 2", depthValues(alpha.most))
	}
	if alpha.last != (messages.QueueDepth{Waiting: 0, Delivered: 2, Time: at(2, 0)}) {
		t.Errorf("alpha's latest sample: %+v", alpha.last)
	}
	if only := h.window(start, 3, "beta"); len(only) != 1 || only["beta"] == nil {
		t.Errorf("window of beta alone: %v", only)
	}
	// A window that starts after beta's only sample leaves beta out.
	if later := h.window(at(2, 0), 1, ""); len(later) != 1 || later["alpha"] == nil {
		t.Errorf("window from minute 2: %v", later)
	}

	// An hour on, minute 0's slot holds minute 60.
	h.record("alpha", messages.QueueDepth{Waiting: 5, Time: at(60, 0)})
	hour := h.window(at(1, 0), 60, "alpha")["alpha"]
	if hour.most[59] == nil || *hour.most[59] != 5 || hour.most[1] == nil || *hour.most[1] != 2 || hour.most[0] != nil {
		t.Errorf("minutes 1 to 60: %v, want minute 2 at 2 and minute 60 at 5", depthValues(hour.most))
	}
	if old := h.window(start, 1, "alpha")["alpha"]; old == nil || old.most[0] != nil {
		t.Errorf("minute 0, an hour later: %v, want it gone", old)
	}

	// Full: beta (last sampled at minute 1) is forgotten for a new
	// namespace an hour later; once the rest are recent, none is.
	for i := len(h.ns); i < maxDepthNamespaces; i++ {
		h.record(fmt.Sprintf("ns%04d", i), messages.QueueDepth{Waiting: 1, Time: at(61, 0)})
	}
	h.record("gamma", messages.QueueDepth{Waiting: 1, Time: at(62, 0)})
	if _, ok := h.ns["gamma"]; !ok {
		t.Error("gamma was not kept in beta's place")
	}
	if _, ok := h.ns["beta"]; ok {
		t.Error("beta, not sampled for an hour, was kept")
	}
	h.record("delta", messages.QueueDepth{Waiting: 1, Time: at(62, 0)})
	if _, ok := h.ns["delta"]; ok || len(h.ns) != maxDepthNamespaces {
		t.Errorf("delta kept past the bound: %d namespaces", len(h.ns))
	}
}

func depthValues(most []*int64) []string {
	var out []string
	for _, v := range most {
		if v == nil {
			out = append(out, "-")
		} else {
			out = append(out, fmt.Sprint(*v))
		}
	}
	return out
}

// TestStatsShare: requests of the same form that come while it is read
// take that scan's reply; other forms are read at once, at most
// maxStatsScans at a time; a scan that ended with its own request's
// context is read again for the others.
func TestStatsShare(t *testing.T) {
	s := newStatsShare()
	var mu sync.Mutex
	scans := map[string]int{}
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{}), "d": make(chan struct{})}
	started := make(chan string, 16)
	scanOf := func(ns string) func(context.Context) (*messages.CallStatsReply, error) {
		return func(ctx context.Context) (*messages.CallStatsReply, error) {
			mu.Lock()
			scans[ns]++
			mu.Unlock()
			started <- ns
			select {
			case <-release[ns]:
				return &messages.CallStatsReply{Namespaces: []messages.NamespaceStats{{Namespace: ns}}}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	type answer struct {
		reply *messages.CallStatsReply
		err   error
	}
	ask := func(ctx context.Context, ns string) chan answer {
		out := make(chan answer, 1)
		go func() {
			reply, err := s.do(ctx, messages.CallStatsRequest{Namespace: ns}, scanOf(ns))
			out <- answer{reply, err}
		}()
		return out
	}
	waitJoined := func(ns string, n int) {
		t.Helper()
		deadline := time.Now().Add(patience)
		for {
			s.mu.Lock()
			f := s.flights[messages.CallStatsRequest{Namespace: ns}]
			joined := f != nil && f.joined == n
			s.mu.Unlock()
			if joined {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d requests of %s did not join its scan", n, ns)
			}
			time.Sleep(time.Millisecond) // the requests' goroutines give no signal as they join
		}
	}
	ctx := context.Background()

	first := ask(ctx, "a")
	if got := <-started; got != "a" {
		t.Fatalf("started %s", got)
	}
	joiners := []chan answer{ask(ctx, "a"), ask(ctx, "a"), ask(ctx, "a")}
	waitJoined("a", 3)
	other := ask(ctx, "b")
	if got := <-started; got != "b" {
		t.Fatalf("started %s, want b beside a", got)
	}
	// Two scans run: c waits for a slot.
	third := ask(ctx, "c")
	waitJoined("c", 0)
	select {
	case got := <-started:
		t.Fatalf("%s started while a and b held both slots", got)
	default:
	}
	close(release["a"])
	want := (<-first).reply
	for _, j := range joiners {
		if got := <-j; got.err != nil || got.reply != want {
			t.Errorf("a request that joined a's scan got %+v, want its reply", got)
		}
	}
	if got := <-started; got != "c" {
		t.Fatalf("started %s, want c once a's slot was free", got)
	}
	close(release["b"])
	close(release["c"])
	if (<-other).err != nil || (<-third).err != nil {
		t.Fatal("b or c failed")
	}

	// d's first request gives up; the one that joined reads d again.
	cctx, cancel := context.WithCancel(ctx)
	quitter := ask(cctx, "d")
	<-started
	stayer := ask(ctx, "d")
	waitJoined("d", 1)
	cancel()
	if got := <-quitter; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("the request that gave up: %+v", got)
	}
	<-started
	close(release["d"])
	if got := <-stayer; got.err != nil || got.reply.Namespaces[0].Namespace != "d" {
		t.Fatalf("the request that stayed: %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(scans) != fmt.Sprint(map[string]int{"a": 1, "b": 1, "c": 1, "d": 2}) {
		t.Errorf("scans %v, want one of a (for 4 requests), b and c, two of d", scans)
	}
}

// TestStatsReplyFitsInAMessage: the largest reply (60 minutes, every
// state in each, the most namespaces, each with durations and a queue
// depth in every minute, of large values) is well under NATS's default
// 1 MiB payload in both encodings.
func TestStatsReplyFitsInAMessage(t *testing.T) {
	since := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	minutes := messages.MaxStatsMinutes
	tally := newStatsTally(since, since.Add(time.Hour), minutes, "")
	depths := map[string]*namespaceDepths{}
	big := time.Duration(1<<40) * time.Millisecond
	for n := range messages.MaxStatsNamespaces + 10 {
		ns := fmt.Sprintf("namespace_with_a_long_name_%02d", n)
		d := &namespaceDepths{most: make([]*int64, minutes), last: messages.QueueDepth{Waiting: 1 << 40, Delivered: 1 << 40, Time: since}}
		for i := range minutes {
			for _, st := range []messages.CallState{messages.StateQueued, messages.StateAwaitingApproval} {
				tally.count(ns, i, st)
			}
			for _, st := range []messages.CallState{messages.StateCompleted, messages.StateFailed, messages.StateCancelled, messages.StateTimedOut, messages.StateDenied} {
				at := since.Add(time.Duration(i) * time.Minute)
				tally.ended(ns, i, st, at.Add(-big), at.Add(-big/2), at)
			}
			d.most[i] = new(int64(1 << 40))
		}
		depths[ns] = d
	}
	reply := tally.reply(depths)
	for _, codec := range []messages.Codec{messages.JSONCodec, messages.Msgpack} {
		data, err := codec.Marshal(reply)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 512<<10 {
			t.Errorf("%s: the largest reply is %d bytes", codec, len(data))
		}
		t.Logf("%s: %d bytes", codec, len(data))
	}
}
