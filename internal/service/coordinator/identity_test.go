package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
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

// serverInfo is a Nats-Request-Info line as the server appends it.
const serverInfo = `Nats-Request-Info: {"start":"2026-01-01T00:00:00Z","host":"127.0.0.1","id":7,"acc":"AGENTS","user":"agent_a","rtt":1000,"kind":"Client"}` + "\r\n"

// TestHeaderShapeRefusesHiddenLines parses header blocks as the
// coordinator's connection does (nats.go) and checks them with their size
// on the wire: honest blocks pass; a block in which the server's
// Nats-Request-Info is not the one parsed is refused.
func TestHeaderShapeRefusesHiddenLines(t *testing.T) {
	forged := `Nats-Request-Info: {"acc":"AGENTS","user":"operator"}`
	many := ""
	for i := range maxHeaderValues - 1 {
		many += fmt.Sprintf("X-%d: v\r\n", i)
	}
	tight := ""
	for i := range maxHeaderValues - 1 {
		tight += fmt.Sprintf("X-%d:v\n", i)
	}
	for _, tc := range []struct {
		name, block string
		ok          bool
	}{
		{"no header line but the server's", "NATS/1.0\r\n" + serverInfo + "\r\n", true},
		{"as client libraries write it", "NATS/1.0\r\nContent-Type: application/json\r\nToolbus-Version: 3\r\n" + serverInfo + "\r\n", true},
		{"written tightly", "NATS/1.0\nContent-Type:application/json\n" + serverInfo + "\r\n", true},
		{"as many values as allowed", "NATS/1.0\r\n" + many + serverInfo + "\r\n", true},
		{"as many values as allowed, written tightly", "NATS/1.0\n" + tight + serverInfo + "\r\n", true},
		{"one value too many", "NATS/1.0\r\nX-a: v\r\n" + many + serverInfo + "\r\n", false},
		{"a forged line after a bare LF", "NATS/1.0\n" + forged + "\r\n" + serverInfo + "\r\n", false},
		{"a forged line before a blank line", "NATS/1.0\r\nA: b\n" + forged + "\n\nx" + serverInfo + "\r\n", false},
		{"tight lines before a blank line", "NATS/1.0\n" + tight + forged + "\n\n" + serverInfo + "\r\n", false},
		{"the server's glued to a value", "NATS/1.0\r\nA: b\n" + forged + "\r\nX: " + serverInfo + "\r\n", false},
		{"the server's glued to a key", "NATS/1.0\r\nA: b\n" + forged + "\r\nX" + serverInfo + "\r\n", false},
		{"the server's glued to a skipped line", "NATS/1.0\r\nA: b\n" + forged + "\r\n:" + serverInfo + "\r\n", false},
		{"the server's glued to the status line", "NATS/1.0 " + serverInfo + "\r\n", false},
		{"a lowercase look-alike", "NATS/1.0\r\nnats-request-info: {}\r\n" + serverInfo + "\r\n", false},
	} {
		headers, err := nats.DecodeHeadersMsg([]byte(tc.block))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err = headerShape(headers, len(tc.block))
		if tc.ok && err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		if !tc.ok {
			if !isForbidden(err) {
				t.Errorf("%s: err = %v, want forbidden", tc.name, err)
			}
		}
	}
	if err := headerShape(nil, 0); err != nil {
		t.Errorf("a request without headers: %v", err)
	}
	if err := headerShape(nil, -1); !isForbidden(err) {
		t.Errorf("a request whose header size is unknown: err = %v, want forbidden", err)
	}
}

