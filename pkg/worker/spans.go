package worker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
)

// startSpans opens the spans of one delivery of a call, in the trace that
// the message's headers carry: the "process" span of the message, after
// OpenTelemetry's messaging conventions, and inside it the tool's
// "execute_tool" span, after its GenAI conventions. The tool gets the
// returned context; ending the returned span ends both.
func (w *Worker) startSpans(msg jetstream.Msg, ns string, req *messages.CallRequest, attempt int) (context.Context, trace.Span) {
	ctx, process := w.tracer.Start(tracing.Extract(context.Background(), msg.Headers()), "process "+msg.Subject(),
		trace.WithSpanKind(trace.SpanKindConsumer))
	if !process.IsRecording() {
		return ctx, process
	}
	consumer, _ := w.names.Consumers().Durable(ns)
	process.SetAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", msg.Subject()),
		attribute.String("messaging.consumer.group.name", consumer),
		attribute.String("messaging.message.id", req.CallID),
		attribute.String("toolbus.call_id", req.CallID),
		attribute.String("toolbus.namespace", ns),
		attribute.Int("toolbus.attempt", attempt),
		attribute.String("toolbus.worker", w.cfg.ID),
	)
	ctx, execute := w.tracer.Start(ctx, "execute_tool "+req.Tool, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", req.Tool),
			attribute.String("gen_ai.tool.call.id", req.CallID),
			attribute.String("gen_ai.tool.type", "function"),
		))
	return ctx, spanPair{Span: execute, outer: process}
}

// spanPair is a span and its parent, ended together.
type spanPair struct {
	trace.Span
	outer trace.Span
}

func (p spanPair) End(options ...trace.SpanEndOption) {
	p.Span.End(options...)
	p.outer.End(options...)
}
