package integration

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// The first quiet submit of a call asks for no receipt, and the
// coordinator writes its queued event without waiting for the stream's
// acknowledgement. A write the stream refuses is then found by the
// caller's look, like a lost submit: the look finds no call and sends
// copies, which ask for receipts and are written with acknowledgements,
// and the stream's refusal comes back to the caller as the copies'
// answer. Here the events stream takes messages of at most 4 KiB, and the
// call's arguments, which the coordinator accepts, make its queued event
// larger.
func TestAQuietSubmitsRefusedWriteReachesItsCaller(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	nc := testenv.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgSize = 4 << 10
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var receipts []bool // whether each submit seen asked for a receipt
	sniffer, err := nc.Subscribe("toolbus.api.calls.submit", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		receipts = append(receipts, m.Header.Get(messages.HeaderReceipt) != "")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sniffer.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	c := testenv.Client(t, srv.URL(), client.Options{Agent: "a"})
	res, err := c.Call(ctx, "demo-echo", map[string]string{"text": strings.Repeat("x", 8<<10)})
	if err == nil {
		t.Fatalf("a call whose queued event the stream refuses: result %+v, want the stream's refusal", res)
	}
	if !errors.Is(err, messages.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "maximum") {
		t.Errorf("error %q does not name the stream's refusal (its size limit)", err)
	}
	// The sniffer's callbacks may run after the answer came.
	var seen []bool
	testenv.Eventually(t, "a copy of the submit asking for a receipt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen[:0], receipts...)
		return slices.Contains(seen, true)
	})
	if seen[0] {
		t.Fatalf("submits seen, each asking for a receipt or not: %v; want a first without one, then copies that ask", seen)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("toolbus.events.*.*.queued.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(info.State.Subjects); n != 0 {
		t.Fatalf("the events stream holds queued events: %v", info.State.Subjects)
	}
	// A call that fits still runs.
	res, err = c.Call(ctx, "demo-echo", map[string]string{"text": "small"})
	if err != nil || res.IsError || len(res.Content) == 0 || res.Content[0].Text != "small" {
		t.Fatalf("a call that fits: %+v, %v", res, err)
	}
}

// Without a message ID, the condition that a call has no queued event yet
// is what keeps an unacknowledged write from queuing a call twice: the
// same quiet submit sent twice, neither asking for a receipt, queues one
// call, which runs once.
func TestAQuietSubmitSentTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	nc := testenv.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	route := nuid.Next()
	callID := route + nuid.Next()
	routeSubject := "toolbus.results." + route + "." + callID[len(route):]
	results, err := nc.SubscribeSync(routeSubject + ".>")
	if err != nil {
		t.Fatal(err)
	}
	// Every write of the call's queued event, whether the stream stores it
	// or not, passes this subscription.
	queuedSubject := "toolbus.events.21." + callID + ".queued.~.demo"
	writes, err := nc.SubscribeSync(queuedSubject)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		msg := nats.NewMsg("toolbus.api.calls.submit")
		msg.Header.Set("Content-Type", "application/json")
		msg.Reply = routeSubject
		msg.Data = []byte(`{"tool":"demo-echo","arguments":{"text":"once"},"route":"` + route + `","call_id":"` + callID + `","quiet":true}`)
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := results.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("the call's result: %v", err)
	}
	for i := range 2 {
		if _, err := writes.NextMsgWithContext(ctx); err != nil {
			t.Fatalf("write %d of the queued event: %v", i+1, err)
		}
	}
	// The stream takes its messages in order: once it has acknowledged a
	// message sent after both writes reached the server, it has decided
	// both.
	if _, err := js.Publish(ctx, "toolbus.events.21."+route+nuid.Next()+".progress.demo", nil); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("toolbus.events.21."+callID+".>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[queuedSubject]; n != 1 {
		t.Fatalf("the call has %d queued events, want 1 (%v)", n, info.State.Subjects)
	}
	if n := info.State.Subjects["toolbus.events.21."+callID+".result.demo"]; n != 1 {
		t.Fatalf("the call has %d results, want 1 (%v)", n, info.State.Subjects)
	}
}

