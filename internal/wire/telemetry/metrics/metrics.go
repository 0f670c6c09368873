// Package metrics holds the instruments of Toolbus's metrics, recorded
// with OpenTelemetry's global meter provider. Until a program installs
// one (internal/wire/telemetry does, when metrics are exported), recording
// costs one atomic load: no attribute set is built.
//
// docs/operations.md lists every instrument with its name, unit and
// attributes; keep the two together.
package metrics

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Name is the instrumentation scope of Toolbus's metrics.
const Name = "github.com/toolbus/toolbus"

// on is set once a meter provider that exports is installed.
var on atomic.Bool

// Enable makes the instruments record. The program calls it after it
// installed its meter provider with otel.SetMeterProvider.
func Enable() { on.Store(true) }

// Enabled reports whether the instruments record.
func Enabled() bool { return on.Load() }

// Buckets of the duration histograms, in seconds: from a millisecond (a
// call answered from memory) to ten minutes (the default call timeout).
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// The instruments come from the global provider's delegating meter, which
// forwards to the provider installed later.
var (
	meter = otel.Meter(Name)

	callsSubmitted = must(meter.Int64Counter("toolbus.calls.submitted",
		metric.WithUnit("{call}"), metric.WithDescription("Calls accepted by a coordinator: queued, or held for an approval.")))
	callsFinished = must(meter.Int64Counter("toolbus.calls.finished",
		metric.WithUnit("{call}"), metric.WithDescription("Calls whose result was stored, by final state.")))
	callDuration = must(meter.Float64Histogram("toolbus.call.duration",
		metric.WithUnit("s"), metric.WithDescription("From queued to finished, of the calls finished."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)))
	queueWait = must(meter.Float64Histogram("toolbus.call.queue_wait",
		metric.WithUnit("s"), metric.WithDescription("From queued to started by the worker that finished the call."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)))
	inFlight = must(meter.Int64UpDownCounter("toolbus.calls.in_flight",
		metric.WithUnit("{call}"), metric.WithDescription("Calls a worker is running now.")))
	slotsBusy = must(meter.Int64UpDownCounter("toolbus.worker.slots.busy",
		metric.WithUnit("{slot}"), metric.WithDescription("Slots of a worker taken by a call, by namespace.")))
	slotsTotal = must(meter.Int64UpDownCounter("toolbus.worker.slots.total",
		metric.WithUnit("{slot}"), metric.WithDescription("Slots of a worker, by namespace.")))
	redeliveries = must(meter.Int64Counter("toolbus.calls.redelivered",
		metric.WithUnit("{delivery}"), metric.WithDescription("Deliveries of a call to a worker after the first.")))
	approvalsPending = must(meter.Int64Gauge("toolbus.approvals.pending",
		metric.WithUnit("{approval}"), metric.WithDescription("Approvals waiting for a decision, as of the coordinator's last approval sweep.")))
	workersAlive = must(meter.Int64Gauge("toolbus.workers.alive",
		metric.WithUnit("{worker}"), metric.WithDescription("Workers of a namespace whose heartbeat is current, as of the coordinator's last sweep.")))
	queueDepth = must(meter.Int64Gauge("toolbus.queue.depth",
		metric.WithUnit("{call}"), metric.WithDescription("Calls of a namespace waiting for a worker (its consumer's pending messages), as of the coordinator's last sweep.")))
	discoveryQueries = must(meter.Int64Counter("toolbus.discovery.queries",
		metric.WithUnit("{query}"), metric.WithDescription("tools.discover requests answered, with an error or not.")))
	discoveryDuration = must(meter.Float64Histogram("toolbus.discovery.duration",
		metric.WithUnit("s"), metric.WithDescription("Time to answer a tools.discover request."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)))
	leaseHeld = must(meter.Int64Gauge("toolbus.lease.held",
		metric.WithUnit("{lease}"), metric.WithDescription("Whether this process holds a duty's lease and does the duty (1) or stands by (0), by duty.")))
	requestErrors = must(meter.Int64Counter("toolbus.coordinator.request.errors",
		metric.WithUnit("{request}"), metric.WithDescription("Coordinator requests answered with an error, by endpoint and error code.")))
)

func must[T any](instrument T, err error) T {
	if err != nil {
		panic(err) // only an invalid name or unit, fixed at build time
	}
	return instrument
}

