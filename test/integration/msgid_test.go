package integration

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestGuessedQueuedMessageIDHoldsNothingUp: a worker may set message IDs
// on its own namespace's events, and the events stream drops a write
// whose Nats-Msg-Id it saw in the last two minutes. A worker of demo that
// guesses the ID of a call about to be submitted stores an event of its
// own under that call's queued event's message ID, <call_id>.queued; the
// call's submit is still answered queued, at once, and the call runs.
func TestGuessedQueuedMessageIDHoldsNothingUp(t *testing.T) {
	t.Parallel()
	_, as := identityDeploy(t, func(cfg *coordinator.Config) { cfg.PolicyFile, cfg.WorkspaceDir = "", "" })
	a := agentClient(t, as("agent_a"), "support-bot")
	ctx := testenv.Context(t)
	route := deployRoutes["agent_a"]
	callID := messages.RoutedCallID(route, nuid.Next())
	// The worker's user writes a log event of a call of its namespace
	// under the guessed ID.
	js, err := jetstream.New(as("worker_demo"))
	if err != nil {
		t.Fatal(err)
	}
	subject, err := names.Events().Subject(messages.TurnBucket(""), messages.RoutedCallID(route, nuid.Next()), messages.EventLog, "demo")
	if err != nil {
		t.Fatal(err)
	}
	decoy := &nats.Msg{Subject: subject, Header: nats.Header(messages.Msgpack.NewHeader()), Data: []byte{0x80}}
	decoy.Header.Set(messages.HeaderMsgID, callID+".queued")
	if _, err := js.PublishMsg(ctx, decoy); err != nil {
		t.Fatalf("the worker's event under the guessed message ID: %v", err)
	}
	reply, err := a.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"mine"}`), Route: route, CallID: callID})
	if err != nil {
		t.Fatalf("the submit of the call whose message ID was taken: %v", err)
	}
	if reply.CallID != callID || reply.Duplicate {
		t.Fatalf("reply %+v, want call %s queued", reply, callID)
	}
	res, err := a.Wait(ctx, callID)
	if err != nil || res.Status != messages.StateCompleted || res.Content[0].Text != "mine" {
		t.Fatalf("the call: %+v %v", res, err)
	}
}
