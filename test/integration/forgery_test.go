package integration

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// forger writes results for calls that are not its namespace's, as a
// worker of namespace payments would if nothing confined it: on a
// connection without permissions (the dev configuration), under its own
// namespace's result subject, the only one it could ever write.
type forger struct {
	t      *testing.T
	ledger *ledger.Ledger
}

func newForger(t *testing.T, url string) *forger {
	nc := testenv.Connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(nc, js, names)
	t.Cleanup(l.Close)
	return &forger{t: t, ledger: l}
}

// forge commits a completed result saying "forged" for the call, under
// the bucket of a call outside any turn, and fails the test unless the
// stream took it.
func (f *forger) forge(ctx context.Context, callID string) {
	f.t.Helper()
	if won, err := f.forgeIn(ctx, messages.TurnBucket(""), "payments", callID); err != nil || !won {
		f.t.Fatalf("the forged result was not stored: %v %v", won, err)
	}
}

// forgeIn commits a completed result saying "forged" for the call under
// bucket and namespace ns, and reports whether the stream took it.
func (f *forger) forgeIn(ctx context.Context, bucket, ns, callID string) (bool, error) {
	forged := messages.CallResult{CallID: callID, Tool: "demo-gate", Status: messages.StateCompleted, Attempt: 1, Worker: "forger",
		Content: []messages.ContentBlock{messages.TextBlock("forged")}, FinishedAt: time.Now().UTC()}
	return f.ledger.Commit(ctx, bucket, ns, &forged, "")
}

func resultText(res *messages.CallResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	return res.Content[0].Text
}

// forgeryBundle is a dev server with a coordinator, a worker of namespace
// demo serving a gate, an agent, and a forger.
type forgeryBundle struct {
	url    string
	ctx    context.Context
	gate   *gate
	agent  *client.Client
	forger *forger
}

func setupForgery(t *testing.T) *forgeryBundle {
	t.Helper()
	srv := testenv.Server(t)
	url := srv.URL()
	testenv.Coordinator(t, url)
	g := newGate()
	testenv.Worker(t, url, worker.Config{}, worker.Namespace{Name: "demo", Tools: []worker.Tool{g.tool()}})
	return &forgeryBundle{url: url, ctx: testenv.Context(t), gate: g, agent: testenv.Client(t, url, client.Options{Agent: "agent"}), forger: newForger(t, url)}
}

