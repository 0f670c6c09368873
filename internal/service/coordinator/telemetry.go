package coordinator

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
	"github.com/toolbus/toolbus/internal/wire/tracing"
	"github.com/toolbus/toolbus/pkg/messages"
)

// metered counts the requests of a discovery endpoint and their time.
func metered(h handlerFunc) handlerFunc {
	return func(ctx context.Context, req *request) (any, error) {
		if !metrics.Enabled() {
			return h(ctx, req)
		}
		start := time.Now()
		reply, err := h(ctx, req)
		metrics.DiscoveryQuery(time.Since(start), err != nil)
		return reply, err
	}
}

// submitted counts a call the submit pipeline accepted: queued, or held
// for an approval. A submit answered with an existing call counts none.
func submitted(call *messages.CallRequest) { metrics.CallSubmitted(call.Tool, call.Namespace) }

// countPending records how many of the approvals wait for a decision.
func countPending(all []storedApproval) {
	if !metrics.Enabled() {
		return
	}
	pending := 0
	for i := range all {
		if all[i].rec.State == messages.ApprovalPending {
			pending++
		}
	}
	metrics.ApprovalsPending(pending)
}

// measureNamespaces records, for every namespace the catalog knows, its
// live workers and the calls waiting in its consumer: one consumer info
// request per namespace per sweep, made only with metrics on.
func (s *sweeper) measureNamespaces(ctx context.Context) {
	if !metrics.Enabled() || s.catalog == nil {
		return
	}
	for ns, alive := range s.catalog.LiveWorkers() {
		metrics.WorkersAlive(ns, alive)
		name, err := s.stream.names.Consumers().Durable(ns)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		cons, err := s.stream.stream.Consumer(cctx, name)
		if err == nil {
			var info *jetstream.ConsumerInfo
			if info, err = cons.Info(cctx); err == nil {
				metrics.QueueDepth(ns, info.NumPending)
			}
		}
		cancel()
	}
}

// sendSpan records the publish of a call's queued event, its work item, as a
// messaging "send" span, a child of the submit's, and returns the context
// whose trace context the message carries to the worker. Without a
// recording span in ctx it opens none.
func sendSpan(ctx context.Context, subject string, call *messages.CallRequest) context.Context {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx
	}
	parent.SetAttributes(attribute.String("toolbus.call_id", call.CallID), attribute.String("gen_ai.tool.call.id", call.CallID))
	ctx, span := parent.TracerProvider().Tracer(tracing.Name).Start(ctx, "send "+subject,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "send"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.message.id", call.CallID),
			attribute.String("gen_ai.tool.name", call.Tool),
			attribute.String("gen_ai.tool.call.id", call.CallID),
			attribute.String("toolbus.namespace", call.Namespace),
		))
	span.End()
	return ctx
}
