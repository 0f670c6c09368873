package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestAgentsReadWholeResultsOfTheirOwnCallsOnly: with the deploy
// configuration, an agent's user (whose account has no JetStream) reads
// the whole of its call's cut result through the coordinator; another
// agent's user is refused; and a result whose full_result reference a
// worker pointed at another call's object does not lead the coordinator
// there: it reads the object named by the call's own ID, in the store of
// the call's own namespace.
func TestAgentsReadWholeResultsOfTheirOwnCallsOnly(t *testing.T) {
	t.Parallel()
	forEachDeploy(t, testAgentsReadWholeResultsOfTheirOwnCallsOnly)
}

func testAgentsReadWholeResultsOfTheirOwnCallsOnly(t *testing.T, kind deployKind) {
	d := startDeploy(t, kind, false)
	srv, as := d.srv, d.connector(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Conn = as("coordinator")
		cfg.Identities = d.ids
	})
	whole := strings.Repeat("0123456789", 200_000) // 2 MB: several pages
	held := make(chan struct{})
	testenv.Worker(t, "", worker.Config{Conn: as("worker_demo")}, worker.Namespace{Name: "demo", Tools: []worker.Tool{
		worker.Func("big", "Returns a lot.", func(ctx context.Context, in struct{}) (string, error) { return whole, nil }, worker.WithMaxResultSize(100)),
		worker.Func("held", "Waits until told.", func(ctx context.Context, in struct{}) (string, error) {
			select {
			case <-held:
			case <-ctx.Done():
			}
			return "late", nil
		}),
	}})
	t.Cleanup(func() { close(held) })
	ctx := testenv.Context(t)
	connA, connB := as("agent_a"), as("agent_b")
	a := agentClient(t, connA, "support-bot")
	res, err := a.Call(ctx, "demo-big", nil)
	if err != nil || !res.Truncated || res.FullResult == nil {
		t.Fatalf("a cut result: %+v %v", res, err)
	}
	got, err := a.FullResult(ctx, res.FullResult)
	if err != nil || len(got.Content) != 1 || got.Content[0].Text != whole {
		t.Fatalf("agent_a's whole result: %v", err)
	}
	if got, err := agentClient(t, as("operator"), "").FullResult(ctx, res.FullResult); err != nil || got.Content[0].Text != whole {
		t.Fatalf("the operator's read of the whole result: %v", err)
	}
	if code, err := rawWait(ctx, connB, messages.EndpointCallsFullResult, map[string]any{"call_id": res.CallID}); err != nil || code != messages.CodeForbidden {
		t.Fatalf("agent_b reading agent_a's whole result: %q %v, want forbidden", code, err)
	}

	// A worker of the call's namespace commits a cut result for another
	// call of agent_a, naming the first call's object as its whole.
	sub, err := a.Submit(ctx, messages.SubmitRequest{Tool: "demo-held", Turn: "forged-ref"})
	if err != nil {
		t.Fatal(err)
	}
	wc := as("worker_demo")
	js, err := jetstream.New(wc)
	if err != nil {
		t.Fatal(err)
	}
	forged := messages.CallResult{CallID: sub.CallID, Tool: "demo-held", Status: messages.StateCompleted, Truncated: true,
		Content: []messages.ContentBlock{messages.TextBlock("cut")}, FinishedAt: time.Now().UTC(), FullResult: res.FullResult}
	if won, err := ledger.New(wc, js, messages.MustNames("")).Commit(ctx, messages.TurnBucket("forged-ref"), "demo", &forged, ""); err != nil || !won {
		t.Fatalf("the worker's result: won %v, %v", won, err)
	}
	if code, err := rawWait(ctx, connA, messages.EndpointCallsFullResult, map[string]any{"call_id": sub.CallID}); err != nil || code != messages.CodeCallNotFound {
		t.Fatalf("a whole result named by another call's reference: %q %v, want call_not_found", code, err)
	}
}
