package integration

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/demo"
	"github.com/toolbus/toolbus/internal/natsserver"
	"github.com/toolbus/toolbus/internal/testenv"
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
// users of deploy/nats/users.conf, and checks what each role may not do.
func TestDeployedUsersEnforceTheirRoles(t *testing.T) {
	t.Parallel()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(filepath.Dir(strings.TrimSpace(string(root))), "deploy", "nats", "users.conf")
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	as := func(user, password string, opts ...nats.Option) *nats.Conn {
		return testenv.Connect(t, srv.URL(), append(opts, deployUser(user, password)...)...)
	}

	coordinatorViolations := make(violations, 10)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator", "coordinator-secret", coordinatorViolations.option())
	})
	workerViolations := make(violations, 10)
	w := testenv.Worker(t, "", worker.Config{Conn: as("worker_demo", "worker-demo-secret", workerViolations.option())},
		worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	clientViolations := make(violations, 10)
	clientConn := as("client", "client-secret", clientViolations.option())
	c, err := client.New(clientConn, client.Options{Agent: "agent"})
	if err != nil {
		t.Fatal(err)
	}
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
			t.Fatalf("watch as client: %v", err)
		}
		if ev.Kind == messages.EventProgress {
			progress++
		}
	}
	if progress == 0 {
		t.Fatal("no progress seen by the client")
	}
	if turn, err := c.Turn(ctx, "turn-1"); err != nil || len(turn.Calls) != 1 {
		t.Fatalf("turn: %+v %v", turn, err)
	}
	long, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-sleep", Arguments: messages.JSON(`{"seconds":60}`)})
	if err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, c, long.CallID, messages.EventStarted)
	if _, err := c.Cancel(ctx, long.CallID, "enough"); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(ctx, long.CallID); err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("cancel as client: %+v %v", res, err)
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
	case err := <-clientViolations:
		t.Fatalf("the client hit a permission it needs: %v", err)
	default:
	}

	// A client cannot skip the coordinator.
	admin := as("coordinator", "coordinator-secret")
	before := streamLastSeqOn(t, admin, names.CallsStream())
	if err := clientConn.Publish("toolbus.call.demo.echo", []byte(`{"call_id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, clientViolations, "the client's publish to be refused"); !strings.Contains(err.Error(), "toolbus.call.demo.echo") {
		t.Fatalf("violation %v", err)
	}
	// Nor switch tools off, which is for operators.
	// A refused publish gets no answer: the request times out.
	shortCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := c.SetToolEnabled(shortCtx, "demo-echo", false, "no"); err == nil {
		t.Fatal("a client disabled a tool")
	}
	receive(t, clientViolations, "the client's tools.disable to be refused")

	// A worker of one namespace cannot take another namespace's calls.
	wc := as("worker_demo", "worker-demo-secret", workerViolations.option())
	if _, err := wc.Request("$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_CALLS.ns_payments", []byte(`{"batch":1}`), time.Second); err == nil {
		t.Fatal("a demo worker pulled from another namespace's consumer")
	}
	if err := receive(t, workerViolations, "the foreign pull to be refused"); !strings.Contains(err.Error(), "ns_payments") {
		t.Fatalf("violation %v", err)
	}
	if _, err := wc.Request("$JS.API.CONSUMER.CREATE.TOOLBUS_CALLS.ns_payments", []byte(`{}`), time.Second); err == nil {
		t.Fatal("a demo worker created another namespace's consumer")
	}
	receive(t, workerViolations, "the foreign consumer creation to be refused")
	if after := streamLastSeqOn(t, admin, names.CallsStream()); after != before {
		t.Fatalf("the calls stream moved from %d to %d", before, after)
	}
}
