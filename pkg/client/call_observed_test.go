package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestCallObserved: the observer learns the call's ID before the result,
// and a call held for an operator's approval ends CallObserved at once
// when the observer says so, or is waited for through the decision when
// it does not.
func TestCallObserved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for path, content := range map[string]string{
		"bundles/b.yaml": "id: b\nmatch:\n  - name: \"o:plain\"\n  - name: \"o:guarded\"\n    approval: {mode: queue, message: \"An operator decides\"}\n",
		"agents/a.yaml":  "id: a\ntool:\n  bundles: [b]\n",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(c *coordinator.Config) { c.WorkspaceDir = dir })
	answer := func(ctx context.Context, _ struct{}) (string, error) { return "ran", nil }
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "o", Tools: []worker.Tool{
		worker.Func("plain", "Runs.", answer),
		worker.Func("guarded", "Runs once approved.", answer),
	}})
	ctx := testenv.Context(t)
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "a"})

	var named []string
	res, err := c.CallObserved(ctx, messages.SubmitRequest{Tool: "o-plain", Turn: "t1"}, &client.CallObserver{
		Named: func(id string) { named = append(named, id) },
	})
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("plain: %+v %v", res, err)
	}
	if len(named) != 1 || named[0] != res.CallID {
		t.Fatalf("named %v, the result is call %s", named, res.CallID)
	}

	named = nil
	_, err = c.CallObserved(ctx, messages.SubmitRequest{Tool: "o-guarded", Turn: "t1"}, &client.CallObserver{
		Named: func(id string) { named = append(named, id) },
		Held:  func(*messages.SubmitReply) bool { return true },
	})
	var held *client.ApprovalRequiredError
	if !errors.As(err, &held) || held.Approval.Mode != messages.ApprovalQueue || len(named) != 1 || held.CallID != named[0] {
		t.Fatalf("held: %v (named %v)", err, named)
	}
	if !strings.Contains(err.Error(), "an operator's approval") {
		t.Fatalf("a hold for an operator's approval says %q", err)
	}

	// Not stopped at the hold, the call is waited for through the decision.
	decided := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = c.CallObserved(ctx, messages.SubmitRequest{Tool: "o-guarded", Turn: "t2"}, &client.CallObserver{
			Held: func(reply *messages.SubmitReply) bool {
				go func() {
					_, err := c.Operator().Decide(ctx, messages.DecideRequest{ApprovalID: reply.Approval.ApprovalID, Decision: messages.DecisionApprove, By: "operator"})
					decided <- err
				}()
				return false
			},
		})
	}()
	if err := receive(t, ctx, decided, "decision"); err != nil {
		t.Fatal(err)
	}
	<-done
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("approved: %+v %v", res, err)
	}
}
