package integration

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/policy"
	"github.com/toolbus/toolbus/pkg/worker"
)

type loginArgs struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

func policyTools(cnt *counter) []worker.Tool {
	return []worker.Tool{
		cnt.tool(),
		worker.Func("login", "Logs in.", func(ctx context.Context, in loginArgs) (string, error) { return "welcome " + in.User, nil }, worker.WithTags(messages.TagNetwork)),
		worker.Func("wipe", "Wipes everything.", func(ctx context.Context, in struct{}) (string, error) { return "wiped", nil }, worker.WithTags(messages.TagDestructive)),
		worker.Func("root", "Does privileged things.", func(ctx context.Context, in struct{}) (string, error) { return "root", nil }, worker.WithTags(messages.TagPrivileged)),
	}
}

func mustPolicy(t *testing.T, yaml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(yaml), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const testPolicy = `
default: allow
rules:
  - preset: deny_privileged
  - preset: ask_destructive
  - id: no-admin-login
    tool: "t:login"
    arguments:
      - {pointer: /user, equals: "admin"}
    effect: deny
    reason: nobody logs in as admin
`

func TestPolicyDeniesAndAudits(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = mustPolicy(t, testPolicy) })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: policyTools(newCounter())})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)

	_, err := c.Call(ctx, "t-root", nil)
	if !errors.Is(err, messages.ErrDenied) || !strings.Contains(err.Error(), "privileged") {
		t.Fatalf("privileged tool: %v", err)
	}
	_, err = c.Call(ctx, "t-login", loginArgs{User: "admin", Password: "hunter2"})
	if !errors.Is(err, messages.ErrDenied) || !strings.Contains(err.Error(), "nobody logs in as admin") {
		t.Fatalf("denied by argument: %v", err)
	}
	res, err := c.Call(ctx, "t-login", loginArgs{User: "alice", Password: "hunter2"})
	if err != nil || res.Content[0].Text != "welcome alice" {
		t.Fatalf("allowed login: %+v %v", res, err)
	}
	// The policy decides before the tool's schema is asked: a denied call
	// is denied (and audited) whatever its arguments; a call the policy
	// lets through is then held to the schema.
	for _, tc := range []struct {
		tool, args string
		want       messages.ErrorCode
		says       string
	}{
		{"t-root", `[1, 2]`, messages.CodeDenied, "privileged"},
		{"t-root", `{"sudo": true}`, messages.CodeDenied, "privileged"},
		{"t-login", `{"user": "admin", "password": 5}`, messages.CodeDenied, "nobody logs in as admin"},
		{"t-login", `{"user": "alice", "password": 5}`, messages.CodeInvalidArguments, "password"},
	} {
		_, err := c.Submit(ctx, messages.SubmitRequest{Tool: tc.tool, Arguments: messages.JSON(tc.args)})
		if messages.CodeOf(err) != tc.want || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s with %s: %v, want %s saying %q", tc.tool, tc.args, err, tc.want, tc.says)
		}
	}
	// The model never sees a tool that policy denies whatever the arguments;
	// one denied only for some arguments stays listed.
	list, err := c.ListTools(ctx, messages.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := namesOf(list)
	if slices.Contains(got, "t-root") || !slices.Contains(got, "t-login") || !slices.Contains(got, "t-wipe") {
		t.Fatalf("listed for the agent: %v", got)
	}

	// Every decision is audited, with the password redacted.
	js, _ := jetstream.New(testenv.Connect(t, srv.URL()))
	cons, err := js.OrderedConsumer(ctx, names.Audit().Stream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var decisions []string
	for len(decisions) < 6 {
		msg, err := cons.Next(jetstream.FetchMaxWait(testenv.Patience))
		if err != nil {
			t.Fatalf("audit records so far %v: %v", decisions, err)
		}
		for _, rec := range auditRecordsOf(t, msg) {
			decisions = append(decisions, rec.Decision+":"+rec.Tool)
			if strings.Contains(string(rec.Arguments), "hunter2") {
				t.Fatalf("audit record holds the password: %s", rec.Arguments)
			}
			if rec.Tool == "t-login" && rec.Decision == messages.AuditDenied && rec.RuleID != "no-admin-login" {
				t.Fatalf("audit record %+v", rec)
			}
		}
	}
	// Allowed decisions are copied into the audit stream in batches, so
	// they may come after later denials.
	slices.Sort(decisions)
	if want := []string{"allowed:t-login", "denied:t-login", "denied:t-login", "denied:t-root", "denied:t-root", "denied:t-root"}; !slices.Equal(decisions, want) {
		t.Fatalf("audit %v, want %v", decisions, want)
	}
}

func TestApprovalOutlivesACoordinatorRestart(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	pol := mustPolicy(t, testPolicy)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = pol })
	cnt := newCounter()
	var wipes atomic.Int32
	tools := policyTools(cnt)
	tools[2] = worker.Func("wipe", "Wipes everything.", func(ctx context.Context, in struct {
		Target string `json:"target"`
	}) (string, error) {
		wipes.Add(1)
		return "wiped " + in.Target, nil
	}, worker.WithTags(messages.TagDestructive))
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: tools, Slots: 1})
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)

	r, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe", Arguments: messages.JSON(`{"target":"disk"}`), Turn: "t1", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.State != messages.StateAwaitingApproval || r.Approval == nil || r.Approval.Mode != messages.ApprovalQueue || r.Result != nil {
		t.Fatalf("submit of a destructive tool: %+v", r)
	}
	if info, err := agent.Get(ctx, r.CallID); err != nil || info.State != messages.StateAwaitingApproval {
		t.Fatalf("call while waiting: %+v %v", info, err)
	}

	// A new coordinator: the approval is still there, and deciding it runs the call once.
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = pol })
	operator := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	pending, err := operator.ListApprovals(ctx, messages.ListApprovalsRequest{})
	if err != nil || len(pending.Approvals) != 1 || pending.Approvals[0].CallID != r.CallID {
		t.Fatalf("pending approvals: %+v %v", pending, err)
	}
	a := pending.Approvals[0]
	if a.Tool != "t-wipe" || a.Agent != "bot" || a.Turn != "t1" || a.PolicyVersion != pol.Version() || a.ArgumentsDigest == "" || a.RuleID != policy.PresetAskDestructive {
		t.Fatalf("approval %+v", a)
	}
	reply, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: a.ApprovalID, Decision: messages.DecisionApprove, By: "alice", Reason: "planned maintenance"})
	if err != nil || reply.Approval.State != messages.ApprovalApproved || reply.Approval.DecidedBy != "alice" {
		t.Fatalf("decide: %+v %v", reply, err)
	}
	res, err := agent.Wait(ctx, r.CallID)
	if err != nil || res.Status != messages.StateCompleted || res.Content[0].Text != "wiped disk" {
		t.Fatalf("approved call: %+v %v", res, err)
	}
	// A second decision changes nothing; the tool ran once.
	if _, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: a.ApprovalID, Decision: messages.DecisionApprove, By: "bob"}); !errors.Is(err, messages.ErrApprovalNotPending) {
		t.Fatalf("second decision: %v", err)
	}
	// The next identical call in the turn asks again: the approval was for that call only.
	r2, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe", Arguments: messages.JSON(`{"target":"disk"}`), Turn: "t1"})
	if err != nil || r2.State != messages.StateAwaitingApproval {
		t.Fatalf("second call: %+v %v", r2, err)
	}
	if _, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: r2.CallID, Decision: messages.DecisionDeny, By: "alice", Reason: "once is enough"}); err != nil {
		t.Fatal(err)
	}
	res, err = agent.Wait(ctx, r2.CallID)
	if err != nil || res.Status != messages.StateDenied || !strings.Contains(res.Error.Message, "once is enough") {
		t.Fatalf("denied call: %+v %v", res, err)
	}
	// The slot is free only after the approved call ran; its count is one.
	if res, err := agent.Call(ctx, "t-count", map[string]string{"label": "x"}); err != nil || res.IsError {
		t.Fatalf("%+v %v", res, err)
	}
	if n := wipes.Load(); n != 1 {
		t.Fatalf("the approved call ran %d times", n)
	}
}

