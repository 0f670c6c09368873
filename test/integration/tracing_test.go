package integration

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/demo"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestTraceContextFollowsTheCall: the agent's span is the parent of the
// coordinator's submit span, which is the parent of the worker's span.
func TestTraceContextFollowsTheCall(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) { cfg.TracerProvider = tp })
	testenv.Worker(t, srv.URL(), worker.Config{TracerProvider: tp}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{})

	ctx, agentSpan := tp.Tracer("agent").Start(testenv.Context(t), "agent turn")
	res, err := c.Call(ctx, "demo-echo", map[string]string{"text": "traced"})
	agentSpan.End()
	if err != nil || res.IsError {
		t.Fatalf("%+v %v", res, err)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	// The coordinator may end its span after the worker ended its own: a
	// quiet submit's call runs once it is queued, while the coordinator
	// still finishes the submit.
	eventually(t, "the coordinator's and the worker's spans to end", func() bool {
		for _, s := range rec.Ended() {
			spans[s.Name()] = s
		}
		return spans["toolbus.execute demo-echo"] != nil && spans["toolbus.submit"] != nil
	})
	submit, execute := spans["toolbus.submit"], spans["toolbus.execute demo-echo"]
	if submit == nil {
		t.Fatalf("spans %v", spans)
	}
	agentID := agentSpan.SpanContext()
	if submit.SpanContext().TraceID() != agentID.TraceID() || submit.Parent().SpanID() != agentID.SpanID() {
		t.Fatalf("submit span is not the agent span's child")
	}
	if execute.SpanContext().TraceID() != agentID.TraceID() || execute.Parent().SpanID() != submit.SpanContext().SpanID() {
		t.Fatalf("worker span is not the submit span's child")
	}
}
