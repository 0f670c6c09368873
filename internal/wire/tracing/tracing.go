// Package tracing carries W3C trace context across Toolbus's messages and
// opens the spans of the call path with OpenTelemetry. Spans go to the
// global TracerProvider: nowhere until the program installs one, as the
// commands do with internal/wire/telemetry when an exporter is configured.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Name is the instrumentation scope of Toolbus's spans.
const Name = "github.com/toolbus/toolbus"

// propagator reads and writes the lowercase traceparent and tracestate
// headers; NATS headers are case-sensitive, so they are used as written.
var propagator = propagation.TraceContext{}

// header adapts a NATS-style header map to the propagator without
// canonicalising key case.
type header map[string][]string

func (h header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h header) Set(key, value string) { h[key] = []string{value} }

func (h header) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// Extract returns ctx with the trace context found in the headers, if any.
func Extract(ctx context.Context, h map[string][]string) context.Context {
	return propagator.Extract(ctx, header(h))
}

// Inject writes ctx's trace context into the headers.
func Inject(ctx context.Context, h map[string][]string) {
	propagator.Inject(ctx, header(h))
}

// Tracer returns Toolbus's tracer from tp, or from the global provider when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return globalTracer{otel.GetTracerProvider().Tracer(Name)}
	}
	return tp.Tracer(Name)
}

// unsetProvider is the global provider before a program installs one.
var unsetProvider = otel.GetTracerProvider()

// globalTracer opens spans with the global provider's tracer once a
// provider is installed. Until then it opens none: the default provider's
// spans record nothing, but each would cost allocations on the call path.
// The trace context in ctx still travels on to the next message.
type globalTracer struct{ trace.Tracer }

func (g globalTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if otel.GetTracerProvider() == unsetProvider {
		return ctx, noSpan
	}
	return g.Tracer.Start(ctx, name, opts...)
}

// noSpan is OpenTelemetry's span that does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// ErrorTypeKey is OpenTelemetry's attribute of the class of error an
// operation ended with (error.type).
const ErrorTypeKey = attribute.Key("error.type")

// Failed marks span as ended in error, after OpenTelemetry's conventions:
// status Error with the description, and errorType as error.type.
func Failed(span trace.Span, errorType, description string) {
	span.SetAttributes(ErrorTypeKey.String(errorType))
	span.SetStatus(codes.Error, description)
}

// Outcome marks span with a call's result: Error, with the result's error
// code as error.type, when the call did not end with a successful answer
// (the tool reported an error or failed, the call timed out, was cancelled
// or denied). A successful result leaves the status unset, as the
// conventions ask of instrumentation.
func Outcome(span trace.Span, res *messages.CallResult) {
	switch {
	case res.Error != nil:
		Failed(span, res.Error.Code, res.Error.Message)
	case res.IsError:
		Failed(span, messages.ResultToolError, "the tool reported an error")
	}
}
