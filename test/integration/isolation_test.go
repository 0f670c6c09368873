package integration

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

func isCode(err error, code messages.ErrorCode) bool {
	return errors.Is(err, &messages.Error{Code: code})
}

// watchKinds follows a call to its end and returns the kinds of its events.
func watchKinds(t *testing.T, ctx context.Context, c *client.Client, callID string) []messages.EventKind {
	t.Helper()
	var kinds []messages.EventKind
	for ev, err := range c.Watch(ctx, callID) {
		if err != nil {
			t.Fatalf("watch %s: %v", callID, err)
		}
		kinds = append(kinds, ev.Kind)
	}
	return kinds
}

// TestAgentsReadOnlyTheirOwnCalls: with the deploy configuration and an
// identities file, an agent's user calls, waits for, watches and reads its
// own calls and turns through the coordinator and its route, while another
// agent's user can neither read them (calls.get, calls.events, turns.get,
// approvals.list), nor receive them (routes, inboxes, the events stream),
// nor make its calls on their route; what it tries changes nothing.
func TestAgentsReadOnlyTheirOwnCalls(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testAgentsReadOnlyTheirOwnCalls)
}

func testAgentsReadOnlyTheirOwnCalls(t *testing.T, kind deployKind) {
	d := identityDeployOf(t, kind)
	srv, as := d.srv, d.connector(t)
	ctx := testenv.Context(t)
	connA := as("agent_a")
	a := agentClient(t, connA, "support-bot")
	b := agentClient(t, as("agent_b"), "billing-bot")
	operator := agentClient(t, as("operator"), "")

	// A's calls work end to end under its permissions: on its route, with
	// an idempotency key, and followed with Wait, Watch, Get and Turn.
	res, err := a.Call(ctx, "demo-word_count", map[string]string{"text": "one two three"}, client.WithTurn("turn-a"))
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("A's call on its route: %+v %v", res, err)
	}
	if res, err := a.Call(ctx, "demo-word_count", map[string]string{"text": "keyed"}, client.WithIdempotencyKey("key-1")); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("A's idempotent call: %+v %v", res, err)
	}
	submitted, err := a.Submit(ctx, messages.SubmitRequest{Tool: "demo-word_count", Arguments: messages.JSON(`{"text":"four five"}`), Turn: "turn-a"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.Wait(ctx, submitted.CallID); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("A waiting for its call: %+v %v", res, err)
	}
	if kinds := watchKinds(t, ctx, a, submitted.CallID); len(kinds) < 2 || kinds[0] != messages.EventQueued || kinds[len(kinds)-1] != messages.EventResult {
		t.Fatalf("A watching its call: %v", kinds)
	}
	// A client not told to read through the coordinator finds out from the
	// server that its account has no JetStream.
	auto, err := client.New(connA, client.Options{Agent: "support-bot", Route: deployRoutes["agent_a"]})
	if err != nil {
		t.Fatal(err)
	}
	if kinds := watchKinds(t, ctx, auto, submitted.CallID); len(kinds) < 2 || kinds[len(kinds)-1] != messages.EventResult {
		t.Fatalf("A watching without CoordinatorReads: %v", kinds)
	}
	if info, err := a.Get(ctx, submitted.CallID); err != nil || info.State != messages.StateCompleted {
		t.Fatalf("A reading its call: %+v %v", info, err)
	}
	if turn, err := a.Turn(ctx, "turn-a"); err != nil || len(turn.Calls) != 2 {
		t.Fatalf("A reading its turn: %+v %v", turn, err)
	}
	// A call held for an operator's approval is followed live: the watch's
	// long poll answers as the approval is decided and the call runs.
	held, err := a.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"nod"}`), Turn: "turn-a2"})
	if err != nil || held.State != messages.StateAwaitingApproval {
		t.Fatalf("A's call held for approval: %+v %v", held, err)
	}
	watched := make(chan []messages.EventKind, 1)
	go func() {
		var kinds []messages.EventKind
		for ev, err := range a.Watch(ctx, held.CallID) {
			if err != nil {
				t.Errorf("watch: %v", err)
				break
			}
			kinds = append(kinds, ev.Kind)
		}
		watched <- kinds
	}()
	// A's prompt approval, pending while B tries its hand.
	prompt, err := a.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":0.01}`)})
	if err != nil || prompt.State != messages.StateAwaitingApproval {
		t.Fatalf("A's prompt approval: %+v %v", prompt, err)
	}

	streams := []string{"TOOLBUS_EVENTS", "KV_toolbus_turns", "KV_toolbus_approvals"}
	before := snapshot(t, srv, streams...)
	forbidden := func(what string, err error) {
		t.Helper()
		if !isCode(err, messages.CodeForbidden) {
			t.Errorf("%s: err = %v, want forbidden", what, err)
		}
	}
	// A refusal tells B nothing of the call: not whose it is, nor its state.
	tellsNothing := func(what string, err error) {
		t.Helper()
		forbidden(what, err)
		if err == nil {
			return
		}
		for _, word := range []string{"support-bot", "agent_a", string(messages.StateCompleted), string(messages.StateAwaitingApproval), "demo"} {
			if strings.Contains(err.Error(), word) {
				t.Errorf("%s: the refusal %q names %q", what, err, word)
			}
		}
	}
	_, err = b.Get(ctx, submitted.CallID)
	tellsNothing("B reading A's call", err)
	_, err = b.Get(ctx, held.CallID)
	tellsNothing("B reading A's call held for approval", err)
	_, err = b.Wait(ctx, submitted.CallID)
	forbidden("B waiting for A's call", err)
	for _, err := range b.Watch(ctx, submitted.CallID) {
		forbidden("B watching A's call", err)
		break
	}
	_, err = b.Turn(ctx, "turn-a")
	tellsNothing("B reading A's turn", err)
	// A turn belongs to the agent that named it first: B's calls and
	// tools cannot join A's turn, and the refusal does not name A.
	_, err = b.Submit(ctx, messages.SubmitRequest{Tool: "demo-word_count", Arguments: messages.JSON(`{"text":"x"}`), Turn: "turn-a"})
	if !isCode(err, messages.CodeConflict) || strings.Contains(err.Error(), "support-bot") {
		t.Errorf("B submitting into A's turn: err = %v, want conflict naming no agent of A's", err)
	}
	_, err = b.Activate(ctx, "turn-a", "demo-echo")
	if !isCode(err, messages.CodeConflict) || strings.Contains(err.Error(), "support-bot") {
		t.Errorf("B activating tools in A's turn: err = %v, want conflict naming no agent of A's", err)
	}
	// B's user serves several agents: naming none, it would act in A's
	// turn as no agent at all, which no turn check could refuse.
	bNoAgent := agentClient(t, as("agent_b"), "")
	_, err = bNoAgent.Activate(ctx, "turn-a", "demo-echo")
	if !isCode(err, messages.CodeBadRequest) {
		t.Errorf("B, naming no agent, activating tools in A's turn: err = %v, want bad_request", err)
	}
	_, err = bNoAgent.ListTools(ctx, messages.ListToolsRequest{Turn: "turn-a"})
	if !isCode(err, messages.CodeBadRequest) {
		t.Errorf("B, naming no agent, listing A's turn's tools: err = %v, want bad_request", err)
	}
	_, err = bNoAgent.Discover(ctx, messages.DiscoverRequest{Query: "count words", Turn: "turn-a"})
	if !isCode(err, messages.CodeBadRequest) {
		t.Errorf("B, naming no agent, discovering into A's turn: err = %v, want bad_request", err)
	}
	_, err = b.ListApprovals(ctx, messages.ListApprovalsRequest{Agent: "support-bot"})
	forbidden("B listing A's approvals", err)
	_, err = b.Answer(ctx, messages.DecideRequest{ApprovalID: prompt.Approval.ApprovalID, Decision: messages.DecisionApprove, By: "the user"})
	tellsNothing("B answering A's approval", err)
	_, err = b.Cancel(ctx, prompt.CallID, "not mine")
	tellsNothing("B cancelling A's call", err)
	_, err = b.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), Route: deployRoutes["agent_a"]})
	forbidden("B submitting on A's route", err)
	routed := deployRoutes["agent_a"] + nuid.Next()
	_, err = b.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), Route: deployRoutes["agent_a"], CallID: routed, Quiet: false})
	forbidden("B submitting a call ID on A's route", err)
	_, err = b.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), CallID: deployRoutes["agent_a"] + nuid.Next()})
	forbidden("B submitting a call ID on A's route, naming no route", err)
	_, err = b.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), Notify: "_INBOX.x"})
	forbidden("B asking for a notify copy", err)
	// A user of several agents that names none lists only its own agents'.
	listed, err := b.ListApprovals(ctx, messages.ListApprovalsRequest{State: "all"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ap := range listed.Approvals {
		if ap.Agent == "support-bot" {
			t.Errorf("B listed A's approval %s", ap.ApprovalID)
		}
	}

	// Nor can B receive A's results or replies, or read the events stream.
	intruderB := d.intruder(t, "agent_b")
	intruderB.subscribeDenied("receive A's routed results", "toolbus.results."+deployRoutes["agent_a"]+".>")
	intruderB.subscribeDenied("receive A's replies", "_INBOX_agent_a.>")
	intruderB.subscribeDenied("receive every reply", "_INBOX.>")
	intruderB.subscribeDenied("receive every routed result", "toolbus.results.>")
	intruderB.subscribeDenied("listen to call events", "toolbus.events.>")
	lastResult, _ := json.Marshal(map[string]string{"last_by_subj": "toolbus.events.*." + submitted.CallID + ".result.*"})
	intruderB.denied("read A's result with a direct get", "$JS.API.DIRECT.GET.TOOLBUS_EVENTS", lastResult)
	intruderB.denied("read A's result by subject", "$JS.API.DIRECT.GET.TOOLBUS_EVENTS.toolbus.events."+messages.TurnBucket("")+"."+submitted.CallID+".result.demo", nil)
	consumer, _ := json.Marshal(map[string]any{"stream_name": "TOOLBUS_EVENTS", "config": map[string]any{"filter_subject": "toolbus.events.>", "deliver_policy": "all", "ack_policy": "none"}})
	if why := intruderB.refusedByServer("create a consumer on the events stream", "$JS.API.CONSUMER.CREATE.TOOLBUS_EVENTS", consumer); why == "" {
		t.Error("creating a consumer from AGENTS: refused without a reason")
	}

	if after := snapshot(t, srv, streams...); !reflect.DeepEqual(before, after) {
		t.Errorf("refused requests changed the streams:\nbefore %+v\nafter  %+v", before, after)
	}
	// The refused reads are audited like the refused actions.
	if n := countAudited(t, as("auditor"), "forbidden", 9); n < 9 {
		t.Errorf("%d forbidden requests audited, want at least 9", n)
	}

	// Operators read every agent's calls and approvals.
	if _, err := operator.Get(ctx, submitted.CallID); err != nil {
		t.Errorf("the operator reading A's call: %v", err)
	}
	all, err := operator.ListApprovals(ctx, messages.ListApprovalsRequest{})
	if err != nil || len(all.Approvals) < 2 {
		t.Fatalf("the operator listing approvals: %+v %v", all, err)
	}
	if _, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: held.Approval.ApprovalID, Decision: messages.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	kinds := receive(t, watched, "A's watch of its approved call")
	if len(kinds) < 3 || kinds[len(kinds)-1] != messages.EventResult {
		t.Errorf("A's watch of its approved call: %v", kinds)
	}
	// A answers its own prompt approval, and its call runs.
	if _, err := a.Answer(ctx, messages.DecideRequest{ApprovalID: prompt.Approval.ApprovalID, Decision: messages.DecisionApprove, By: "the user"}); err != nil {
		t.Fatalf("A answering its approval: %v", err)
	}
	if res, err := a.Wait(ctx, prompt.CallID); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("A's answered call: %+v %v", res, err)
	}
}

