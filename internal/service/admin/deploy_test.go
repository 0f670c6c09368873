package admin_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/admin"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestConsoleOfADeployedOperator: with the deploy configuration's users
// and identities, a console connected as the operator (whose account has
// no JetStream: the console reads everything through the coordinator)
// shows the catalog with the worker's slots, approves an agent's call,
// which runs, and shows the call's trace ID and the audit records of its
// decision; the agent's own audit.list is refused.
func TestConsoleOfADeployedOperator(t *testing.T) {
	t.Parallel()
	as := testenv.Deployed(t, "default: allow\nrules:\n  - {tool: \"demo:echo\", effect: ask, reason: echo needs a nod}\n", 5)

	operator := as("operator")
	c, err := client.New(operator, client.Options{CoordinatorReads: true, Route: "operatorroute000000001"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	console, err := admin.New(admin.Config{Client: c, By: "operator", Tokens: map[string]admin.Operator{testToken: {Name: "alice"}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(console.Handler())
	t.Cleanup(hs.Close)
	b := &testBundle{url: hs.URL, client: c, server: hs}
	hc := browser(t)
	csrf := b.login(t, hc)

	_, page := do(t, hc, "GET", b.url+"/catalog", nil, nil)
	if !strings.Contains(page, "demo-echo") || !regexp.MustCompile(`class="slots">\d+/5<`).MatchString(page) || strings.Contains(page, `class="note"`) {
		t.Fatalf("catalog of a deployed operator, without the demo worker's 5 slots:\n%s", page)
	}

	ctx := testenv.Context(t)
	agent, err := client.New(as("agent_a"), client.Options{Agent: "support-bot", CoordinatorReads: true, Route: "agentAroute00000000001"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traceID := tid.String()
	traced := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	reply, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"nodded"}`)})
	if err != nil || reply.Approval == nil {
		t.Fatalf("submit: %+v %v, want a call awaiting approval", reply, err)
	}
	_, page = do(t, hc, "GET", b.url+"/approvals", nil, nil)
	if !strings.Contains(page, reply.CallID) {
		t.Fatalf("the approvals page does not list the call:\n%s", page)
	}
	resp, _ := do(t, hc, "POST", b.url+"/approvals/"+reply.Approval.ApprovalID+"/decide", url.Values{"csrf": {csrf}, "decision": {"approve"}, "remember": {"call"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/calls/"+reply.CallID) {
		t.Fatalf("approve: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	res, err := agent.Wait(ctx, reply.CallID)
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("the approved call: %+v %v", res, err)
	}
	_, page = do(t, hc, "GET", b.url+"/calls/"+reply.CallID, nil, nil)
	if !strings.Contains(page, "nodded") || !strings.Contains(page, "by alice in the console") {
		t.Fatalf("the call page of the approved call:\n%s", page)
	}

	// A call that needed no approval ran in its caller's trace: its page
	// shows the trace ID.
	counted, err := agent.Call(traced, "demo-word_count", map[string]string{"text": "a b c"})
	if err != nil || counted.Status != messages.StateCompleted {
		t.Fatalf("word count: %+v %v", counted, err)
	}
	_, page = do(t, hc, "GET", b.url+"/calls/"+counted.CallID, nil, nil)
	if !strings.Contains(page, `<code id="trace-id">`+traceID+`</code>`) {
		t.Fatalf("the call page does not show the call's trace ID %s:\n%s", traceID, page)
	}

	// The audit log holds the decisions about the call: asked, then
	// approved by the operator. They are recorded without waiting for
	// the write: the page is read again until both are there.
	deadline := time.Now().Add(testenv.Patience)
	for {
		_, page = do(t, hc, "GET", b.url+"/audit", nil, nil)
		asked, approved := auditRow(page, "asked", reply.CallID), auditRow(page, "approved", reply.CallID)
		if asked > 0 && approved > 0 && approved < asked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit page does not show the call's asked and approved records, newest first:\n%s", page)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The dashboard counts both calls, and the approval one waited for.
	_, page = do(t, hc, "GET", b.url+"/dashboard", nil, nil)
	for state, want := range map[string]string{"completed": "2", "awaiting_approval": "1"} {
		if m := regexp.MustCompile(`data-state="` + state + `">(\d+)<`).FindStringSubmatch(page); m == nil || m[1] != want {
			t.Errorf("the dashboard's total of %s: %v, want %s", state, m, want)
		}
	}

	// The agent may not read the audit log, nor the statistics: a console
	// whose user is not an operator says so on its dashboard.
	if _, err := agent.Operator().ListAudit(ctx, messages.AuditListRequest{}); messages.CodeOf(err) != messages.CodeForbidden {
		t.Fatalf("the agent's audit.list: err = %v, want forbidden", err)
	}
	agents, err := admin.New(admin.Config{Client: agent, Tokens: map[string]admin.Operator{testToken: {Name: "bob"}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs2 := httptest.NewServer(agents.Handler())
	t.Cleanup(hs2.Close)
	hc2 := browser(t)
	(&testBundle{url: hs2.URL}).login(t, hc2)
	resp, page = do(t, hc2, "GET", hs2.URL+"/dashboard", nil, nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(page, `id="dashboard-error"`) || !strings.Contains(page, "stats.calls is for operators") {
		t.Errorf("the dashboard of a console whose user is an agent: %s\n%s", resp.Status, page)
	}
}

// auditRow returns where the audit page's row of the call's record of
// decision starts, or -1.
func auditRow(page, decision, callID string) int {
	m := regexp.MustCompile(`<td>` + decision + `</td>.*?<td><a href="/calls/` + callID + `">`).FindStringIndex(strings.ReplaceAll(page, "\n", " "))
	if m == nil {
		return -1
	}
	return m[0]
}
