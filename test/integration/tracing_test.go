package integration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
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
	testenv.Eventually(t, "the coordinator's and the worker's spans to end", func() bool {
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

// TestWorkerSpansCarryTheOutcome: the worker's process and execute_tool
// spans end with status Error and the result's error code as error.type
// when the tool fails, the call times out or is cancelled, and with the
// status unset when the tool answers.
func TestWorkerSpansCarryTheOutcome(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	g := newGate()
	fail := worker.Func("fail", "Fails.", func(context.Context, struct{}) (string, error) { return "", errors.New("no luck") })
	testenv.Worker(t, srv.URL(), worker.Config{TracerProvider: tp},
		worker.Namespace{Name: "spans", Tools: []worker.Tool{sayTool(), fail, g.tool()}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	testenv.Eventually(t, "the tools to be listed", func() bool {
		reply, err := c.ListTools(ctx, messages.ListToolsRequest{Namespace: "spans"})
		return err == nil && len(reply.Tools) == 3
	})

	want := map[string]string{} // call ID → error.type, "" for none
	res, err := c.Call(ctx, "spans-say", sayArgs{Label: "fine"})
	if err != nil || res.IsError {
		t.Fatalf("%+v %v", res, err)
	}
	want[res.CallID] = ""
	if res, err = c.Call(ctx, "spans-fail", struct{}{}); err != nil || res.Error == nil || res.Error.Code != messages.ResultToolError {
		t.Fatalf("%+v %v", res, err)
	}
	want[res.CallID] = messages.ResultToolError
	// The deadline passes while the tool runs: long enough for a busy
	// machine's worker to start it first, so that it has both spans.
	timedOut, err := c.Submit(ctx, messages.SubmitRequest{Tool: "spans-gate", TimeoutMS: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(ctx, timedOut.CallID); err != nil || res.Status != messages.StateTimedOut {
		t.Fatalf("%+v %v", res, err)
	}
	want[timedOut.CallID] = messages.ResultTimedOut
	cancelled, err := c.Submit(ctx, messages.SubmitRequest{Tool: "spans-gate"})
	if err != nil {
		t.Fatal(err)
	}
	for id := range g.started {
		if id == cancelled.CallID {
			break
		}
	}
	if _, err := c.Cancel(ctx, cancelled.CallID, "enough"); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(ctx, cancelled.CallID); err != nil || res.Status != messages.StateCancelled {
		t.Fatalf("%+v %v", res, err)
	}
	want[cancelled.CallID] = messages.ResultCancelled

	// Each call's two spans, by call ID.
	type pair struct{ process, execute sdktrace.ReadOnlySpan }
	var spans map[string]*pair
	testenv.Eventually(t, "the worker's spans to end", func() bool {
		spans = map[string]*pair{}
		for _, s := range rec.Ended() {
			var id string
			for _, kv := range s.Attributes() {
				if kv.Key == "toolbus.call_id" || kv.Key == "gen_ai.tool.call.id" {
					id = kv.Value.AsString()
				}
			}
			if spans[id] == nil {
				spans[id] = &pair{}
			}
			if strings.HasPrefix(s.Name(), "process ") {
				spans[id].process = s
			} else if strings.HasPrefix(s.Name(), "execute_tool ") {
				spans[id].execute = s
			}
		}
		for id := range want {
			if p := spans[id]; p == nil || p.process == nil || p.execute == nil {
				return false
			}
		}
		return true
	})
	for id, errorType := range want {
		for _, s := range []sdktrace.ReadOnlySpan{spans[id].process, spans[id].execute} {
			var got string
			for _, kv := range s.Attributes() {
				if kv.Key == tracing.ErrorTypeKey {
					got = kv.Value.AsString()
				}
			}
			wantStatus := codes.Error
			if errorType == "" {
				wantStatus = codes.Unset
			}
			if got != errorType || s.Status().Code != wantStatus || (errorType != "" && s.Status().Description == "") {
				t.Errorf("%s of a call that should end with %q: status %v %q, error.type %q", s.Name(), errorType, s.Status().Code, s.Status().Description, got)
			}
		}
	}
}
