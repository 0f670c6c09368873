package integration

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

func available(t *testing.T, c *client.Client, tool string) bool {
	t.Helper()
	reply, err := c.ListTools(testenv.Context(t), messages.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range reply.Tools {
		if e.Name == tool {
			return e.Available
		}
	}
	t.Fatalf("%s is not in the catalog", tool)
	return false
}

// TestLivenessFollowsWorkers: a namespace whose only worker dies becomes
// unavailable within the heartbeat window, and available again when a
// worker starts.
func TestLivenessFollowsWorkers(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.FailWhenUnavailable = true })
	bin := testenv.Binary(t, "./cmd/worker")
	w := testenv.Start(t, bin, "--server", srv.URL(), "--demo", "--id", "w1", "--heartbeat", "200ms")
	w.WaitLine(t, "worker w1 ready")
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	testenv.Eventually(t, "demo tools to be available", func() bool { return available(t, c, "demo-echo") })

	w.Kill() // no goodbye: only the missing heartbeats tell
	testenv.Eventually(t, "demo tools to become unavailable", func() bool { return !available(t, c, "demo-echo") })
	if _, err := c.Call(ctx, "demo-echo", map[string]string{"text": "x"}); !errors.Is(err, messages.ErrToolUnavailable) {
		t.Fatalf("call without a worker: %v", err)
	}
	// A model is not shown tools nothing can run.
	view, err := c.ListTools(ctx, messages.ListToolsRequest{Agent: "a", Namespace: demo.Name})
	if err != nil || len(view.Tools) != 0 {
		t.Fatalf("model view without workers: %v %v", namesOf(view), err)
	}

	// The default heartbeat: a short one could lapse on a busy machine
	// between the check below and the call; its goodbye is what is tested.
	w2 := testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	testenv.Eventually(t, "demo tools to be available again", func() bool { return available(t, c, "demo-echo") })
	if res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "back"}); err != nil || res.Worker != w2.ID() {
		t.Fatalf("%+v %v", res, err)
	}
	// A worker that stops cleanly says goodbye: unavailable at once.
	if err := w2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the stopped worker's goodbye", func() bool { return !available(t, c, "demo-echo") })
}

func TestDisableAndEnable(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	bin := testenv.Binary(t, "./cmd/toolbus")
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"--server", srv.URL()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("toolbus %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out, err := exec.Command(bin, "--server", srv.URL(), "tools", "disable", "demo-echo").CombinedOutput(); err == nil || !strings.Contains(string(out), "reason") {
		t.Fatalf("disable without a reason: %v %s", err, out)
	}
	cli("tools", "disable", "demo-echo", "--reason", "returns garbage")
	testenv.Eventually(t, "echo to be disabled", func() bool {
		_, err := c.Call(ctx, "demo-echo", map[string]string{"text": "x"})
		return errors.Is(err, messages.ErrToolDisabled)
	})
	if out := cli("tools"); !strings.Contains(out, "disabled: returns garbage") {
		t.Fatalf("tools list:\n%s", out)
	}
	view, err := c.ListTools(ctx, messages.ListToolsRequest{Agent: "a", Namespace: demo.Name})
	if err != nil || len(view.Tools) != 3 {
		t.Fatalf("model view: %v %v", namesOf(view), err)
	}
	// A whole namespace.
	cli("tools", "disable", "demo", "--reason", "maintenance")
	testenv.Eventually(t, "demo to be disabled", func() bool {
		_, err := c.Call(ctx, "demo-sha256", map[string]string{"text": "x"})
		return errors.Is(err, messages.ErrToolDisabled) && strings.Contains(err.Error(), "maintenance")
	})
	cli("tools", "enable", "demo")
	cli("tools", "enable", "demo-echo")
	testenv.Eventually(t, "echo to be enabled", func() bool {
		res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "x"})
		return err == nil && !res.IsError
	})
	if _, err := c.Call(ctx, "demo-sha256", map[string]string{"text": "x"}); err != nil {
		t.Fatal(err)
	}
}