func TestRememberedApprovalLetsTheNextCallThrough(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = mustPolicy(t, testPolicy) })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: policyTools(newCounter())})
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)

	r, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe", Turn: "t1"})
	if err != nil || r.State != messages.StateAwaitingApproval {
		t.Fatalf("%+v %v", r, err)
	}
	// An agent cannot answer an approval that waits for an operator.
	if _, err := agent.Answer(ctx, messages.DecideRequest{ApprovalID: r.CallID, Decision: messages.DecisionApprove}); !errors.Is(err, messages.ErrDenied) {
		t.Fatalf("an agent answering a queued approval: %v", err)
	}
	if _, err := agent.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: r.CallID, Decision: messages.DecisionApprove, By: "user", Remember: messages.RememberTurn}); err != nil {
		t.Fatal(err)
	}
	if res, err := agent.Wait(ctx, r.CallID); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	// Same turn: no approval asked.
	res, err := agent.Call(ctx, "t-wipe", nil, client.WithTurn("t1"))
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("remembered for the turn: %+v %v", res, err)
	}
	// Another turn: asked again.
	r3, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe", Turn: "t2"})
	if err != nil || r3.State != messages.StateAwaitingApproval {
		t.Fatalf("another turn: %+v %v", r3, err)
	}
}

func TestExpiredApprovalDeniesTheCall(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Policy = mustPolicy(t, testPolicy)
		cfg.ApprovalTTL = 200 * time.Millisecond
		cfg.SweepInterval = 50 * time.Millisecond
	})
	cnt := newCounter()
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: policyTools(cnt)})
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	r, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "t-wipe"})
	if err != nil || r.State != messages.StateAwaitingApproval {
		t.Fatalf("%+v %v", r, err)
	}
	res, err := agent.Wait(ctx, r.CallID)
	if err != nil || res.Status != messages.StateDenied || res.Error.Code != messages.ResultDenied || !strings.Contains(res.Error.Message, "expired") {
		t.Fatalf("expired approval: %+v %v", res, err)
	}
	if _, err := agent.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: r.CallID, Decision: messages.DecisionApprove, By: "late"}); !errors.Is(err, messages.ErrApprovalNotPending) {
		t.Fatalf("approving an expired approval: %v", err)
	}
}

func TestPromptApprovalFromExposureRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir+"/bundles/demo.yaml", `
id: demo
match:
  - name: "demo:*"
  - name: "demo:sleep"
    approval: {mode: prompt, title: "Wait?", message: "This sleeps a while"}
`)
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.WorkspaceDir = dir })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	_, err := agent.Call(ctx, "demo-sleep", map[string]float64{"seconds": 0.01})
	var need *client.ApprovalRequiredError
	if !errors.As(err, &need) || need.Approval.Mode != messages.ApprovalPrompt || need.Approval.Title != "Wait?" || need.Approval.Message != "This sleeps a while" {
		t.Fatalf("prompt approval: %v", err)
	}
	// The user says yes in the conversation; the agent passes it on.
	if _, err := agent.Answer(ctx, messages.DecideRequest{ApprovalID: need.CallID, Decision: messages.DecisionApprove, By: "the user"}); err != nil {
		t.Fatal(err)
	}
	res, err := agent.Wait(ctx, need.CallID)
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	if res, err := agent.Call(ctx, "demo-echo", map[string]string{"text": "no approval"}); err != nil || res.IsError {
		t.Fatalf("%+v %v", res, err)
	}
}

// TestPolicyFileReloadsAndApprovalsFromTheCLI: the policy file takes
// effect when it changes, and an operator decides from the command line.
func TestPolicyFileReloadsAndApprovalsFromTheCLI(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, "default: allow\nrules:\n  - {tool: \"demo:echo\", effect: deny, reason: echo is off}\n")
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.PolicyFile = file
		cfg.WorkspaceReloadInterval = 20 * time.Millisecond
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	if _, err := agent.Call(ctx, "demo-echo", map[string]string{"text": "x"}); !errors.Is(err, messages.ErrDenied) {
		t.Fatalf("denied by the file: %v", err)
	}
	writeFile(t, file, "default: allow\nrules:\n  - {tool: \"demo:echo\", effect: ask, reason: echo needs a nod}\n")
	var callID string
	testenv.Eventually(t, "the new policy", func() bool {
		r, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"nodded"}`)})
		if err == nil && r.State == messages.StateAwaitingApproval {
			callID = r.CallID
			return true
		}
		return false
	})
	bin := testenv.Binary(t, "./cmd/toolbus")
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"--server", srv.URL()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("toolbus %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("approvals", "list"); !strings.Contains(out, callID) || !strings.Contains(out, "echo needs a nod") {
		t.Fatalf("approvals list:\n%s", out)
	}
	if out := cli("approvals", "approve", callID, "--by", "alice", "--reason", "fine"); !strings.Contains(out, "approved by alice") {
		t.Fatalf("approve:\n%s", out)
	}
	res, err := agent.Wait(ctx, callID)
	if err != nil || res.Content[0].Text != "nodded" {
		t.Fatalf("approved call: %+v %v", res, err)
	}

	// A change of policy voids a pending approval: the list marks it, and
	// it can be denied, not approved.
	held, err := agent.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"voided"}`)})
	if err != nil || held.State != messages.StateAwaitingApproval {
		t.Fatalf("a call to hold: %+v %v", held, err)
	}
	if out := cli("approvals", "list"); !strings.Contains(out, held.CallID) || strings.Contains(out, "voided by") {
		t.Fatalf("approvals list before the change:\n%s", out)
	}
	writeFile(t, file, "default: allow\nrules:\n  - {tool: \"demo:echo\", effect: ask, reason: echo needs two nods}\n")
	testenv.Eventually(t, "the held call's approval voided", func() bool {
		l, err := agent.ListApprovals(ctx, messages.ListApprovalsRequest{})
		return err == nil && len(l.Approvals) == 1 && l.Approvals[0].CallID == held.CallID && l.Approvals[0].Voided
	})
	if out := cli("approvals", "list"); !strings.Contains(out, "voided by a change of policy") {
		t.Fatalf("approvals list after the change:\n%s", out)
	}
	if _, err := agent.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: held.CallID, Decision: messages.DecisionApprove, By: "alice"}); !errors.Is(err, messages.ErrConflict) {
		t.Fatalf("approving a voided approval: %v", err)
	}
	cli("approvals", "deny", held.CallID, "--by", "alice", "--reason", "voided")
	if res, err := agent.Wait(ctx, held.CallID); err != nil || res.Status != messages.StateDenied {
		t.Fatalf("the denied call: %+v %v", res, err)
	}
}

