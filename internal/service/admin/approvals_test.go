package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/admin"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestWithdrawnApprovalCannotBeDecided: once the call is cancelled, its
// approval is withdrawn: the approvals page no longer offers to approve
// it, the call's page says who cancelled it and links no decision, and a
// decision sent anyway (a page loaded before the cancel) is refused with
// what became of the approval.
func TestWithdrawnApprovalCannotBeDecided(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("default: allow\nrules:\n  - {tool: \"demo:echo\", effect: ask, reason: echo needs a nod}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.PolicyFile = policy })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{})
	console, err := admin.New(admin.Config{Client: c, Tokens: map[string]admin.Operator{testToken: {Name: "alice"}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(console.Handler())
	t.Cleanup(hs.Close)
	b := &testBundle{url: hs.URL, client: c, server: hs}
	hc := browser(t)
	csrf := b.login(t, hc)

	ctx := testenv.Context(t)
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "support-bot"})
	reply, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"nod"}`)})
	if err != nil || reply.Approval == nil {
		t.Fatalf("submit: %+v %v, want a call awaiting approval", reply, err)
	}
	form := `action="/approvals/` + reply.Approval.ApprovalID + `/decide"`
	if _, page := do(t, hc, "GET", b.url+"/approvals", nil, nil); !strings.Contains(page, form) || !strings.Contains(page, `class="approve"`) {
		t.Fatalf("the approvals page offers no decision on the pending approval:\n%s", page)
	}
	if cancelled, err := agent.Cancel(context.WithoutCancel(ctx), reply.CallID, "user pressed stop"); err != nil || cancelled.Outcome != messages.CancelDone {
		t.Fatalf("cancel: %+v %v", cancelled, err)
	}
	if _, page := do(t, hc, "GET", b.url+"/approvals", nil, nil); strings.Contains(page, reply.CallID) || strings.Contains(page, `class="approve"`) || !strings.Contains(page, `id="no-approvals"`) {
		t.Fatalf("the approvals page after the cancel:\n%s", page)
	}
	_, page := do(t, hc, "GET", b.url+"/calls/"+reply.CallID, nil, nil)
	if !strings.Contains(page, "Approval withdrawn: echo needs a nod — the call was cancelled by support-bot: user pressed stop") || strings.Contains(page, `href="/approvals">decide`) {
		t.Fatalf("the call page of the cancelled call:\n%s", page)
	}
	resp, _ := do(t, hc, "POST", b.url+"/approvals/"+reply.Approval.ApprovalID+"/decide", url.Values{"csrf": {csrf}, "decision": {"approve"}, "remember": {"call"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/approvals" {
		t.Fatalf("approving the withdrawn approval: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	if _, page = do(t, hc, "GET", b.url+"/approvals", nil, nil); !strings.Contains(page, "is no longer pending: it was withdrawn") || !strings.Contains(page, "(approval_not_pending)") {
		t.Fatalf("the approvals page after a refused decision:\n%s", page)
	}
	if info, err := agent.Get(ctx, reply.CallID); err != nil || info.State != messages.StateCancelled {
		t.Fatalf("the call after the refused decision: %+v %v", info, err)
	}
}
