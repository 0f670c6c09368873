package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/demo"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// otlpReceiver is an OTLP/HTTP endpoint that keeps the spans exported to
// it, each with the service.name of the process that sent it.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []receivedSpan
	exported chan struct{}
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{exported: make(chan struct{}, 1)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.URL.Path != "/v1/traces" {
			w.WriteHeader(http.StatusOK) // metrics and logs are not looked at here
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			t.Errorf("undecodable export: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			service := stringAttr(rs.GetResource().GetAttributes(), "service.name")
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, receivedSpan{service, s})
				}
			}
		}
		r.mu.Unlock()
		select {
		case r.exported <- struct{}{}:
		default:
		}
		reply, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(reply)
	}))
	t.Cleanup(r.Close)
	return r
}

// await returns the spans received once done says they are complete.
func (r *otlpReceiver) await(t *testing.T, done func([]receivedSpan) bool) []receivedSpan {
	t.Helper()
	timeout := time.After(testenv.Patience)
	for {
		r.mu.Lock()
		spans := append([]receivedSpan(nil), r.spans...)
		r.mu.Unlock()
		if done(spans) {
			return spans
		}
		select {
		case <-r.exported:
		case <-timeout:
			t.Fatalf("the exported spans are not complete within %v: %d spans", testenv.Patience, len(spans))
		}
	}
}

func stringAttr(attrs []*commonpb.KeyValue, key string) string {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// startWithEnv starts a binary with extra environment variables.
func startWithEnv(t *testing.T, env []string, bin string, args ...string) *testenv.Process {
	t.Helper()
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env command")
	}
	return testenv.Start(t, envBin, append(append(env, bin), args...)...)
}

