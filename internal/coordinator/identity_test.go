package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

const testIdentities = `
users:
  fleet-a: {agents: [support-bot, "triage-*"]}
  solo: {agents: [bot-a]}
  ops: {operator: true}
`

func testGuard(t *testing.T) (*guard, *[]*messages.AuditRecord) {
	t.Helper()
	ids, err := ParseIdentities([]byte(testIdentities))
	if err != nil {
		t.Fatal(err)
	}
	var audited []*messages.AuditRecord
	return &guard{ids: ids, audit: func(rec *messages.AuditRecord) { audited = append(audited, rec) }}, &audited
}

func requestFrom(user string) map[string][]string {
	return map[string][]string{RequestInfoHeader: {`{"acc":"AGENTS","user":"` + user + `","rtt":1000}`}}
}

func isForbidden(err error) bool {
	var e *messages.Error
	return errors.As(err, &e) && e.Code == messages.CodeForbidden && e.Code.Status() == 403
}

func TestIdentityAdmitsOnlyTheAgentsOfTheCaller(t *testing.T) {
	g, audited := testGuard(t)
	for _, tc := range []struct {
		user, agent string
		ok          bool
	}{
		{"fleet-a", "support-bot", true},
		{"fleet-a", "triage-7", true},
		{"fleet-a", "bot-a", false},
		{"solo", "bot-a", true},
		{"solo", "support-bot", false},
		{"ops", "bot-a", true},
		{"stranger", "bot-a", false},
	} {
		for _, endpoint := range []struct {
			name string
			req  any
		}{
			{messages.EndpointCallsSubmit, &messages.SubmitRequest{Tool: "demo-echo", Agent: tc.agent}},
			{messages.EndpointToolsList, &messages.ListToolsRequest{Agent: tc.agent}},
			{messages.EndpointToolsActivate, &messages.ActivateRequest{Agent: tc.agent, Turn: "t1"}},
			{messages.EndpointToolsDiscover, &messages.DiscoverRequest{Agent: tc.agent}},
			{messages.EndpointApprovalsList, &messages.ListApprovalsRequest{Agent: tc.agent}},
			{messages.EndpointCallsCancel, &messages.CancelRequest{CallID: "c1", By: tc.agent}},
		} {
			before := len(*audited)
			_, err := g.admit(context.Background(), endpoint.name, requestFrom(tc.user), endpoint.req)
			if tc.ok && err != nil {
				t.Errorf("%s as %s naming %s: %v", endpoint.name, tc.user, tc.agent, err)
			}
			if !tc.ok {
				if !isForbidden(err) {
					t.Errorf("%s as %s naming %s: err = %v, want forbidden", endpoint.name, tc.user, tc.agent, err)
				}
				if len(*audited) != before+1 || (*audited)[before].Decision != auditForbidden || (*audited)[before].By != "AGENTS/"+tc.user {
					t.Errorf("%s as %s naming %s: the refusal was not audited", endpoint.name, tc.user, tc.agent)
				}
			}
		}
	}
}

func TestIdentityFillsInTheOnlyAgent(t *testing.T) {
	g, _ := testGuard(t)
	sr := &messages.SubmitRequest{Tool: "demo-echo"}
	if _, err := g.admit(context.Background(), messages.EndpointCallsSubmit, requestFrom("solo"), sr); err != nil {
		t.Fatal(err)
	}
	if sr.Agent != "bot-a" {
		t.Errorf("agent = %q, want the caller's only agent bot-a", sr.Agent)
	}
	// A user of several agents (or of a pattern) must name one: a call
	// without an agent could be read by operators only.
	sr = &messages.SubmitRequest{Tool: "demo-echo"}
	if _, err := g.admit(context.Background(), messages.EndpointCallsSubmit, requestFrom("fleet-a"), sr); !errors.Is(err, &messages.Error{Code: messages.CodeBadRequest}) {
		t.Errorf("a submit naming no agent from a user of several: err = %v, want bad_request", err)
	}
	lr := &messages.ListApprovalsRequest{}
	if _, err := g.admit(context.Background(), messages.EndpointApprovalsList, requestFrom("solo"), lr); err != nil || lr.Agent != "bot-a" {
		t.Errorf("approvals.list of a one-agent user: agent %q, %v", lr.Agent, err)
	}
	lr = &messages.ListApprovalsRequest{}
	if _, err := g.admit(context.Background(), messages.EndpointApprovalsList, requestFrom("ops"), lr); err != nil || lr.Agent != "" {
		t.Errorf("approvals.list of an operator: agent %q, %v", lr.Agent, err)
	}
	dr := &messages.DecideRequest{ApprovalID: "a1", Decision: messages.DecisionApprove}
	if _, err := g.admit(context.Background(), messages.EndpointApprovalsDecide, requestFrom("ops"), dr); err != nil {
		t.Fatal(err)
	}
	if dr.By != "ops" {
		t.Errorf("by = %q, want the operator's user ops", dr.By)
	}
}