// TestSelectionsThePolicyDeniesAreDroppedFromTheTurn: a tool the turn
// selected (activated while the policy allowed it) that the policy, once
// reloaded, denies the agent whatever the arguments is gone for good: the
// next iteration hides it, lists it in dropped, and the turn no longer
// selects it. A tool the caller chooses for one iteration that the policy
// denies is listed in dropped too.
func TestSelectionsThePolicyDeniesAreDroppedFromTheTurn(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, "default: allow\nrules:\n  - {tool: \"t:root\", effect: deny}\n")
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.PolicyFile = file })
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: policyTools(newCounter())})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)
	const turn = "selected-then-denied"

	testenv.Eventually(t, "t-wipe in the catalog", func() bool {
		_, err := c.Activate(ctx, turn, "t-wipe")
		return err == nil
	})
	list := func(req messages.ListToolsRequest) *messages.ListToolsReply {
		t.Helper()
		req.Turn = turn
		l, err := c.ListTools(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := list(messages.ListToolsRequest{}); !slices.Contains(namesOf(l), "t-wipe") || len(l.Dropped) != 0 {
		t.Fatalf("the activated tool: %v, dropped %v", namesOf(l), l.Dropped)
	}
	if l := list(messages.ListToolsRequest{Chosen: []string{"t-root"}}); slices.Contains(namesOf(l), "t-root") || !slices.Equal(l.Dropped, []string{"t-root"}) {
		t.Fatalf("a chosen tool the policy denies: %v, dropped %v", namesOf(l), l.Dropped)
	}

	writeFile(t, file, "default: allow\nrules:\n  - {tool: \"t:root\", effect: deny}\n  - {tool: \"t:wipe\", effect: deny, reason: wiping is off}\n")
	var l *messages.ListToolsReply
	testenv.Eventually(t, "the reloaded policy to hide t-wipe", func() bool {
		l = list(messages.ListToolsRequest{})
		return !slices.Contains(namesOf(l), "t-wipe")
	})
	if !slices.Equal(l.Dropped, []string{"t-wipe"}) {
		t.Fatalf("the iteration that hid the denied selection dropped %v, want [t-wipe]", l.Dropped)
	}
	info, err := c.Turn(ctx, turn)
	if err != nil || info.State == nil || slices.Contains(info.State.Activated, "t-wipe") {
		t.Fatalf("the turn after the drop: %+v %v", info, err)
	}
	if l := list(messages.ListToolsRequest{}); len(l.Dropped) != 0 {
		t.Fatalf("dropped again: %v", l.Dropped)
	}
	// Activating it again is refused with the rule's reason.
	if _, err := c.Activate(ctx, turn, "t-wipe"); !errors.Is(err, messages.ErrDenied) || !strings.Contains(err.Error(), "wiping is off") {
		t.Fatalf("activating a tool the policy denies: %v", err)
	}
}