// TestOneConnectedTracePerCallAcrossProcesses follows a call from the
// caller's span (this test's process) through the coordinator's process
// and the worker's: each exports its spans over OTLP/HTTP, configured by
// OTEL_EXPORTER_OTLP_ENDPOINT alone, and they form one trace whose every
// span's parent is in it.
func TestOneConnectedTracePerCallAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	receiver := newOTLPReceiver(t)
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + receiver.URL, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_METRICS_EXPORTER=none"}
	coord := startWithEnv(t, env, testenv.Binary(t, "./cmd/coordinator"), "--server", srv.URL())
	coord.WaitLine(t, "coordinator started")
	w := startWithEnv(t, env, testenv.Binary(t, "./cmd/worker"), "--server", srv.URL(), "--demo", "--id", "traced")
	w.WaitLine(t, "worker traced ready")

	caller := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	t.Cleanup(func() { _ = caller.Shutdown(context.Background()) })
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx, root := caller.Tracer("test").Start(testenv.Context(t), "agent turn")
	reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"traced"}`), Wait: true})
	root.End()
	if err != nil || reply.Result == nil || reply.Result.Status != messages.StateCompleted {
		t.Fatalf("submit: %+v %v", reply, err)
	}
	traceID, rootID := root.SpanContext().TraceID(), root.SpanContext().SpanID()

	inTrace := func(spans []receivedSpan) []receivedSpan {
		var out []receivedSpan
		for _, s := range spans {
			if [16]byte(s.span.TraceId) == traceID {
				out = append(out, s)
			}
		}
		return out
	}
	named := func(spans []receivedSpan, prefix string) *receivedSpan {
		for i := range spans {
			if strings.HasPrefix(spans[i].span.Name, prefix) {
				return &spans[i]
			}
		}
		return nil
	}
	spans := inTrace(receiver.await(t, func(all []receivedSpan) bool {
		s := inTrace(all)
		return named(s, "toolbus.submit") != nil && named(s, "send ") != nil && named(s, "process ") != nil && named(s, "execute_tool ") != nil
	}))

	ids := map[[8]byte]bool{rootID: true}
	for _, s := range spans {
		ids[[8]byte(s.span.SpanId)] = true
	}
	for _, s := range spans {
		if !ids[[8]byte(s.span.ParentSpanId)] {
			t.Errorf("span %q of %s has a parent outside the trace", s.span.Name, s.service)
		}
	}
	submit, send, process, execute := named(spans, "toolbus.submit"), named(spans, "send "), named(spans, "process "), named(spans, "execute_tool ")
	if submit.service != "toolbus-coordinator" || string(submit.span.ParentSpanId) != string(rootID[:]) {
		t.Errorf("submit span from %s, parent %x", submit.service, submit.span.ParentSpanId)
	}
	if send.service != "toolbus-coordinator" || string(send.span.ParentSpanId) != string(submit.span.SpanId) || send.span.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("send span from %s, parent %x, kind %v", send.service, send.span.ParentSpanId, send.span.Kind)
	}
	if process.service != "toolbus-worker" || string(process.span.ParentSpanId) != string(send.span.SpanId) || process.span.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
		t.Errorf("process span from %s, parent %x, kind %v", process.service, process.span.ParentSpanId, process.span.Kind)
	}
	if execute.service != "toolbus-worker" || string(execute.span.ParentSpanId) != string(process.span.SpanId) {
		t.Errorf("execute_tool span from %s, parent %x", execute.service, execute.span.ParentSpanId)
	}
	for span, attrs := range map[*receivedSpan]map[string]string{
		send:    {"messaging.system": "nats", "messaging.operation.type": "send", "messaging.message.id": reply.CallID, "gen_ai.tool.name": "demo-echo"},
		process: {"messaging.system": "nats", "messaging.operation.type": "process", "messaging.message.id": reply.CallID, "messaging.consumer.group.name": "ns_demo"},
		execute: {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "demo-echo", "gen_ai.tool.call.id": reply.CallID},
	} {
		for key, want := range attrs {
			if got := stringAttr(span.span.Attributes, key); got != want {
				t.Errorf("span %q: %s = %q, want %q", span.span.Name, key, got, want)
			}
		}
	}
}

var listenLine = regexp.MustCompile(`serving metrics and health.* addr=(\S+)`)

// metricsAddr waits for a process to log the address of its listener.
func metricsAddr(t *testing.T, p *testenv.Process) string {
	t.Helper()
	m := listenLine.FindStringSubmatch(p.WaitLine(t, "serving metrics and health"))
	if m == nil {
		t.Fatal("no address in the listener's log line")
	}
	return m[1]
}

// scrape reads a process's /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	return families
}

// figure is the value of the series of a family whose labels include
// labels: a counter's or gauge's value, a histogram's count; summed over
// the series that match.
func figure(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	var sum float64
	for _, m := range families[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// awaitFigures scrapes until want holds of the figures, and fails after
// testenv.Patience. A result is counted by the worker once the stream acknowledged its
// write, which may be after the caller has it: no event tells the test.
func awaitFigures(t *testing.T, addr string, want func(map[string]*dto.MetricFamily) error) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for {
		families := scrape(t, addr)
		err := want(families)
		if err == nil {
			return families
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics of %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // polling: see above
	}
}

// TestMetricsCountTheCallsMade makes calls through a coordinator and a
// worker, each a process with --metrics-listen, and reads the figures on
// their /metrics: the calls submitted and finished, the histograms of
// their duration and queue wait, the slots, a discovery query and a
// refused request.
func TestMetricsCountTheCallsMade(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	coord := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", srv.URL(), "--metrics-listen", "127.0.0.1:0")
	coordAddr := metricsAddr(t, coord)
	coord.WaitLine(t, "coordinator started")
	w := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", srv.URL(), "--demo", "--id", "counted", "--slots", "7", "--metrics-listen", "127.0.0.1:0")
	workerAddr := metricsAddr(t, w)
	w.WaitLine(t, "worker counted ready")

	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	const calls = 5
	for i := range calls {
		reply, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(fmt.Sprintf(`{"text":"call %d"}`, i)), Wait: true})
		if err != nil || reply.Result == nil || reply.Result.Status != messages.StateCompleted {
			t.Fatalf("call %d: %+v %v", i, reply, err)
		}
	}
	if _, err := c.Submit(ctx, messages.SubmitRequest{Tool: "demo-no_such_tool"}); err == nil {
		t.Fatal("a call of a tool that does not exist was accepted")
	}
	if _, err := c.Discover(ctx, messages.DiscoverRequest{Query: "echo"}); err != nil {
		t.Fatal(err)
	}

	echo := map[string]string{"toolbus_tool": "demo-echo", "toolbus_namespace": "demo"}
	completed := map[string]string{"toolbus_tool": "demo-echo", "toolbus_namespace": "demo", "toolbus_state": "completed"}
	demoNS := map[string]string{"toolbus_namespace": "demo"}
	// A call's slot is released after its end is counted: both are waited for.
	workerFigures := awaitFigures(t, workerAddr, func(f map[string]*dto.MetricFamily) error {
		if got := figure(f, "toolbus_calls_finished_total", completed); got != calls {
			return fmt.Errorf("%v calls finished, want %d", got, calls)
		}
		if got := figure(f, "toolbus_worker_slots_busy", demoNS); got != 0 {
			return fmt.Errorf("worker slots busy %v with no call running", got)
		}
		return nil
	})
	for name, want := range map[string]float64{
		"toolbus_call_duration_seconds":   calls,
		"toolbus_call_queue_wait_seconds": calls,
		"toolbus_calls_in_flight":         0,
		"toolbus_calls_redelivered_total": 0,
	} {
		if got := figure(workerFigures, name, echo); got != want {
			t.Errorf("worker %s = %v, want %v", name, got, want)
		}
	}
	if got := figure(workerFigures, "toolbus_worker_slots_total", demoNS); got != 7 {
		t.Errorf("worker slots total %v, want 7", got)
	}

	coordFigures := scrape(t, coordAddr)
	if got := figure(coordFigures, "toolbus_calls_submitted_total", echo); got != calls {
		t.Errorf("coordinator counted %v calls submitted, want %d", got, calls)
	}
	if got := figure(coordFigures, "toolbus_coordinator_request_errors_total", map[string]string{"toolbus_endpoint": messages.EndpointCallsSubmit, "toolbus_error_code": string(messages.CodeToolNotFound)}); got != 1 {
		t.Errorf("coordinator counted %v refused submits, want 1", got)
	}
	if got := figure(coordFigures, "toolbus_discovery_queries_total", map[string]string{"toolbus_outcome": "ok"}); got != 1 {
		t.Errorf("coordinator counted %v discovery queries, want 1", got)
	}
	if got := figure(coordFigures, "toolbus_discovery_duration_seconds", nil); got != 1 {
		t.Errorf("discovery duration histogram counts %v, want 1", got)
	}
}

// get returns the status and body of an HTTP GET.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// awaitStatus polls url until it answers status with a body that
// contains each of want, and fails after testenv.Patience. Readiness is a
// state that nothing announces, so it is polled, as a load balancer
// would; on its way to the cause a test makes, a busy process may first
// be unready for another (a check that met its timeout).
func awaitStatus(t *testing.T, url string, status int, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for {
		got, body := get(t, url)
		if got == status && containsAll(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s answers %d %q, want %d naming %q", url, got, body, status, want)
		}
		time.Sleep(50 * time.Millisecond) // polling: see above
	}
}

// TestReadyzFollowsNATS checks the health endpoints of a coordinator and
// a worker: /healthz answers while the process is up; /readyz once its
// streams, buckets and (for the worker) consumers answer, and no longer
// when a consumer is gone or when the NATS server stops.
func TestReadyzFollowsNATS(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	coord := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", srv.URL(), "--metrics-listen", "127.0.0.1:0")
	coordURL := "http://" + metricsAddr(t, coord)
	if status, body := get(t, coordURL+"/healthz"); status != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("coordinator /healthz: %d %q", status, body)
	}
	awaitStatus(t, coordURL+"/readyz", http.StatusOK)
	w := testenv.Start(t, testenv.Binary(t, "./cmd/worker"), "--server", srv.URL(), "--demo", "--id", "probed", "--metrics-listen", "127.0.0.1:0")
	workerURL := "http://" + metricsAddr(t, w)
	awaitStatus(t, workerURL+"/readyz", http.StatusOK)

	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	names, _ := messages.NewNames(messages.DefaultPrefix)
	if err := js.DeleteConsumer(testenv.Context(t), names.EventsStream(), "ns_demo"); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, workerURL+"/readyz", http.StatusServiceUnavailable, "ns_demo")

	srv.Stop()
	awaitStatus(t, coordURL+"/readyz", http.StatusServiceUnavailable, "not connected")
	for _, url := range []string{coordURL, workerURL} {
		if status, _ := get(t, url+"/healthz"); status != http.StatusOK {
			t.Errorf("%s/healthz answers %d without NATS", url, status)
		}
	}
}

// TestDevModeServesMetricsAndHealth: `toolbus dev --metrics-listen` prints
// where its metrics are, is ready once its parts are, and counts a call.
func TestDevModeServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "./cmd/toolbus")
	dev := testenv.Start(t, bin, "dev", "--port", "0", "--data", t.TempDir(), "--metrics-listen", "127.0.0.1:0")
	url := strings.TrimSpace(strings.TrimPrefix(dev.WaitLine(t, "NATS URL:"), "NATS URL:"))
	line := dev.WaitLine(t, "Metrics: ")
	metricsURL := strings.Fields(strings.TrimPrefix(line, "Metrics: "))[0]
	base := strings.TrimSuffix(metricsURL, "/metrics")
	awaitStatus(t, base+"/readyz", http.StatusOK)

	c := testenv.Client(t, url, client.Options{})
	reply, err := c.Submit(testenv.Context(t), messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(`{"text":"dev"}`), Wait: true})
	if err != nil || reply.Result == nil {
		t.Fatalf("submit: %+v %v", reply, err)
	}
	addr := strings.TrimPrefix(base, "http://")
	awaitFigures(t, addr, func(f map[string]*dto.MetricFamily) error {
		echo := map[string]string{"toolbus_tool": "demo-echo", "toolbus_namespace": "demo"}
		if got := figure(f, "toolbus_calls_submitted_total", echo); got != 1 {
			return fmt.Errorf("%v calls submitted, want 1", got)
		}
		if got := figure(f, "toolbus_calls_finished_total", echo); got != 1 {
			return fmt.Errorf("%v calls finished, want 1", got)
		}
		return nil
	})
	if err := dev.Interrupt(t); err != nil {
		t.Fatalf("dev mode did not stop cleanly: %v", err)
	}
}

// TestApprovalsPendingIsMeasured: a call held for an approval counts as
// submitted, and the coordinator's approval sweep reports it pending.
func TestApprovalsPendingIsMeasured(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policyFile, "default: allow\nrules:\n  - {tool: \"demo:echo\", effect: ask, reason: echo needs a nod}\n")
	coord := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", srv.URL(), "--policy", policyFile, "--metrics-listen", "127.0.0.1:0")
	addr := metricsAddr(t, coord)
	coord.WaitLine(t, "coordinator started")
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	c := testenv.Client(t, srv.URL(), client.Options{})
	for i := range 2 {
		reply, err := c.Submit(testenv.Context(t), messages.SubmitRequest{Tool: "demo-echo", Arguments: messages.JSON(fmt.Sprintf(`{"text":"nod %d"}`, i))})
		if err != nil || reply.State != messages.StateAwaitingApproval {
			t.Fatalf("submit: %+v %v", reply, err)
		}
	}
	awaitFigures(t, addr, func(f map[string]*dto.MetricFamily) error {
		if got := figure(f, "toolbus_approvals_pending", nil); got != 2 {
			return fmt.Errorf("%v approvals pending, want 2", got)
		}
		if got := figure(f, "toolbus_calls_submitted_total", map[string]string{"toolbus_tool": "demo-echo"}); got != 2 {
			return fmt.Errorf("%v calls submitted, want 2", got)
		}
		return nil
	})
}

// TestQueueDepthAndWorkersAliveAreMeasured: with one busy slot, the calls
// behind it are the namespace's queue depth, and its one worker is alive.
func TestQueueDepthAndWorkersAliveAreMeasured(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	coord := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", srv.URL(), "--metrics-listen", "127.0.0.1:0")
	addr := metricsAddr(t, coord)
	coord.WaitLine(t, "coordinator started")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hold := worker.Func("hold", "Holds its slot until the test ends.", func(ctx context.Context, _ struct{}) (string, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "released", nil
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "held", Tools: []worker.Tool{hold}, Slots: 1})
	c := testenv.Client(t, srv.URL(), client.Options{})
	for range 3 {
		if _, err := c.Submit(testenv.Context(t), messages.SubmitRequest{Tool: "held-hold", Arguments: messages.JSON(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	awaitFigures(t, addr, func(f map[string]*dto.MetricFamily) error {
		held := map[string]string{"toolbus_namespace": "held"}
		if got := figure(f, "toolbus_workers_alive", held); got != 1 {
			return fmt.Errorf("%v workers alive, want 1", got)
		}
		if got := figure(f, "toolbus_queue_depth", held); got != 2 {
			return fmt.Errorf("queue depth %v, want 2 (one call runs, two wait)", got)
		}
		return nil
	})
}

// TestDutyLeasesAreMeasured: of two coordinators, one reports holding each
// duty's lease and the other standing by; when the holder of the audit
// copy stops, the other reports holding it.
func TestDutyLeasesAreMeasured(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	start := func() (*testenv.Process, string) {
		p := testenv.Start(t, testenv.Binary(t, "./cmd/coordinator"), "--server", srv.URL(), "--metrics-listen", "127.0.0.1:0", "--duty-lease-ttl", "1s")
		addr := metricsAddr(t, p)
		p.WaitLine(t, "coordinator started")
		return p, addr
	}
	first, firstAddr := start()
	second, secondAddr := start()
	held := func(addr, duty string) (float64, bool) {
		f := scrape(t, addr)
		for _, m := range f["toolbus_lease_held"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "toolbus_duty" && l.GetValue() == duty {
					return m.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	var auditHolder *testenv.Process
	var standbyAddr string
	testenv.Eventually(t, "one coordinator holds each duty, the other stands by", func() bool {
		for _, duty := range []string{"audit_copy", "settled_sweep"} {
			a, aOK := held(firstAddr, duty)
			b, bOK := held(secondAddr, duty)
			if !aOK || !bOK || a+b != 1 {
				return false
			}
			if duty == "audit_copy" {
				auditHolder, standbyAddr = first, secondAddr
				if b == 1 {
					auditHolder, standbyAddr = second, firstAddr
				}
			}
		}
		return true
	})
	if err := auditHolder.Interrupt(t); err != nil {
		t.Fatalf("the audit copy's holder did not stop cleanly: %v", err)
	}
	testenv.Eventually(t, "the standby holds the audit copy", func() bool {
		v, ok := held(standbyAddr, "audit_copy")
		return ok && v == 1
	})
}
