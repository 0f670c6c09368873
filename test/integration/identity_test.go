package integration

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// identityDeploy starts deploy/nats/users.conf with a coordinator that
// reads deploy/nats/identities.yaml, the demo worker, and a workspace in
// which demo:sleep asks the agent's user in prompt mode.
func identityDeploy(t *testing.T, configure ...func(*coordinator.Config)) (srv *natsserver.Server, as func(user string) *nats.Conn) {
	t.Helper()
	d := identityDeployOf(t, passwords, configure...)
	return d.srv, d.connector(t)
}

// identityDeployOf is identityDeploy on an installation of kind.
func identityDeployOf(t *testing.T, kind deployKind, configure ...func(*coordinator.Config)) *deployed {
	t.Helper()
	d := startDeploy(t, kind, false)
	as := d.connector(t)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policyFile, "default: allow\nrules:\n  - {tool: \"demo:echo\", effect: ask, reason: echo needs a nod}\n")
	workspace := t.TempDir()
	writeFile(t, workspace+"/bundles/demo.yaml", `
id: demo
match:
  - name: "demo:*"
  - name: "demo:sleep"
    approval: {mode: prompt, title: "Wait?", message: "This sleeps a while"}
`)
	testenv.Coordinator(t, d.url, func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator")
		cfg.Identities = d.ids
		cfg.WorkspaceDir = workspace
		cfg.PolicyFile = policyFile
		for _, f := range configure {
			f(cfg)
		}
	})
	testenv.Worker(t, "", worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	return d
}

// deployRoutes are the routes deploy/nats gives each user of AGENTS, in
// users.inc's permissions and identities.yaml alike.
var deployRoutes = map[string]string{"agent_a": "agentAroute00000000001", "agent_b": "agentBroute00000000001", "operator": "operatorroute000000001"}

// agentClient is a client of a user of AGENTS, as an agent's program
// configures it: it follows calls through the coordinator, on its user's route.
func agentClient(t *testing.T, nc *nats.Conn, agent string) *client.Client {
	t.Helper()
	c, err := client.New(nc, client.Options{Agent: agent, CoordinatorReads: true, Route: deployRoutes[connUser(nc)]})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAgentsActOnlyAsThemselves: with the deploy configuration and an
// identities file, a user naming an agent it does not serve is refused
// with forbidden, audited, and changes nothing.
func TestAgentsActOnlyAsThemselves(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testAgentsActOnlyAsThemselves)
}