// rawWait sends calls.get with wait_ms as any-language client would, and
// returns the reply's error code ("" for a call info).
func rawWait(ctx context.Context, nc *nats.Conn, endpoint string, body any) (messages.ErrorCode, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	msg := &nats.Msg{Subject: "toolbus.api." + endpoint, Header: nats.Header(messages.JSONCodec.NewHeader()), Data: data}
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return "", err
	}
	if reply.Header.Get("Nats-Service-Error-Code") == "" {
		return "", nil
	}
	var e messages.Error
	if err := json.Unmarshal(reply.Data, &e); err != nil {
		return "", err
	}
	return e.Code, nil
}

// holdForApproval submits a call of agent A's that the identity deploy's
// policy holds for an operator's approval: one that can be waited on until
// the test decides it.
func holdForApproval(t *testing.T, ctx context.Context, a *client.Client) *messages.SubmitReply {
	t.Helper()
	held, err := a.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"hold"}`)})
	if err != nil || held.State != messages.StateAwaitingApproval {
		t.Fatalf("A's call held for approval: %+v %v", held, err)
	}
	return held
}

// TestCopiesOfAHeldReadTakeNoWaitOfTheirOwn: copies of a held calls.get,
// sent by its caller with the first's reply token to the first's reply
// subject while the coordinator holds the first (as the SDK copies a
// request it has no receipt for), are answered by the first's answer and
// take none of the user's waits:
// at a limit of one wait, no copy is refused with too_many_requests. A
// request of its own, to another reply subject, is.
func TestCopiesOfAHeldReadTakeNoWaitOfTheirOwn(t *testing.T) {
	t.Parallel()
	_, as := identityDeploy(t, func(cfg *coordinator.Config) { cfg.MaxWaitsPerUser = 1 })
	ctx := testenv.Context(t)
	connA := as("agent_a")
	a := agentClient(t, connA, "support-bot")
	operator := agentClient(t, as("operator"), "")
	held := holdForApproval(t, ctx, a)
	answers, err := connA.SubscribeSync(connA.NewRespInbox())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"call_id": held.CallID, "wait_ms": 240_000})
	// The request crosses the import from the agents' account, which gives
	// each copy a reply subject of its own: the token, the same on each
	// copy as the SDK sends it, is what makes them copies.
	token := nuid.Next()
	send := func() {
		msg := &nats.Msg{Subject: "toolbus.api.calls.get", Reply: answers.Subject, Header: nats.Header(messages.JSONCodec.NewHeader()), Data: body}
		msg.Header.Set(messages.HeaderReplyToken, token)
		if err := connA.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	send()
	testenv.Eventually(t, "the first to hold A's only wait", func() bool {
		code, err := rawWait(ctx, connA, "calls.events", map[string]any{"call_id": held.CallID, "after": 1 << 40, "wait_ms": 1})
		return err == nil && code == messages.CodeTooManyRequests
	})
	const copies = 3
	for range copies {
		send()
	}
	// A request of A's own after the copies is refused: the first still
	// holds the place, and the coordinator has had the copies.
	if code, err := rawWait(ctx, connA, "calls.get", map[string]any{"call_id": held.CallID, "wait_ms": 240_000}); err != nil || code != messages.CodeTooManyRequests {
		t.Fatalf("A's own held read beside the first: %q %v, want too_many_requests", code, err)
	}
	if _, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: held.Approval.ApprovalID, Decision: messages.DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	msg, err := answers.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var info messages.CallInfo
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" || json.Unmarshal(msg.Data, &info) != nil || info.Result == nil {
		t.Fatalf("the first answer to the copied read: %s %s, want the call with its result", code, msg.Data)
	}
	// Flushed after the answer: a copy refused at once would have come first.
	if err := connA.Flush(); err != nil {
		t.Fatal(err)
	}
	for n, _, _ := answers.Pending(); n > 0; n-- {
		more, err := answers.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := more.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("a copy of the held read was answered on its own: %s %s", code, more.Data)
		}
	}
}

// TestOneAgentsWaitsDoNotStarveAnother: a user holds at most
// MaxWaitsPerUser long waits, one more is refused with
// too_many_requests, and another agent's calls go on meanwhile.
func TestOneAgentsWaitsDoNotStarveAnother(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testOneAgentsWaitsDoNotStarveAnother)
}

func testOneAgentsWaitsDoNotStarveAnother(t *testing.T, kind deployKind) {
	const most = 3
	d := identityDeployOf(t, kind, func(cfg *coordinator.Config) { cfg.MaxWaitsPerUser = most })
	as := d.connector(t)
	ctx := testenv.Context(t)
	connA := as("agent_a")
	a := agentClient(t, connA, "support-bot")
	b := agentClient(t, as("agent_b"), "billing-bot")
	operator := agentClient(t, as("operator"), "")

	held := holdForApproval(t, ctx, a)
	var waits sync.WaitGroup
	codes := make(chan messages.ErrorCode, most)
	for range most {
		waits.Go(func() {
			for {
				// Held until the call ends below, however long a busy
				// machine takes to get there.
				code, err := rawWait(ctx, connA, "calls.get", map[string]any{"call_id": held.CallID, "wait_ms": 240_000})
				if err == nil && code == messages.CodeTooManyRequests {
					continue // the probe below held a place for a moment
				}
				if err != nil {
					t.Errorf("A's wait: %v", err)
				}
				codes <- code
				return
			}
		})
	}
	// No signal says that the coordinator holds A's waits: ask until it
	// refuses one more.
	testenv.Eventually(t, "A's waits to reach its limit", func() bool {
		code, err := rawWait(ctx, connA, "calls.events", map[string]any{"call_id": held.CallID, "after": 1 << 40, "wait_ms": 1})
		return err == nil && code == messages.CodeTooManyRequests
	})
	if _, err := a.Submit(ctx, messages.SubmitRequest{Tool: "demo-word_count", Arguments: messages.JSON(`{"text":"x"}`), Wait: true}); !isCode(err, messages.CodeTooManyRequests) {
		t.Errorf("A's submit with wait beyond its limit: err = %v, want too_many_requests", err)
	}
	batch := map[string]any{"format": "anthropic", "turn": "turn-a", "wait_ms": 60_000,
		"tool_calls": []map[string]any{{"type": "tool_use", "id": "toolu_1", "name": "demo-word_count", "input": map[string]string{"text": "x"}}}}
	if code, err := rawWait(ctx, connA, "calls.submit_batch", batch); err != nil || code != messages.CodeTooManyRequests {
		t.Errorf("A's batch with wait_ms beyond its limit: %s %v, want too_many_requests", code, err)
	}

	// B's calls, waits included, are not held up by A's.
	start := time.Now()
	if res, err := b.Call(ctx, "demo-word_count", map[string]string{"text": "not starved"}); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("B's call while A is at its limit: %+v %v", res, err)
	}
	reply, err := b.Submit(ctx, messages.SubmitRequest{Tool: "demo-word_count", Arguments: messages.JSON(`{"text":"waits too"}`), Wait: true})
	if err != nil || reply.Result == nil {
		t.Fatalf("B's submit with wait while A is at its limit: %+v %v", reply, err)
	}
	t.Logf("B's call and waiting submit took %v", time.Since(start))

	// The call's result ends A's waits at once, and frees its places.
	if _, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: held.Approval.ApprovalID, Decision: messages.DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	waits.Wait()
	for range most {
		if code := <-codes; code != "" {
			t.Errorf("A's held wait answered %s", code)
		}
	}
	if info, err := a.Get(ctx, held.CallID); err != nil || info.Result == nil {
		t.Fatalf("A's denied call: %+v %v", info, err)
	}
	if code, err := rawWait(ctx, connA, "calls.get", map[string]any{"call_id": held.CallID, "wait_ms": 1000}); err != nil || code != "" {
		t.Errorf("A's wait once its places are free: %s %v", code, err)
	}
}
