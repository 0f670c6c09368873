package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestAnswersSentToAnotherAgentsRouteAreNotTaken: the server does not
// check whose a request's reply subject is, so agent_b (and an operator)
// can have the coordinator send its answers to agent_a's route, under the
// subject of a call agent_a is waiting for: a completed call of its own
// with its result, a refusal, a read of another call, with and without
// the namespace a republished result's subject ends with. agent_a's Call
// takes none of them: it returns its own call's result.
func TestAnswersSentToAnotherAgentsRouteAreNotTaken(t *testing.T) {
	t.Parallel()
	_, as := identityDeploy(t, func(cfg *coordinator.Config) { cfg.PolicyFile, cfg.WorkspaceDir = "", "" })
	a := agentClient(t, as("agent_a"), "support-bot")
	ctx := testenv.Context(t)
	named := make(chan string, 2)
	type outcome struct {
		res *messages.CallResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := a.CallObserved(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":1.5}`)},
			&client.CallObserver{Named: func(id string) { named <- id }})
		done <- outcome{res, err}
	}()
	callID := receive(t, named, "agent_a's call ID")
	route, err := names.Routes().CallSubject(callID)
	if err != nil {
		t.Fatal(err)
	}
	targets := []string{route, route + ".demo"}
	send := func(nc *nats.Conn, endpoint string, body any) {
		t.Helper()
		subject, err := names.APISubject(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		for _, reply := range targets {
			msg := &nats.Msg{Subject: subject, Reply: reply, Header: nats.Header(messages.JSONCodec.NewHeader()), Data: data}
			if err := nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	b, op := as("agent_b"), as("operator")
	// A call of agent_b's own, answered with its result once it ran.
	send(b, messages.EndpointCallsSubmit, map[string]any{"tool": "demo-echo", "agent": "billing-bot", "arguments": map[string]string{"text": "INJECTED-BY-agent_b"}, "wait": true})
	// A submit naming agent_a's call: refused, forbidden.
	send(b, messages.EndpointCallsSubmit, map[string]any{"tool": "demo-echo", "agent": "billing-bot", "call_id": callID, "route": callID[:messages.RouteLength], "arguments": map[string]string{"text": "x"}})
	// A read of a call that does not exist, and an operator's read of
	// agent_a's call itself, which is running.
	send(b, messages.EndpointCallsGet, map[string]any{"call_id": fmt.Sprintf("%s%s", callID[:messages.RouteLength], "nocall00000000000000000")})
	send(op, messages.EndpointCallsGet, map[string]any{"call_id": callID})
	send(op, messages.EndpointCallsSubmit, map[string]any{"tool": "demo-echo", "agent": "support-bot", "arguments": map[string]string{"text": "INJECTED-BY-operator"}, "wait": true})
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal("agent_a's call did not return")
	}
	if o.err != nil {
		t.Fatalf("agent_a's call: %v", o.err)
	}
	if o.res.CallID != callID || o.res.Status != messages.StateCompleted || o.res.IsError {
		t.Fatalf("agent_a's call %s returned %+v", callID, o.res)
	}
	for _, b := range o.res.Content {
		if b.Text != "" && strings.Contains(b.Text, "INJECTED") {
			t.Fatalf("agent_a's call returned another call's result: %+v", o.res)
		}
	}
}