func testAgentsActOnlyAsThemselves(t *testing.T, kind deployKind) {
	d := identityDeployOf(t, kind)
	srv, as := d.srv, d.connector(t)
	ctx := testenv.Context(t)
	connA, connB := as("agent_a"), as("agent_b")
	a := agentClient(t, connA, "support-bot")
	b := agentClient(t, connB, "billing-bot")
	aAsB := agentClient(t, connA, "billing-bot")
	operator := agentClient(t, as("operator"), "")

	// Acting as itself works.
	if res, err := a.Call(ctx, "demo-word_count", map[string]string{"text": "as myself"}, client.WithTurn("turn-a")); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("A as A: %+v %v", res, err)
	}
	// B's call waits for its user's answer.
	pending, err := b.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":0.01}`), Turn: "turn-b"})
	if err != nil || pending.State != messages.StateAwaitingApproval {
		t.Fatalf("B's prompt approval: %+v %v", pending, err)
	}

	streams := []string{"TOOLBUS_EVENTS", "KV_toolbus_turns", "KV_toolbus_approvals"}
	before := snapshot(t, srv, streams...)
	forbidden := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) {
			t.Errorf("%s: err = %v, want forbidden", what, err)
		}
	}
	_, err = aAsB.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), Turn: "turn-b"})
	forbidden("A submitting as B", err)
	_, err = aAsB.ListTools(ctx, messages.ListToolsRequest{Turn: "turn-b"})
	forbidden("A listing B's tools", err)
	_, err = aAsB.Activate(ctx, "turn-b", "demo-echo")
	forbidden("A activating in B's turn", err)
	_, err = aAsB.Discover(ctx, messages.DiscoverRequest{Query: "count words", Turn: "turn-b"})
	forbidden("A discovering in B's turn", err)
	_, err = a.Cancel(ctx, pending.CallID, "not yours")
	forbidden("A cancelling B's call", err)
	_, err = a.Answer(ctx, messages.DecideRequest{ApprovalID: pending.Approval.ApprovalID, Decision: messages.DecisionApprove})
	forbidden("A answering B's approval", err)
	_, err = b.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: pending.Approval.ApprovalID, Decision: messages.DecisionApprove})
	forbidden("an agent deciding as an operator", err)
	forbidden("an agent disabling a tool", b.Operator().SetToolEnabled(ctx, "demo-echo", false, "mine now"))

	// A header the client writes is replaced by the server's: A cannot
	// pass for B's user.
	forged := &nats.Msg{Subject: "toolbus.api.tools.list", Header: nats.Header(messages.JSONCodec.NewHeader()), Data: []byte(`{"agent":"billing-bot"}`)}
	forged.Header.Set(coordinator.RequestInfoHeader, `{"acc":"AGENTS","user":"agent_b"}`)
	reply, err := connA.RequestMsg(forged, testenv.Patience)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "403" || !strings.Contains(string(reply.Data), "forbidden") {
		t.Errorf("forged Nats-Request-Info: %s %s", code, reply.Data)
	}

	if after := snapshot(t, srv, streams...); !reflect.DeepEqual(before, after) {
		t.Errorf("refused requests changed the streams:\nbefore %+v\nafter  %+v", before, after)
	}

	// The refusals are in the audit log.
	if n := countAudited(t, as("auditor"), "forbidden", 9); n < 9 {
		t.Errorf("%d forbidden requests audited, want at least 9", n)
	}

	// The approval's own agent answers it.
	if _, err := b.Answer(ctx, messages.DecideRequest{ApprovalID: pending.Approval.ApprovalID, Decision: messages.DecisionDeny, By: "the user"}); err != nil {
		t.Fatalf("B answering its own approval: %v", err)
	}
	// An operator decides what an agent may not.
	asked, err := b.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"nod"}`)})
	if err != nil || asked.State != messages.StateAwaitingApproval {
		t.Fatalf("B's queued approval: %+v %v", asked, err)
	}
	_, err = b.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: asked.Approval.ApprovalID, Decision: messages.DecisionApprove})
	forbidden("an agent deciding its own call's approval", err)
	decided, err := operator.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: asked.Approval.ApprovalID, Decision: messages.DecisionApprove})
	if err != nil || decided.Approval.DecidedBy != "operator" {
		t.Fatalf("the operator deciding: %+v %v", decided, err)
	}
	// The agent follows its call from its own account.
	if res, err := b.Wait(ctx, asked.CallID); err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("B waiting for its approved call: %+v %v", res, err)
	}
	if err := operator.Operator().SetToolEnabled(ctx, "demo-word_count", false, "maintenance"); err != nil {
		t.Fatalf("the operator disabling a tool: %v", err)
	}
}

// countAudited counts the audit records of one decision, waiting for at
// least want of them.
func countAudited(t *testing.T, nc *nats.Conn, decision string, want int) int {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(testenv.Context(t), "TOOLBUS_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	subject := "toolbus.audit." + decision
	var n int
	if decision == messages.AuditAllowed || decision == messages.AuditRemembered {
		// Copied from the calls' queued events, in batches.
		batches := transport.NewStream(nc, nil, "TOOLBUS_AUDIT")
		testenv.Eventually(t, "audit records copied", func() bool {
			n = 0
			err := batches.GetBatch(testenv.Context(t), transport.BatchRequest{Seq: 1, NextBySubject: "toolbus.audit." + messages.AuditCalls, Batch: 1000}, func(_ uint64, msg *nats.Msg) bool {
				var batch messages.AuditBatch
				if _, err := messages.Decode(messages.Header(msg.Header), msg.Data, &batch); err != nil {
					t.Fatal(err)
				}
				for _, rec := range batch.Records {
					if rec.Decision == decision {
						n++
					}
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			return n >= want
		})
		return n
	}
	// Records are written without waiting; wait for them to be stored.
	testenv.Eventually(t, "audit records", func() bool {
		info, err := stream.Info(testenv.Context(t), jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		n = int(info.State.Subjects[subject])
		return n >= want
	})
	return n
}

// TestCoordinatorWithoutIdentitiesFailsClosed: on the deploy
// configuration, a coordinator started without an identities file
// refuses every request from the agents' account, whose caller it could
// not check, with forbidden saying so, and records nothing but the
// refusal; it does not trust the agent a request names.
func TestCoordinatorWithoutIdentitiesFailsClosed(t *testing.T) {
	t.Parallel()
	srv := testenv.ServerWith(t, natsserver.Config{ConfigFile: filepath.Join(deployDir(t), "users.conf")})
	as := func(user string) *nats.Conn {
		return testenv.Connect(t, srv.URL(), deployUser(user, deployPassword(user))...)
	}
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Conn = as("coordinator") })
	testenv.Worker(t, "", worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	ctx := testenv.Context(t)
	streams := []string{"TOOLBUS_EVENTS", "KV_toolbus_turns", "KV_toolbus_approvals"}
	before := snapshot(t, srv, streams...)
	for _, user := range []string{"agent_a", "operator"} {
		c := agentClient(t, as(user), "support-bot")
		_, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"x"}`), Turn: "turn-1"})
		if !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) || !strings.Contains(err.Error(), "no identities file") {
			t.Errorf("%s submitting: err = %v, want forbidden naming the missing identities file", user, err)
		}
		_, err = c.ListTools(ctx, messages.ListToolsRequest{})
		if !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) {
			t.Errorf("%s listing tools: err = %v, want forbidden", user, err)
		}
	}
	if after := snapshot(t, srv, streams...); !reflect.DeepEqual(before, after) {
		t.Errorf("refused requests changed the streams:\nbefore %+v\nafter  %+v", before, after)
	}
	if n := countAudited(t, as("auditor"), "forbidden", 4); n < 4 {
		t.Errorf("%d refusals audited, want 4", n)
	}
}

// TestAnIdempotentCallIsNamedByItsOwnID: a user that names no agent acts
// as its own, which the coordinator fills in; the call's ID, derived from
// the agent and the key, is then the one the client reports (the CLI
// prints it, and cancels it on an interrupt), not one derived without
// the agent.
func TestAnIdempotentCallIsNamedByItsOwnID(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, func(t *testing.T, kind deployKind) {
		d := identityDeployOf(t, kind)
		c := agentClient(t, d.connector(t)("agent_a"), "")
		var named []string
		req := messages.SubmitRequest{Tool: "demo-word_count", Arguments: messages.JSON(`{"text":"one two"}`), IdempotencyKey: "order-1234"}
		res, err := c.CallObserved(testenv.Context(t), req, &client.CallObserver{Named: func(id string) { named = append(named, id) }})
		if err != nil {
			t.Fatal(err)
		}
		if len(named) != 1 || named[0] != res.CallID {
			t.Errorf("named %v, want the call's own ID %s once", named, res.CallID)
		}
	})
}