// The attribute keys.
const (
	keyTool      = attribute.Key("toolbus.tool")
	keyNamespace = attribute.Key("toolbus.namespace")
	keyState     = attribute.Key("toolbus.state")
	keyEndpoint  = attribute.Key("toolbus.endpoint")
	keyCode      = attribute.Key("toolbus.error.code")
	keyOutcome   = attribute.Key("toolbus.outcome")
	keyDuty      = attribute.Key("toolbus.duty")
)

// LeaseHeld records whether this process holds the lease of a duty
// ("index", "audit_copy", "settled_sweep") and may do it.
func LeaseHeld(duty string, held bool) {
	if !on.Load() {
		return
	}
	var v int64
	if held {
		v = 1
	}
	leaseHeld.Record(context.Background(), v, metric.WithAttributes(keyDuty.String(duty)))
}

// CallSubmitted counts a call a coordinator accepted.
func CallSubmitted(tool, namespace string) {
	if !on.Load() {
		return
	}
	callsSubmitted.Add(context.Background(), 1, metric.WithAttributes(keyTool.String(tool), keyNamespace.String(namespace)))
}

// CallFinished counts a call whose result was stored, with its time from
// queued to finished and, when a worker started it, its queue wait.
func CallFinished(tool, namespace, state string, queued, started, finished time.Time) {
	if !on.Load() {
		return
	}
	ctx := context.Background()
	attrs := metric.WithAttributes(keyTool.String(tool), keyNamespace.String(namespace), keyState.String(state))
	callsFinished.Add(ctx, 1, attrs)
	if !queued.IsZero() && !finished.IsZero() {
		callDuration.Record(ctx, nonNegative(finished.Sub(queued)), attrs)
	}
	if !queued.IsZero() && !started.IsZero() {
		queueWait.Record(ctx, nonNegative(started.Sub(queued)), metric.WithAttributes(keyTool.String(tool), keyNamespace.String(namespace)))
	}
}

func nonNegative(d time.Duration) float64 { return max(d, 0).Seconds() }

// CallRunning counts a call a worker starts (delta 1) or ends (delta -1).
func CallRunning(tool, namespace string, delta int64) {
	if !on.Load() {
		return
	}
	inFlight.Add(context.Background(), delta, metric.WithAttributes(keyTool.String(tool), keyNamespace.String(namespace)))
}

// SlotsBusy adds delta to the busy slots of a worker's namespace.
func SlotsBusy(namespace string, delta int64) {
	if !on.Load() {
		return
	}
	slotsBusy.Add(context.Background(), delta, metric.WithAttributes(keyNamespace.String(namespace)))
}

// SlotsTotal adds delta to the slots of a worker's namespace.
func SlotsTotal(namespace string, delta int64) {
	if !on.Load() {
		return
	}
	slotsTotal.Add(context.Background(), delta, metric.WithAttributes(keyNamespace.String(namespace)))
}

// Redelivered counts a delivery of a call after its first.
func Redelivered(tool, namespace string) {
	if !on.Load() {
		return
	}
	redeliveries.Add(context.Background(), 1, metric.WithAttributes(keyTool.String(tool), keyNamespace.String(namespace)))
}

// ApprovalsPending records how many approvals wait for a decision.
func ApprovalsPending(n int) {
	if !on.Load() {
		return
	}
	approvalsPending.Record(context.Background(), int64(n))
}

// WorkersAlive records how many workers of a namespace are alive.
func WorkersAlive(namespace string, n int) {
	if !on.Load() {
		return
	}
	workersAlive.Record(context.Background(), int64(n), metric.WithAttributes(keyNamespace.String(namespace)))
}

// QueueDepth records how many calls of a namespace wait for a worker.
func QueueDepth(namespace string, n uint64) {
	if !on.Load() {
		return
	}
	queueDepth.Record(context.Background(), int64(min(n, 1<<62)), metric.WithAttributes(keyNamespace.String(namespace)))
}

// DiscoveryQuery counts a tools.discover request and its time; failed
// tells whether it was answered with an error.
func DiscoveryQuery(took time.Duration, failed bool) {
	if !on.Load() {
		return
	}
	outcome := keyOutcome.String("ok")
	if failed {
		outcome = keyOutcome.String("error")
	}
	attrs := metric.WithAttributes(outcome)
	discoveryQueries.Add(context.Background(), 1, attrs)
	discoveryDuration.Record(context.Background(), took.Seconds(), attrs)
}

// RequestError counts a coordinator request answered with an error code.
func RequestError(endpoint, code string) {
	if !on.Load() {
		return
	}
	requestErrors.Add(context.Background(), 1, metric.WithAttributes(keyEndpoint.String(endpoint), keyCode.String(code)))
}
