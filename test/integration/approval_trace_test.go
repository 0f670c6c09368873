package integration

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestApprovedCallRunsInTheSubmittersTrace: a call held for an approval
// keeps its submit's trace context in the approval's record, across a
// restart of the coordinator; once approved by an operator working in a
// trace of their own, the worker runs it in the agent's trace, and
// calls.get with trace shows that trace.
func TestApprovedCallRunsInTheSubmittersTrace(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	srv := testenv.Server(t)
	pol := mustPolicy(t, testPolicy)
	first := testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = pol; cfg.TracerProvider = tp })
	testenv.Worker(t, srv.URL(), worker.Config{TracerProvider: tp}, worker.Namespace{Name: "t", Tools: policyTools(newCounter())})
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "bot"})
	ctx := testenv.Context(t)

	agentCtx, agentSpan := tp.Tracer("agent").Start(ctx, "agent turn")
	r, err := agent.Submit(agentCtx, messages.SubmitRequest{Tool: "t-wipe", Turn: "t1"})
	agentSpan.End()
	if err != nil || r.State != messages.StateAwaitingApproval {
		t.Fatalf("submit: %+v %v", r, err)
	}
	agentTrace := agentSpan.SpanContext().TraceID()

	// The record in the approvals bucket carries the trace context.
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, messages.MustNames(messages.DefaultPrefix).ApprovalsBucket())
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, "approvals."+r.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(entry.Value()), `"traceparent":"00-`+agentTrace.String()+"-") {
		t.Fatalf("approval record without the agent's trace %s: %s", agentTrace, entry.Value())
	}

	// Another coordinator decides: the trace context is read from the record.
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.Policy = pol; cfg.TracerProvider = tp })
	operator := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	operatorCtx, operatorSpan := tp.Tracer("console").Start(ctx, "approve")
	if _, err := operator.Operator().Decide(operatorCtx, messages.DecideRequest{ApprovalID: r.CallID, Decision: messages.DecisionApprove, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	operatorSpan.End()
	res, err := agent.Wait(ctx, r.CallID)
	if err != nil || res.Status != messages.StateCompleted {
		t.Fatalf("approved call: %+v %v", res, err)
	}

	var process, decision sdktrace.ReadOnlySpan
	testenv.Eventually(t, "the worker's and the decision's spans to end", func() bool {
		for _, s := range rec.Ended() {
			switch {
			case strings.HasPrefix(s.Name(), "process ") && hasAttribute(s, "toolbus.call_id", r.CallID):
				process = s
			case s.Name() == "toolbus.approval.decide":
				decision = s
			}
		}
		return process != nil && decision != nil
	})
	if got := process.SpanContext().TraceID(); got != agentTrace {
		t.Errorf("the worker ran the approved call in trace %s, not the agent's %s", got, agentTrace)
	}
	if decision.SpanContext().TraceID() != operatorSpan.SpanContext().TraceID() || len(decision.Links()) != 1 || decision.Links()[0].SpanContext.TraceID() != agentTrace {
		t.Errorf("decision span in trace %s with links %v: want the operator's trace, linked to the agent's", decision.SpanContext().TraceID(), decision.Links())
	}
	info, err := operator.GetTraced(ctx, r.CallID)
	if err != nil || info.TraceID != agentTrace.String() {
		t.Fatalf("calls.get with trace: %+v %v; want trace %s", info, err, agentTrace)
	}
}

func hasAttribute(s sdktrace.ReadOnlySpan, key, value string) bool {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key && kv.Value.AsString() == value {
			return true
		}
	}
	return false
}
