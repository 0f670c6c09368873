package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Before a program installs a tracer provider, the global tracer opens no
// span, yet the caller's trace context goes on to the next message; once
// one is installed, spans are recorded. (This test owns the global
// provider of this package's test binary.)
func TestGlobalTracerOpensSpansOnceAProviderIsInstalled(t *testing.T) {
	tracer := Tracer(nil)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := Extract(context.Background(), map[string][]string{"traceparent": {parent}})
	got, span := tracer.Start(ctx, "before")
	if got != ctx || span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatalf("a span was opened without a provider: %v", span.SpanContext())
	}
	span.End()
	out := map[string][]string{}
	Inject(got, out)
	if v := out["traceparent"]; len(v) != 1 || v[0] != parent {
		t.Fatalf("trace context not passed on: %v", out)
	}

	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	_, span = tracer.Start(ctx, "after")
	if !span.IsRecording() {
		t.Fatal("no span with a provider installed")
	}
	span.End()
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "after" || ended[0].Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("recorded spans %v", ended)
	}
}
