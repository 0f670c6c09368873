package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// callLogOn returns a calls.list reader of an embedded server's events
// stream, and the ledger that writes there.
func callLogOn(t *testing.T, budget int) (*callLog, *ledger.Ledger) {
	t.Helper()
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := messages.MustNames("")
	if err := resources.Ensure(context.Background(), js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	l := ledger.New(nc, js, names)
	t.Cleanup(l.Close)
	return &callLog{names: names, js: js, events: transport.NewStream(nc, nil, names.EventsStream()), ledger: l, budget: budget, windowBytes: callsListWindowBytes}, l
}

// storeCall writes a finished call's events as the coordinator and a
// worker write them.
func storeCall(ctx context.Context, t *testing.T, l *ledger.Ledger, id, ns string, status messages.CallState) {
	t.Helper()
	now := time.Now().UTC()
	call := &messages.CallRequest{CallID: id, Tool: ns + "-say", Namespace: ns, Method: "say", QueuedAt: now}
	res := &messages.CallResult{CallID: id, Tool: call.Tool, Status: status, Attempt: 1, Worker: "w1", QueuedAt: now, StartedAt: now, FinishedAt: now}
	for _, ev := range []*messages.CallEvent{
		{CallID: id, Kind: messages.EventQueued, Time: now, Request: call},
		{CallID: id, Kind: messages.EventStarted, Time: now, Attempt: 1, Worker: "w1"},
		{CallID: id, Kind: messages.EventResult, Time: now, Result: res},
	} {
		if _, err := l.Append(ctx, messages.TurnBucket(""), ns, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCallsListScanBudget: a scan that runs out of budget before its page
// is full answers what it found with a cursor that continues it, and
// paging on sees every call once, newest first.
func TestCallsListScanBudget(t *testing.T) {
	log, l := callLogOn(t, 7)
	ctx := context.Background()
	var ids []string
	for i := range 9 {
		id := fmt.Sprintf("call%02d", i)
		storeCall(ctx, t, l, id, "alpha", messages.StateCompleted)
		ids = append([]string{id}, ids...)
	}
	var got []string
	short := 0
	req := &messages.CallsListRequest{Limit: 4}
	for range 100 {
		reply, err := log.list(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range reply.Calls {
			got = append(got, e.CallID)
		}
		if reply.NextCursor == "" {
			break
		}
		if len(reply.Calls) < req.Limit {
			short++
		}
		req.Cursor = reply.NextCursor
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("paged with a budget of 7 events: got %v, want %v", got, ids)
	}
	if short == 0 {
		t.Error("no page was cut short by the budget of 7 events (3 per call)")
	}
}

// TestCallsListReadsWindowsCutByBytes: a window whose read the server
// ends early, at its byte bound, is read on from where it ended.
func TestCallsListReadsWindowsCutByBytes(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	log.windowBytes = 1 // one message a read
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("call%02d", i)
		storeCall(ctx, t, l, id, "alpha", messages.StateCompleted)
		ids = append([]string{id}, ids...)
	}
	reply, err := log.list(ctx, &messages.CallsListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range reply.Calls {
		got = append(got, e.CallID)
		if e.State != messages.StateCompleted || e.Worker != "w1" || e.Attempts != 1 {
			t.Errorf("entry %+v", e)
		}
	}
	if !slices.Equal(got, ids) || reply.NextCursor != "" {
		t.Fatalf("read a message at a time: got %v (cursor %q), want %v", got, reply.NextCursor, ids)
	}
}

// TestCallsListStateIgnoresForgedResults: a result another namespace
// wrote under a call's ID does not give the call its state.
func TestCallsListStateIgnoresForgedResults(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	ctx := context.Background()
	storeCall(ctx, t, l, "real", "alpha", messages.StateCompleted)
	forged := &messages.CallResult{CallID: "real", Status: messages.StateFailed, FinishedAt: time.Now().UTC()}
	if _, err := l.Append(ctx, messages.TurnBucket(""), "mallory", &messages.CallEvent{CallID: "real", Kind: messages.EventResult, Time: time.Now().UTC(), Result: forged}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		state messages.CallState
		want  []string
	}{{messages.StateFailed, nil}, {messages.StateCompleted, []string{"real"}}} {
		reply, err := log.list(ctx, &messages.CallsListRequest{States: []messages.CallState{tc.state}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range reply.Calls {
			got = append(got, e.CallID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("state %s: got %v, want %v", tc.state, got, tc.want)
		}
	}
}

func TestCallsListCursor(t *testing.T) {
	for _, seq := range []uint64{1, 36, 1 << 40} {
		got, err := parseCallsListCursor(callsListCursor(seq))
		if err != nil || got != seq {
			t.Errorf("cursor of %d read back as %d, %v", seq, got, err)
		}
	}
	for _, bad := range []string{"", "v1.", "v1.0", "v2.10", "v1.-3", "v1.zzzzzzzzzzzzzzzzzzzz", "10"} {
		if _, err := parseCallsListCursor(bad); messages.CodeOf(err) != messages.CodeBadRequest {
			t.Errorf("cursor %q: err = %v, want bad_request", bad, err)
		}
	}
}

// storeCalls writes n finished calls, call00 the oldest, the namespace
// of each given by nsOf, and returns their IDs newest first.
func storeCalls(ctx context.Context, t *testing.T, l *ledger.Ledger, n int, nsOf func(i int) string) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("call%02d", i)
		storeCall(ctx, t, l, id, nsOf(i), messages.StateCompleted)
		ids = append([]string{id}, ids...)
	}
	return ids
}

// listAll pages through req's calls and returns their IDs.
func listAll(ctx context.Context, t *testing.T, log *callLog, req messages.CallsListRequest) []string {
	t.Helper()
	var got []string
	for range 100 {
		reply, err := log.list(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range reply.Calls {
			got = append(got, e.CallID)
			if e.State != messages.StateCompleted || e.Worker != "w1" || e.Attempts != 1 || e.Tool != e.Namespace+"-say" {
				t.Errorf("entry %+v", e)
			}
		}
		if reply.NextCursor == "" {
			return got
		}
		req.Cursor = reply.NextCursor
	}
	t.Fatal("no end after 100 pages")
	return nil
}

// TestCallsListPayloadWindows: calls a filter finds past the first
// window, which the scan reads as payloads, are listed as read whole,
// newest first, each once.
func TestCallsListPayloadWindows(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	ctx := context.Background()
	// The first window of a page of 2 is 76 events (25 calls): the three
	// beta calls are below it.
	storeCalls(ctx, t, l, 60, func(i int) string {
		if i < 3 {
			return "beta"
		}
		return "alpha"
	})
	got := listAll(ctx, t, log, messages.CallsListRequest{Namespace: "beta", Limit: 2})
	if want := []string{"call02", "call01", "call00"}; !slices.Equal(got, want) {
		t.Fatalf("beta's calls: got %v, want %v", got, want)
	}
	got = listAll(ctx, t, log, messages.CallsListRequest{Tool: "beta-say", States: []messages.CallState{messages.StateCompleted}, Limit: 2})
	if want := []string{"call02", "call01", "call00"}; !slices.Equal(got, want) {
		t.Fatalf("beta-say's completed calls: got %v, want %v", got, want)
	}
}

// TestCallsListPayloadForgeries: a payload another namespace stored under
// a subject of its own, shaped as a queued event, lists no call: neither
// a call that does not exist nor a second line of one that does.
func TestCallsListPayloadForgeries(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	ctx := context.Background()
	storeCalls(ctx, t, l, 3, func(int) string { return "beta" })
	for _, id := range []string{"ghost", "call01"} {
		now := time.Now().UTC()
		msg, err := l.EventMsg(messages.TurnBucket(""), "beta", &messages.CallEvent{CallID: id, Kind: messages.EventQueued, Time: now,
			Request: &messages.CallRequest{CallID: id, Tool: "beta-say", Namespace: "beta", Method: "say", QueuedAt: now}})
		if err != nil {
			t.Fatal(err)
		}
		if msg.Subject, err = log.names.Events().Subject(messages.TurnBucket(""), id, messages.EventResult, "mallory"); err != nil {
			t.Fatal(err)
		}
		if _, err := log.js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		storeCall(ctx, t, l, fmt.Sprintf("later%02d", i), "alpha", messages.StateCompleted)
	}
	got := listAll(ctx, t, log, messages.CallsListRequest{Namespace: "beta", Limit: 2})
	if want := []string{"call02", "call01", "call00"}; !slices.Equal(got, want) {
		t.Fatalf("beta's calls: got %v, want %v", got, want)
	}
}

// TestCallsListWindowWithGap: a window with a deleted message, whose
// payloads' sequences do not follow from their count, is read with its
// subjects instead.
func TestCallsListWindowWithGap(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	ctx := context.Background()
	storeCalls(ctx, t, l, 60, func(i int) string {
		if i < 3 {
			return "beta"
		}
		return "alpha"
	})
	// The events stream refuses deletes; this test's copy allows them.
	s, err := log.js.Stream(ctx, log.names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.DenyDelete = false
	if _, err := log.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// The started event of call10, in the second window.
	if err := s.DeleteMsg(ctx, 3*10+2); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := (&logScan{l: log}).readPayloads(ctx, 20, 40); ok || err != nil {
		t.Fatalf("payloads of a window with a gap: ok %v, err %v", ok, err)
	}
	got := listAll(ctx, t, log, messages.CallsListRequest{Namespace: "beta", Limit: 2})
	if want := []string{"call02", "call01", "call00"}; !slices.Equal(got, want) {
		t.Fatalf("beta's calls: got %v, want %v", got, want)
	}
}

// TestPeekEvent: the call ID and kind are read from the start of each
// kind of stored event as the ledger encodes it.
func TestPeekEvent(t *testing.T) {
	l := ledger.New(nil, nil, messages.MustNames(""))
	now := time.Now().UTC()
	for _, ev := range []*messages.CallEvent{
		{CallID: "c1", Kind: messages.EventQueued, Time: now, Request: &messages.CallRequest{CallID: "c1", Tool: "ns-t", Namespace: "ns", Method: "t", QueuedAt: now}},
		{CallID: "c2", Kind: messages.EventStarted, Time: now, Attempt: 1, Worker: "w"},
		{CallID: "c3", Kind: messages.EventResult, Time: now, Result: &messages.CallResult{CallID: "c3", Status: messages.StateFailed}},
		{CallID: strings.Repeat("x", 40), Kind: messages.EventLog, Time: now, Log: &messages.LogEntry{Level: "info", Message: "m"}},
	} {
		msg, err := l.EventMsg(messages.TurnBucket(""), "ns", ev)
		if err != nil {
			t.Fatal(err)
		}
		id, kind, ok := peekEvent(msg.Data)
		if !ok || string(id) != ev.CallID || kind != ev.Kind {
			t.Errorf("%s event of %s: peeked %q, %q, %v", ev.Kind, ev.CallID, id, kind, ok)
		}
	}
	for _, bad := range [][]byte{nil, {0x7b}, {0x82, 0xa4, 'k', 'i', 'n', 'd'}, {0x82, 0xa7, 'c', 'a', 'l', 'l', '_', 'i', 'd', 0xa5, 'x'}} {
		if _, _, ok := peekEvent(bad); ok {
			t.Errorf("peeked an event in %x", bad)
		}
	}
}

// TestCallsListGivesZeroDurationsOnceKnown: a call that started the
// moment it was queued and ended the moment it started waited 0 ms and ran
// 0 ms, which calls.list says, in JSON and in MessagePack; a call not yet
// started has neither.
func TestCallsListGivesZeroDurationsOnceKnown(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	ctx := context.Background()
	storeCall(ctx, t, l, "instant", "alpha", messages.StateCompleted)
	now := time.Now().UTC()
	waiting := &messages.CallRequest{CallID: "waiting", Tool: "alpha-say", Namespace: "alpha", Method: "say", QueuedAt: now}
	if _, err := l.Append(ctx, messages.TurnBucket(""), "alpha", &messages.CallEvent{CallID: "waiting", Kind: messages.EventQueued, Time: now, Request: waiting}); err != nil {
		t.Fatal(err)
	}
	reply, err := log.list(ctx, &messages.CallsListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Calls) != 2 || reply.Calls[0].CallID != "waiting" || reply.Calls[1].CallID != "instant" {
		t.Fatalf("calls %+v", reply.Calls)
	}
	for _, codec := range []messages.Codec{messages.JSONCodec, messages.Msgpack} {
		data, err := codec.Marshal(reply)
		if err != nil {
			t.Fatal(err)
		}
		var fields struct {
			Calls []map[string]any `json:"calls" msgpack:"calls"`
		}
		if codec == messages.JSONCodec {
			err = json.Unmarshal(data, &fields)
		} else {
			err = msgpack.Unmarshal(data, &fields)
		}
		if err != nil {
			t.Fatal(err)
		}
		waitingFields, instantFields := fields.Calls[0], fields.Calls[1]
		for _, key := range []string{"queue_wait_ms", "run_ms"} {
			if v, ok := instantFields[key]; !ok || fmt.Sprint(v) != "0" {
				t.Errorf("%s: the instant call's %s is %v (present %v), want 0", codec, key, v, ok)
			}
			if v, ok := waitingFields[key]; ok {
				t.Errorf("%s: the call not yet started has %s %v", codec, key, v)
			}
		}
	}
}

// storeApprovedCall writes the events of a call held for an approval up
// to its approval's pending event, as the coordinator writes them, and
// returns the function that writes the rest: the approval, the call
// queued again, and the worker's start and result.
func storeApprovedCall(ctx context.Context, t *testing.T, l *ledger.Ledger, id, ns string) (approve func()) {
	t.Helper()
	bucket := messages.TurnBucket("")
	held := time.Now().UTC()
	call := &messages.CallRequest{CallID: id, Tool: ns + "-say", Namespace: ns, Method: "say", QueuedAt: held}
	if _, err := l.Hold(ctx, call); err != nil {
		t.Fatal(err)
	}
	approval := &messages.Approval{ApprovalID: id, CallID: id, Tool: call.Tool, State: messages.ApprovalPending, CreatedAt: held}
	if _, err := l.Append(ctx, bucket, ns, &messages.CallEvent{CallID: id, Kind: messages.EventApproval, Time: held, Approval: approval}); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		now := time.Now().UTC()
		approved := *approval
		approved.State, approved.DecidedBy, approved.DecidedAt = messages.ApprovalApproved, "alice", now
		queued := *call
		queued.QueuedAt = now
		res := &messages.CallResult{CallID: id, Tool: call.Tool, Status: messages.StateCompleted, Attempt: 1, Worker: "w1", QueuedAt: now, StartedAt: now, FinishedAt: now}
		for _, ev := range []*messages.CallEvent{
			{CallID: id, Kind: messages.EventApproval, Time: now, Approval: &approved},
			{CallID: id, Kind: messages.EventQueued, Time: now, Request: &queued},
			{CallID: id, Kind: messages.EventStarted, Time: now, Attempt: 1, Worker: "w1"},
			{CallID: id, Kind: messages.EventResult, Time: now, Result: res},
		} {
			if _, err := l.Append(ctx, bucket, ns, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCallsListApprovedCallOnce: a call held for an approval and queued
// again once approved has two queued events; the log lists it once, where
// it was queued for its workers, whatever the page size and whether the
// scan reads the events with their subjects or as payloads.
func TestCallsListApprovedCallOnce(t *testing.T) {
	log, l := callLogOn(t, CallsListScanBudget)
	ctx := context.Background()
	storeCall(ctx, t, l, "call00", "alpha", messages.StateCompleted)
	approve := storeApprovedCall(ctx, t, l, "approved01", "alpha")
	storeCall(ctx, t, l, "call02", "alpha", messages.StateCompleted)
	approve()
	want := []string{"approved01", "call02", "call00"}
	for _, req := range []messages.CallsListRequest{
		{},
		{Limit: 1},
		{Limit: 2},
		{Namespace: "alpha", Limit: 1},
		{States: []messages.CallState{messages.StateCompleted}, Limit: 1},
	} {
		if got := listAll(ctx, t, log, req); !slices.Equal(got, want) {
			t.Errorf("%+v: got %v, want %v", req, got, want)
		}
	}
	// Past the first window, which is read with subjects, the scan reads
	// payloads.
	for i := range 40 {
		storeCall(ctx, t, l, fmt.Sprintf("later%02d", i), "beta", messages.StateCompleted)
	}
	for _, req := range []messages.CallsListRequest{{Namespace: "alpha", Limit: 1}, {Namespace: "alpha"}} {
		if got := listAll(ctx, t, log, req); !slices.Equal(got, want) {
			t.Errorf("%+v, after 40 later calls: got %v, want %v", req, got, want)
		}
	}
}
