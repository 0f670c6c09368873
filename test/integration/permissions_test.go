package integration

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// violations collects the permission errors the server reports to a connection.
type violations chan error

func (v violations) option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			select {
			case v <- err:
			default:
			}
		}
	})
}

// TestDeployedUsersEnforceTheirRoles runs the whole call path with the
// users of deploy/nats/users.conf, the coordinator reading the deploy
// identities file, and checks that no role hits a permission it needs and
// that an agent cannot skip the coordinator. TestRoleMatrix tries what
// each role may not do.
func TestDeployedUsersEnforceTheirRoles(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testDeployedUsersEnforceTheirRoles)
}

func testDeployedUsersEnforceTheirRoles(t *testing.T, kind deployKind) {
	d := startDeploy(t, kind, false)
	srv := d.srv
	as := func(user string, opts ...nats.Option) *nats.Conn { return d.as(t, user, opts...) }

	coordinatorViolations := make(violations, 10)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator", coordinatorViolations.option())
		cfg.Identities = d.ids
	})
	workerViolations := make(violations, 10)
	w := testenv.Worker(t, "", worker.Config{Conn: as("worker_demo", workerViolations.option())},
		worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	agentViolations := make(violations, 10)
	agentConn := as("agent_a", agentViolations.option())
	c := agentClient(t, agentConn, "support-bot")
	ctx := testenv.Context(t)

	// The whole call path works.
	res, err := c.Call(ctx, "demo-word_count", map[string]string{"text": "with users"})
	if err != nil || res.Status != messages.StateCompleted || res.Worker != w.ID() {
		t.Fatalf("call: %+v %v", res, err)
	}
	r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":0.3}`), Turn: "turn-1"})
	if err != nil {
		t.Fatal(err)
	}
	progress := 0
	for ev, err := range c.Watch(ctx, r.CallID) {
		if err != nil {
			t.Fatalf("watch as an agent: %v", err)
		}
		if ev.Kind == messages.EventProgress {
			progress++
		}
	}
	if progress == 0 {
		t.Fatal("no progress seen by the agent")
	}
	if turn, err := c.Turn(ctx, "turn-1"); err != nil || len(turn.Calls) != 1 {
		t.Fatalf("turn: %+v %v", turn, err)
	}
	long, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":60}`)})
	if err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, c, long.CallID, messages.EventStarted)
	if _, err := c.Cancel(ctx, long.CallID, ""); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(ctx, long.CallID); err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("cancel as an agent: %+v %v", res, err)
	}
	// The coordinator's own worker serves the built-in discovery tool.
	if res, err := c.Call(ctx, "llm_tools-list", map[string]string{"query": "count words"}, client.WithTurn("turn-1")); err != nil || res.IsError {
		t.Fatalf("built-in tool: %+v %v", res, err)
	}
	select {
	case err := <-coordinatorViolations:
		t.Fatalf("the coordinator hit a permission it needs: %v", err)
	case err := <-workerViolations:
		t.Fatalf("the worker hit a permission it needs: %v", err)
	case err := <-agentViolations:
		t.Fatalf("the agent hit a permission it needs: %v", err)
	default:
	}

	// An agent cannot skip the coordinator.
	before := snapshot(t, srv, names.EventsStream())[names.EventsStream()].LastSeq
	if err := agentConn.Publish("toolbus.call.demo.echo", []byte(`{"call_id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, agentViolations, "the agent's publish to be refused"); !strings.Contains(err.Error(), "toolbus.call.demo.echo") {
		t.Fatalf("violation %v", err)
	}
	// Nor switch tools off, which is for operators.
	if err := c.Operator().SetToolEnabled(ctx, "demo-echo", false, ""); !errors.Is(err, &messages.Error{Code: messages.CodeForbidden}) {
		t.Fatalf("an agent disabling a tool: %v", err)
	}
	if after := snapshot(t, srv, names.EventsStream())[names.EventsStream()].LastSeq; after != before {
		t.Fatalf("the events stream moved from %d to %d", before, after)
	}
}