func TestIdentityKeepsOperatorEndpointsForOperators(t *testing.T) {
	g, _ := testGuard(t)
	for _, endpoint := range []struct {
		name string
		req  any
	}{
		{messages.EndpointApprovalsDecide, &messages.DecideRequest{ApprovalID: "a1", Decision: messages.DecisionApprove, By: "bot-a"}},
		{messages.EndpointToolsDisable, &messages.ToolSwitchRequest{Tool: "demo-echo", By: "bot-a"}},
		{messages.EndpointToolsEnable, &messages.ToolSwitchRequest{Tool: "demo-echo"}},
	} {
		if _, err := g.admit(context.Background(), endpoint.name, requestFrom("solo"), endpoint.req); !isForbidden(err) {
			t.Errorf("%s by an agent: err = %v, want forbidden", endpoint.name, err)
		}
		if _, err := g.admit(context.Background(), endpoint.name, requestFrom("ops"), endpoint.req); err != nil {
			t.Errorf("%s by an operator: %v", endpoint.name, err)
		}
	}
}

func TestIdentityRefusesRequestsWithoutRequestInfo(t *testing.T) {
	g, audited := testGuard(t)
	for _, headers := range []map[string][]string{
		nil,
		{RequestInfoHeader: {"not json"}},
		{RequestInfoHeader: {`{"acc":"AGENTS"}`}},
	} {
		if _, err := g.admit(context.Background(), messages.EndpointToolsList, headers, &messages.ListToolsRequest{Agent: "bot-a"}); !isForbidden(err) {
			t.Errorf("headers %v: err = %v, want forbidden", headers, err)
		}
	}
	if len(*audited) != 3 {
		t.Errorf("%d refusals audited, want 3", len(*audited))
	}
}

func TestIdentityPassesTheCallerDown(t *testing.T) {
	g, audited := testGuard(t)
	ctx, err := g.admit(context.Background(), messages.EndpointApprovalsAnswer, requestFrom("solo"), &messages.DecideRequest{ApprovalID: "a1", Decision: messages.DecisionApprove})
	if err != nil {
		t.Fatal(err)
	}
	if err := mayActFor(ctx, "bot-a"); err != nil {
		t.Errorf("own agent: %v", err)
	}
	if err := mayActFor(ctx, "support-bot"); !isForbidden(err) {
		t.Errorf("another agent: err = %v, want forbidden", err)
	}
	if len(*audited) != 1 || (*audited)[0].Agent != "support-bot" || (*audited)[0].By != "AGENTS/solo" {
		t.Errorf("the refusal was not audited: %+v", *audited)
	}
	if err := mayActFor(context.Background(), "support-bot"); err != nil {
		t.Errorf("without identities: %v", err)
	}
}

func TestWithoutIdentitiesTheNamedAgentIsTrusted(t *testing.T) {
	var g *guard
	sr := &messages.SubmitRequest{Tool: "demo-echo", Agent: "anyone"}
	if _, err := g.admit(context.Background(), messages.EndpointCallsSubmit, nil, sr); err != nil || sr.Agent != "anyone" {
		t.Errorf("err = %v, agent = %q", err, sr.Agent)
	}
	g = &guard{}
	if _, err := g.admit(context.Background(), messages.EndpointApprovalsDecide, nil, &messages.DecideRequest{By: "x"}); err != nil {
		t.Error(err)
	}
}

func TestParseIdentitiesRefusesMistakes(t *testing.T) {
	for _, bad := range []string{
		``,
		`users: {}`,
		`users: {a: {}}`,
		`users: {a: {agents: ["[x"]}}`,
		`users: {a: {agents: [""]}}`,
		`users: {a: {agent: [x]}}`,
		`people: {a: {agents: [x]}}`,
	} {
		if _, err := ParseIdentities([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestNoIdentitiesRefusesRequestsFromAnotherAccount: a coordinator without
// an identities file admits requests from its own account as they are,
// and refuses, audited, a request that crossed an account import, whose
// caller it cannot check.
func TestNoIdentitiesRefusesRequestsFromAnotherAccount(t *testing.T) {
	var audited []*messages.AuditRecord
	g := &guard{audit: func(rec *messages.AuditRecord) { audited = append(audited, rec) }}
	req := &messages.SubmitRequest{Tool: "demo-echo", Agent: "support-bot"}
	ctx, err := g.admit(context.Background(), messages.EndpointCallsSubmit, nil, req)
	if err != nil || identityOf(ctx) != nil || req.Agent != "support-bot" {
		t.Fatalf("a request of the coordinator's own account: %v", err)
	}
	for _, headers := range []map[string][]string{requestFrom("agent_a"), {RequestInfoHeader: {"not json"}}} {
		_, err = g.admit(context.Background(), messages.EndpointCallsSubmit, headers, req)
		if !isForbidden(err) || !strings.Contains(err.Error(), "no identities file") {
			t.Errorf("a request from another account (%v): err = %v, want forbidden naming the missing identities file", headers, err)
		}
	}
	if len(audited) != 2 || audited[0].Decision != auditForbidden || audited[0].By != "AGENTS/agent_a" || audited[0].Agent != "support-bot" {
		t.Errorf("refusals audited: %+v", audited)
	}
}