// A result another namespace wrote under a call's ID neither counts nor
// pre-empts the call's own: calls.get does not report it while the call
// runs, and reports the real result once the tool ends; a watch skips it.
func TestForgedResultIsIgnoredByCallsGet(t *testing.T) {
	t.Parallel()
	b := setupForgery(t)
	r, err := b.agent.Submit(b.ctx, messages.SubmitRequest{Tool: "demo-gate", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, b.gate.started, "the call to start")
	b.forger.forge(b.ctx, r.CallID)
	info, err := b.agent.Get(b.ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Result != nil || info.State == messages.StateCompleted {
		t.Fatalf("calls.get reports the forged result: %+v", info)
	}
	close(b.gate.release)
	if res, err := b.agent.Wait(b.ctx, r.CallID); err != nil || resultText(res) != "released" {
		t.Fatalf("result: %+v %v", res, err)
	}
	info, err = b.agent.Get(b.ctx, r.CallID)
	if err != nil || info.State != messages.StateCompleted || resultText(info.Result) != "released" {
		t.Fatalf("calls.get after the tool ended: %+v %v", info, err)
	}
	var kinds []messages.EventKind
	for ev, err := range b.agent.Watch(b.ctx, r.CallID) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Result != nil && resultText(ev.Result) != "released" {
			t.Fatalf("the watch yielded the forged result: %+v", ev.Result)
		}
		kinds = append(kinds, ev.Kind)
	}
	if len(kinds) == 0 || kinds[0] != messages.EventQueued || kinds[len(kinds)-1] != messages.EventResult {
		t.Fatalf("watched events %v", kinds)
	}
}

// A call's events count only under the bucket of its turn, the one its
// queued event names: a cancellation written under the call's namespace
// but another bucket is not the call's, nor is another namespace's result
// there; and the call's result, once stored, wins over any written
// later under another bucket of its namespace.
func TestEventsUnderAnotherBucketDoNotCount(t *testing.T) {
	t.Parallel()
	b := setupForgery(t)
	r, err := b.agent.Submit(b.ctx, messages.SubmitRequest{Tool: "demo-gate", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, b.gate.started, "the call to start")
	testenv.Eventually(t, "the call's start to be recorded", func() bool {
		info, err := b.agent.Get(b.ctx, r.CallID)
		return err == nil && info.State == messages.StateRunning
	})
	other := messages.TurnBucket("turn-1")
	if other == messages.TurnBucket("") {
		t.Fatal("the test's buckets are the same")
	}
	if _, err := b.forger.ledger.Append(b.ctx, other, "demo", &messages.CallEvent{CallID: r.CallID, Kind: messages.EventCancel, Time: time.Now().UTC(),
		Cancel: &messages.CancelInfo{Reason: "forged"}}); err != nil {
		t.Fatal(err)
	}
	if won, err := b.forger.forgeIn(b.ctx, other, "payments", r.CallID); err != nil || !won {
		t.Fatalf("the forged result was not stored: %v %v", won, err)
	}
	info, err := b.agent.Get(b.ctx, r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Result != nil || info.CancelRequested || info.State != messages.StateRunning {
		t.Fatalf("calls.get counts events of another bucket: %+v", info)
	}
	close(b.gate.release)
	if res, err := b.agent.Wait(b.ctx, r.CallID); err != nil || resultText(res) != "released" {
		t.Fatalf("result: %+v %v", res, err)
	}
	// A later result under another bucket of the call's namespace may be
	// stored (a write's condition is on its own bucket), but counts for no
	// reader: the call keeps its result.
	if _, err := b.forger.forgeIn(b.ctx, other, "demo", r.CallID); err != nil {
		t.Fatal(err)
	}
	info, err = b.agent.Get(b.ctx, r.CallID)
	if err != nil || info.State != messages.StateCompleted || resultText(info.Result) != "released" || info.CancelRequested {
		t.Fatalf("calls.get after the tool ended: %+v %v", info, err)
	}
}

// The SDK's Wait, following a call by its ID alone, takes the call's
// namespace from its queued event and ignores a result written under
// another one, before and after it starts waiting.
func TestForgedResultIsIgnoredByWait(t *testing.T) {
	t.Parallel()
	b := setupForgery(t)
	r, err := b.agent.Submit(b.ctx, messages.SubmitRequest{Tool: "demo-gate", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, b.gate.started, "the call to start")
	b.forger.forge(b.ctx, r.CallID)
	wctx, cancel := context.WithTimeout(b.ctx, 2*ledger.ResultCheckInterval+time.Second)
	res, err := b.agent.Wait(wctx, r.CallID)
	cancel()
	if err == nil {
		t.Fatalf("Wait returned the forged result: %+v", res)
	}
	done := make(chan *messages.CallResult, 1)
	go func() {
		res, err := b.agent.Wait(b.ctx, r.CallID)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	close(b.gate.release)
	if res := receive(t, done, "the result"); resultText(res) != "released" || res.Worker == "forger" {
		t.Fatalf("Wait: %+v", res)
	}
}

// Call follows its call on the client's route: the events stream
// republishes every result, the forged one too (on the route subject
// ending with the forger's namespace), and the client drops it.
func TestForgedRoutedResultIsIgnoredByCall(t *testing.T) {
	t.Parallel()
	b := setupForgery(t)
	// The forger sees every call queued (nothing confines it here) and
	// forges each one's result at once, before the tool can end.
	watcher := testenv.Connect(t, b.url)
	forged := make(chan string, 1)
	queuedFilter, _ := names.Filters().EventKind(messages.EventQueued)
	if _, err := watcher.Subscribe(queuedFilter, func(m *nats.Msg) {
		var ev messages.CallEvent
		if _, err := messages.Decode(messages.Header(m.Header), m.Data, &ev); err == nil {
			b.forger.forge(b.ctx, ev.CallID)
			forged <- ev.CallID
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	// The route's subscription sees the forged copy, so it is there to drop.
	route := testenv.Connect(t, b.url)
	copies, err := route.SubscribeSync(names.Prefix() + ".results.*.*.payments")
	if err != nil {
		t.Fatal(err)
	}
	if err := route.Flush(); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res *messages.CallResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := b.agent.Call(b.ctx, "demo-gate", struct{}{})
		done <- outcome{res, err}
	}()
	id := receive(t, forged, "the forged result")
	if got := receive(t, b.gate.started, "the call to start"); got != id {
		t.Fatalf("started %s, forged %s", got, id)
	}
	if msg, err := copies.NextMsgWithContext(b.ctx); err != nil || !strings.HasSuffix(msg.Subject, id[messages.RouteLength:]+".payments") {
		t.Fatalf("the forged result was not routed: %v %v", msg, err)
	}
	select {
	case o := <-done:
		t.Fatalf("Call returned before the tool ended: %+v %v", o.res, o.err)
	default:
	}
	close(b.gate.release)
	o := receive(t, done, "the call's result")
	if o.err != nil || resultText(o.res) != "released" || o.res.CallID != id {
		t.Fatalf("Call: %+v %v", o.res, o.err)
	}
}

// A peer that still speaks protocol version 1 is told what changed.
func TestVersionOneRequestIsRefused(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	nc := testenv.Connect(t, srv.URL())
	msg := nats.NewMsg(names.Prefix() + ".api.calls.get")
	msg.Header.Set(messages.HeaderContentType, messages.ContentTypeJSON)
	msg.Header.Set(messages.HeaderVersion, "1")
	msg.Data = []byte(`{"call_id":"abc"}`)
	reply, err := nc.RequestMsgWithContext(testenv.Context(t), msg)
	if err != nil {
		t.Fatal(err)
	}
	// The refusal is in the request's encoding, JSON.
	var refusal messages.Error
	if err := json.Unmarshal(reply.Data, &refusal); err != nil || reply.Header.Get("Nats-Service-Error-Code") != "400" ||
		refusal.Code != messages.CodeUnsupportedVersion || !strings.Contains(refusal.Message, "<namespace>") {
		t.Fatalf("version 1 request answered %v %s", reply.Header, reply.Data)
	}
}

// TestWorkerIsConfinedToItsNamespacesEvents runs the deploy configuration
// with workers of namespaces demo and payments under their own users. The
// demo worker's user cannot write a payments call's events (its result,
// start or progress), nor the events only the coordinator writes, nor
// read a payments call's events by any form of read, nor follow the
// events stream; the events stream is exactly as it was. Its own worker
// runtime works under these permissions: a call delivered again runs
// after its record was read, and the payments call ends with its own
// result.
func TestWorkerIsConfinedToItsNamespacesEvents(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testWorkerIsConfinedToItsNamespacesEvents)
}

func testWorkerIsConfinedToItsNamespacesEvents(t *testing.T, kind deployKind) {
	d := startDeploy(t, kind, true)
	srv, url := d.srv, d.url
	serviceViolations := make(chan error, 16)
	as := func(user, _ string) *nats.Conn {
		return testenv.Connect(t, url, append(d.opts(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				select {
				case serviceViolations <- err:
				default:
				}
			}
		}))...)
	}
	ctx := testenv.Context(t)
	testenv.Coordinator(t, url, func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator", "coordinator-secret")
		cfg.Identities = d.ids
	})
	agent := agentClient(t, as("agent_a", "agent-a-secret"), "support-bot")

	// A demo call is delivered twice: its first worker stops while it
	// runs and hands it back; the second reads the call's record (was it
	// cancelled, has it a result?) with its own user before running it.
	first := newGate()
	firstWorker, err := worker.New(worker.Config{Conn: as("worker_demo", "worker-demo-secret"), Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := firstWorker.Serve(worker.Namespace{Name: "demo", Tools: []worker.Tool{first.tool()}}); err != nil {
		t.Fatal(err)
	}
	if err := firstWorker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rerun, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "demo-gate", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, first.started, "the first attempt")
	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_ = firstWorker.Stop(stopCtx)
	cancel()
	second := newGate()
	close(second.release)
	testenv.Worker(t, url, worker.Config{Conn: as("worker_demo", "worker-demo-secret")}, worker.Namespace{Name: "demo", Tools: []worker.Tool{second.tool()}})
	res, err := agent.Wait(ctx, rerun.CallID)
	if err != nil || res.Status != messages.StateCompleted || res.Attempt != 2 {
		t.Fatalf("the call delivered again: %+v %v", res, err)
	}

	// A payments call runs, its start recorded.
	hold := newGate()
	testenv.Worker(t, url, worker.Config{Conn: as("worker_payments", "worker-payments-secret"), StartDelay: time.Millisecond},
		worker.Namespace{Name: "payments", Tools: []worker.Tool{hold.tool()}})
	held, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "payments-gate", Arguments: messages.JSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, hold.started, "the payments call to start")
	testenv.Eventually(t, "the payments call's start to be recorded", func() bool {
		info, err := agent.Get(ctx, held.CallID)
		return err == nil && info.State == messages.StateRunning
	})

	events := names.EventsStream()
	before := snapshot(t, srv, events)
	demoWorker := d.intruder(t, "worker_demo")
	// Both calls are outside any turn: under the bucket of no turn.
	bucket := messages.TurnBucket("")
	event := func(kind messages.EventKind, ns string) string {
		return names.Prefix() + ".events." + bucket + "." + held.CallID + "." + string(kind) + "." + ns
	}
	forged, err := messages.Msgpack.Marshal(&messages.CallEvent{CallID: held.CallID, Kind: messages.EventResult,
		Result: &messages.CallResult{CallID: held.CallID, Status: messages.StateCompleted, Content: []messages.ContentBlock{messages.TextBlock("forged")}}})
	if err != nil {
		t.Fatal(err)
	}
	for what, subject := range map[string]string{
		"commit a payments call's result":                   event(messages.EventResult, "payments"),
		"record a payments call's start":                    event(messages.EventStarted, "payments"),
		"report a payments call's progress":                 event(messages.EventProgress, "payments"),
		"log for a payments call":                           event(messages.EventLog, "payments"),
		"record a call as queued":                           event(messages.EventQueued, "demo"),
		"record a cancellation":                             event(messages.EventCancel, "demo"),
		"record an approval":                                event(messages.EventApproval, "demo"),
		"write a result on a version 1 subject":             names.Prefix() + ".events." + held.CallID + ".result",
		"write a result without a bucket":                   names.Prefix() + ".events." + held.CallID + ".result.payments",
		"commit a payments call's result in another bucket": names.Prefix() + ".events." + messages.TurnBucket("turn-1") + "." + held.CallID + ".result.payments",
	} {
		demoWorker.denied(what, subject, forged)
	}
	for what, req := range map[string]struct {
		subject string
		body    string
	}{
		"read a payments call's events in a batch":        {"$JS.API.DIRECT.GET." + events, `{"multi_last":["` + names.Prefix() + `.events.*.` + held.CallID + `.>"]}`},
		"read a payments call's queued event":             {"$JS.API.DIRECT.GET." + events + "." + event(messages.EventQueued, "payments"), ""},
		"read a payments call's start":                    {"$JS.API.DIRECT.GET." + events + "." + event(messages.EventStarted, "payments"), ""},
		"read any namespace's events by a wildcard":       {"$JS.API.DIRECT.GET." + events + "." + names.Prefix() + ".events." + bucket + "." + held.CallID + ".queued.*", ""},
		"read a payments call's queued event in any turn": {"$JS.API.DIRECT.GET." + events + "." + names.Prefix() + ".events." + bucket + "." + held.CallID + ".queued.*.payments", ""},
		"read an event from the leader":                   {"$JS.API.STREAM.MSG.GET." + events, `{"last_by_subj":"` + event(messages.EventQueued, "payments") + `"}`},
		"follow the events stream":                        {"$JS.API.CONSUMER.CREATE." + events + ".spy." + names.Prefix() + ".events.>", `{}`},
		"follow the payments call's events":               {"$JS.API.CONSUMER.CREATE." + events + ".spy." + names.Prefix() + ".events.*." + held.CallID + ".>", `{}`},
	} {
		demoWorker.denied(what, req.subject, []byte(req.body))
	}
	demoWorker.subscribeDenied("listen to payments results", names.Prefix()+".events.*.*.result.payments")
	// Its own namespace's events it may read, one by one.
	own := make(chan *nats.Msg, 1)
	demoWorker.request("$JS.API.DIRECT.GET."+events+"."+names.Prefix()+".events."+bucket+"."+rerun.CallID+".result.demo", nil, own)
	if msg := receive(t, own, "its own call's result"); msg.Header.Get("Nats-Sequence") == "" {
		t.Fatalf("reading its own call's result: %v %s", msg.Header, msg.Data)
	}
	if after := snapshot(t, srv, events); !reflect.DeepEqual(after, before) {
		t.Fatalf("the events stream changed:\nbefore %+v\nafter  %+v", before, after)
	}

	close(hold.release)
	if res, err := agent.Wait(ctx, held.CallID); err != nil || res.Status != messages.StateCompleted || resultText(res) != "released" {
		t.Fatalf("the payments call: %+v %v", res, err)
	}
	select {
	case err := <-serviceViolations:
		t.Fatalf("a service hit a permission it needs: %v", err)
	default:
	}
}
