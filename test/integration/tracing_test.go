package integration

import (
	"strings"
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
// coordinator's submit span, whose "send" span is the parent of the
// worker's "process" span, the parent of its "execute_tool" span.
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
			name := s.Name()
			if strings.HasPrefix(name, "send ") || strings.HasPrefix(name, "process ") {
				name, _, _ = strings.Cut(name, " ")
			}
			spans[name] = s
		}
		return spans["execute_tool demo-echo"] != nil && spans["process"] != nil && spans["send"] != nil && spans["toolbus.submit"] != nil
	})
	submit, send, process, execute := spans["toolbus.submit"], spans["send"], spans["process"], spans["execute_tool demo-echo"]
	agentID := agentSpan.SpanContext()
	if submit.SpanContext().TraceID() != agentID.TraceID() || submit.Parent().SpanID() != agentID.SpanID() {
		t.Fatalf("submit span is not the agent span's child")
	}
	if send.SpanContext().TraceID() != agentID.TraceID() || send.Parent().SpanID() != submit.SpanContext().SpanID() {
		t.Fatalf("send span is not the submit span's child")
	}
	if process.SpanContext().TraceID() != agentID.TraceID() || process.Parent().SpanID() != send.SpanContext().SpanID() {
		t.Fatalf("worker's process span is not the send span's child")
	}
	if execute.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Fatalf("execute_tool span is not the process span's child")
	}
}