// A call held for an approval is held once: a second quiet submit of its
// ID is answered as the held call, with the approval as it was stored,
// and writes nothing.
func TestAHeldCallSubmittedAgainIsHeldOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	policyFile := t.TempDir() + "/policy.yaml"
	writeFile(t, policyFile, "default: allow\nrules:\n  - {tool: \"demo:sha256\", effect: ask, reason: hashing needs a nod}\n")
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.PolicyFile = policyFile })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	nc := testenv.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	route := nuid.Next()
	callID := route + nuid.Next()
	routeSubject := "toolbus.results." + route + "." + callID[len(route):]
	answers, err := nc.SubscribeSync(routeSubject)
	if err != nil {
		t.Fatal(err)
	}
	var first messages.Approval
	for i := range 2 {
		msg := nats.NewMsg("toolbus.api.calls.submit")
		msg.Header.Set("Content-Type", "application/json")
		msg.Reply = routeSubject
		msg.Data = []byte(`{"tool":"demo-sha256","arguments":{"text":"x"},"agent":"a","route":"` + route + `","call_id":"` + callID + `","quiet":true}`)
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		answer, err := answers.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		var reply messages.SubmitReply
		if err := json.Unmarshal(answer.Data, &reply); err != nil || reply.State != messages.StateAwaitingApproval || reply.Approval == nil {
			t.Fatalf("answer %d: %s (%v), want the call awaiting its approval", i+1, answer.Data, err)
		}
		if i == 0 {
			first = *reply.Approval
			continue
		}
		if !reply.Duplicate || reply.Approval.ApprovalID != first.ApprovalID || !reply.Approval.CreatedAt.Equal(first.CreatedAt) || !reply.Approval.ExpiresAt.Equal(first.ExpiresAt) {
			t.Fatalf("second answer %+v (approval %+v), want the first's approval %+v, as a duplicate", reply, reply.Approval, first)
		}
	}
	stream, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("toolbus.events.*."+callID+".>"))
	if err != nil {
		t.Fatal(err)
	}
	queued := "toolbus.events.21." + callID + ".queued.~.demo"
	approval := "toolbus.events.21." + callID + ".approval.demo"
	if len(info.State.Subjects) != 2 || info.State.Subjects[queued] != 1 || info.State.Subjects[approval] != 1 {
		t.Fatalf("the held call's events: %v, want one queued event and one approval", info.State.Subjects)
	}
}

// A receipt is labelled with the protocol version, as every message of
// Toolbus is, and carries the request's reply token, as its other answers
// on the route do: a client that takes only answers with its token takes
// the receipt too.
func TestAReceiptCarriesTheVersionAndTheReplyToken(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	nc := testenv.Connect(t, srv.URL())
	route := nuid.Next()
	callID := route + nuid.Next()
	routeSubject := "toolbus.results." + route + "." + callID[len(route):]
	answers, err := nc.SubscribeSync(routeSubject)
	if err != nil {
		t.Fatal(err)
	}
	token := nuid.Next()
	msg := nats.NewMsg("toolbus.api.calls.submit")
	msg.Header.Set("Content-Type", "application/json")
	msg.Header.Set(messages.HeaderReceipt, routeSubject)
	msg.Header.Set(messages.HeaderReplyToken, token)
	msg.Reply = routeSubject
	msg.Data = []byte(`{"tool":"demo-echo","arguments":{"text":"x"},"route":"` + route + `","call_id":"` + callID + `","quiet":true}`)
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	receipt, err := answers.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if receipt.Header.Get(messages.HeaderReceipt) != messages.ReceiptSent || receipt.Header.Get(messages.HeaderVersion) != messages.ProtocolVersion || receipt.Header.Get(messages.HeaderReplyToken) != token {
		t.Fatalf("receipt headers %v, want %s, %s %s and the request's token", receipt.Header, messages.HeaderReceipt, messages.HeaderVersion, messages.ProtocolVersion)
	}
}

// A JSON submit whose arguments hold a number with more digits than a
// 64-bit float holds is refused: the policy would compare it as written,
// and the tool, whose work item carries it as a float, would get it
// rounded (a deny rule on 0.01 would miss 0.0100000000000000000001, which
// the tool reads as 0.01). Numbers a float carries as written pass.
func TestArgumentsTheToolWouldGetRoundedAreRefused(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	nc := testenv.Connect(t, srv.URL())
	data, code := jsonRequest(t, nc, "calls.submit", `{"tool":"demo-sleep","arguments":{"seconds":0.0100000000000000000001},"wait":true}`)
	var e messages.Error
	if err := json.Unmarshal(data, &e); err != nil || code != "422" || e.Code != messages.CodeInvalidArguments || !strings.Contains(e.Message, "0.0100000000000000000001 at /seconds") || !strings.Contains(e.Message, "as 0.01:") {
		t.Fatalf("a number the tool would get rounded: %s %s", code, data)
	}
	data, code = jsonRequest(t, nc, "calls.submit", `{"tool":"demo-sleep","arguments":{"seconds":0.01},"wait":true}`)
	var reply messages.SubmitReply
	if err := json.Unmarshal(data, &reply); err != nil || code != "" || reply.State != messages.StateCompleted {
		t.Fatalf("numbers a float carries as written: %s %s", code, data)
	}
}
