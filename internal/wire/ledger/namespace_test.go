package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// setupLedgers returns a ledger on a server with Toolbus's streams, and
// another on a second connection, the forger's.
func setupLedgers(t *testing.T) (l, forger *ledger.Ledger, ctx context.Context) {
	l, forger, _, ctx = setupLedgersWatched(t)
	return l, forger, ctx
}

// setupLedgersWatched is setupLedgers with a watcher of the first
// ledger's events stream.
func setupLedgersWatched(t *testing.T) (l, forger *ledger.Ledger, w *ledger.Watcher, ctx context.Context) {
	t.Helper()
	srv := testenv.Server(t)
	ctx = testenv.Context(t)
	names := messages.MustNames("")
	open := func() *ledger.Ledger {
		nc := testenv.Connect(t, srv.URL())
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		l := ledger.New(nc, js, names)
		t.Cleanup(l.Close)
		return l
	}
	l = open()
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	return l, open(), ledger.NewWatcher(js, names), ctx
}

func result(callID, text string) *messages.CallResult {
	return &messages.CallResult{CallID: callID, Tool: "demo-echo", Status: messages.StateCompleted, Attempt: 1,
		Content: []messages.ContentBlock{messages.TextBlock(text)}, FinishedAt: time.Now().UTC()}
}

// Events written under another namespace than the call's, the one its
// queued event names, neither count nor pre-empt the call's own: every
// read of the ledger skips them, and a conditional write ignores them.
func TestEventsOfAnotherNamespaceAreIgnored(t *testing.T) {
	t.Parallel()
	l, forger, w, ctx := setupLedgersWatched(t)
	const id = "call-1"
	b := messages.TurnBucket("")
	req := &messages.CallRequest{CallID: id, Tool: "demo-echo", Namespace: "demo", Method: "echo", QueuedAt: time.Now().UTC()}
	if _, err := l.Append(ctx, "", "demo", &messages.CallEvent{CallID: id, Kind: messages.EventQueued, Time: req.QueuedAt, Request: req}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, b, "demo", &messages.CallEvent{CallID: id, Kind: messages.EventStarted, Time: time.Now().UTC(), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	snap, err := l.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	lastOwn := snap.LastSeq
	// The forger's result stands on its own subject: it wins there.
	if won, err := forger.Commit(ctx, b, "payments", result(id, "forged"), ""); err != nil || !won {
		t.Fatalf("forged commit: %v %v", won, err)
	}
	if _, err := forger.Append(ctx, b, "payments", &messages.CallEvent{CallID: id, Kind: messages.EventCancel, Time: time.Now().UTC(), Cancel: &messages.CancelInfo{Reason: "forged"}}); err != nil {
		t.Fatal(err)
	}
	// Under the call's namespace but another bucket than its turn's: not
	// the call's either.
	other := messages.TurnBucket("turn-1")
	if _, err := l.Append(ctx, other, "demo", &messages.CallEvent{CallID: id, Kind: messages.EventCancel, Time: time.Now().UTC(), Cancel: &messages.CancelInfo{Reason: "other bucket"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, other, "demo", &messages.CallEvent{CallID: id, Kind: messages.EventStarted, Time: time.Now().UTC(), Attempt: 7}); err != nil {
		t.Fatal(err)
	}
	snaps, err := l.Snapshots(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*ledger.Snapshot{"Snapshots": snaps[id], "Snapshot": mustSnapshot(ctx, t, l, id)} {
		if s.Namespace != "demo" || s.Bucket != b || s.Started == nil || s.Started.Attempt != 1 || s.Result != nil || s.Cancel != nil || s.State() != messages.StateRunning || s.LastSeq != lastOwn {
			t.Fatalf("%s counts another namespace's events: %+v", name, s)
		}
	}
	if ev, err := l.Last(ctx, b, "demo", id, messages.EventResult); err != nil || ev != nil {
		t.Fatalf("Last: %+v %v", ev, err)
	}
	// A write conditional on the call's events is not refused by them.
	if err := l.CommitIfUnchanged(ctx, b, "demo", result(id, "real"), lastOwn, ""); err != nil {
		t.Fatalf("CommitIfUnchanged: %v", err)
	}
	if won, err := l.Commit(ctx, b, "demo", result(id, "again"), ""); err != nil || won {
		t.Fatalf("a second result of the call's namespace: %v %v", won, err)
	}
	// A result under another bucket of the call's namespace is a write of
	// its own (a write's condition is on its bucket); no reader counts it.
	if _, err := l.Commit(ctx, other, "demo", result(id, "other bucket"), ""); err != nil {
		t.Fatalf("a result under another bucket: %v", err)
	}
	for _, ns := range []string{"", "demo"} {
		res, err := l.AwaitResult(ctx, b, ns, id)
		if err != nil || res.Content[0].Text != "real" {
			t.Fatalf("AwaitResult(%q): %+v %v", ns, res, err)
		}
	}
	var texts []string
	for ev, err := range w.Watch(ctx, "", id) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Namespace != "demo" || ev.Bucket != b {
			t.Fatalf("Watch yielded an event of namespace %s, bucket %s", ev.Namespace, ev.Bucket)
		}
		if ev.Result != nil {
			texts = append(texts, ev.Result.Content[0].Text)
		}
	}
	if len(texts) != 1 || texts[0] != "real" {
		t.Fatalf("Watch results %v", texts)
	}
	own, err := l.ReadOwn(ctx, b, "demo", id, messages.EventResult, messages.EventCancel)
	if err != nil || own.Result == nil || own.Result.Result.Content[0].Text != "real" || own.Cancel != nil {
		t.Fatalf("ReadOwn: %+v %v", own, err)
	}
}

// A call without a queued event has no namespace: nothing recorded under
// its ID counts, so a forger cannot make one up.
func TestEventsWithoutAQueuedEventDoNotMakeACall(t *testing.T) {
	t.Parallel()
	l, forger, ctx := setupLedgers(t)
	if won, err := forger.Commit(ctx, "21", "payments", result("call-2", "forged"), ""); err != nil || !won {
		t.Fatalf("forged commit: %v %v", won, err)
	}
	s, err := l.Snapshot(ctx, "call-2")
	if err != nil || s.Exists() || s.Result != nil {
		t.Fatalf("snapshot of a call never queued: %+v %v", s, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if res, err := l.AwaitResult(wctx, "", "", "call-2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitResult of a call never queued: %+v %v", res, err)
	}
}

func mustSnapshot(ctx context.Context, t *testing.T, l *ledger.Ledger, id string) *ledger.Snapshot {
	t.Helper()
	s, err := l.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