// TestWireHeaderSizeIsTheHeaderBlocksSize: the size read from a micro
// request is the size of the header block nats.go wrote, so that
// headerShape sees what arrived (it reads a field of micro's and nats.go's
// that they do not export, and would refuse every request were it gone).
func TestWireHeaderSizeIsTheHeaderBlocksSize(t *testing.T) {
	srv := embedded.Server(t)
	nc := embedded.Connect(t, srv.URL())
	sizes := make(chan int, 2)
	shapes := make(chan error, 2)
	svc, err := micro.AddService(nc, micro.Config{Name: "sizes", Version: "1.0.0", Endpoint: &micro.EndpointConfig{Subject: "sizes.x", Handler: micro.HandlerFunc(func(r micro.Request) {
		sizes <- wireHeaderSize(r)
		shapes <- headerShape(r.Headers(), wireHeaderSize(r))
		_ = r.Respond(nil)
	})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for _, header := range []nats.Header{nil, {"Content-Type": {"application/json"}, "Toolbus-Version": {"3"}, "Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}} {
		msg := &nats.Msg{Subject: "sizes.x", Header: header, Data: []byte("body")}
		want := 0
		if header != nil {
			want = len("NATS/1.0\r\n") + len("\r\n")
			for k, vs := range header {
				for _, v := range vs {
					want += len(k) + len(": ") + len(v) + len("\r\n")
				}
			}
		}
		if _, err := nc.RequestMsg(msg, patience); err != nil {
			t.Fatal(err)
		}
		if got := <-sizes; got != want {
			t.Errorf("headers %v: size %d, want %d", header, got, want)
		}
		if err := <-shapes; err != nil {
			t.Errorf("headers %v: %v", header, err)
		}
	}
}

// TestIdentityNamesTheAgentInATurn: a user of several agents that names
// none may not list, activate or discover in a turn (it would act in any
// agent's turn as no agent); without a turn it may, and a user of one
// agent has it filled in.
func TestIdentityNamesTheAgentInATurn(t *testing.T) {
	g, _ := testGuard(t)
	for _, req := range []any{
		&messages.ListToolsRequest{Turn: "t1"},
		&messages.ActivateRequest{Turn: "t1", Tools: []string{"demo-echo"}},
		&messages.DiscoverRequest{Query: "x", Turn: "t1"},
	} {
		if _, err := g.admit(context.Background(), messages.EndpointToolsList, requestFrom("fleet-a"), req); !errors.Is(err, &messages.Error{Code: messages.CodeBadRequest}) {
			t.Errorf("%T in a turn naming no agent, as a user of several: err = %v, want bad_request", req, err)
		}
		if _, err := g.admit(context.Background(), messages.EndpointToolsList, requestFrom("ops"), req); err != nil {
			t.Errorf("%T in a turn naming no agent, as an operator: %v", req, err)
		}
	}
	lr := &messages.ListToolsRequest{}
	if _, err := g.admit(context.Background(), messages.EndpointToolsList, requestFrom("fleet-a"), lr); err != nil {
		t.Errorf("tools.list without a turn, as a user of several: %v", err)
	}
	lr = &messages.ListToolsRequest{Turn: "t1"}
	if _, err := g.admit(context.Background(), messages.EndpointToolsList, requestFrom("solo"), lr); err != nil || lr.Agent != "bot-a" {
		t.Errorf("tools.list in a turn as a user of one agent: %v, agent %q", err, lr.Agent)
	}
}

// TestDeliveredByAClient: a request a consumer delivered ($JS.ACK reply)
// is refused, and so is one with Nats-Request-Info but no reply the
// server made for an import; a client's own requests pass.
func TestDeliveredByAClient(t *testing.T) {
	info := requestFrom("agent_a")
	for _, tc := range []struct {
		reply   string
		headers map[string][]string
		ok      bool
	}{
		{"_INBOX.abc", nil, true},
		{"", nil, true},
		{"_R_.abc.def", info, true},
		{"_GR_.abc._R_.def", info, true},
		{"$JS.ACK.KV_x.relay.1.1.1.1.0", nil, false},
		{"$JS.ACK.KV_x.relay.1.1.1.1.0", info, false},
		{"", info, false},
		{"_INBOX.abc", info, false},
	} {
		if err := deliveredByAClient(tc.reply, tc.headers); (err == nil) != tc.ok {
			t.Errorf("reply %q, request info %v: err = %v", tc.reply, tc.headers != nil, err)
		}
	}
}
