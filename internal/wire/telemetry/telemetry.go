// Package telemetry sets up what a Toolbus process sends out about itself:
// traces and metrics over OTLP, configured by OpenTelemetry's standard
// environment variables, and an HTTP listener with /metrics (Prometheus),
// /healthz and /readyz. Each command (coordinator, worker, indexer,
// toolbus dev) starts it first and shuts it down last.
//
// With no exporter configured and no listener, nothing is installed: the
// spans of internal/wire/tracing are not opened and the instruments of
// internal/wire/telemetry/metrics record nothing.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
)

// Config configures a process's telemetry.
type Config struct {
	// Service is the service.name of the process's spans and metrics,
	// such as "toolbus-coordinator". OTEL_SERVICE_NAME overrides it.
	Service string
	// Listen is the address of the HTTP listener serving /metrics,
	// /healthz and /readyz ("127.0.0.1:9464", ":0"...); empty opens none.
	Listen string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Getenv reads the environment. Defaults to os.Getenv.
	Getenv func(string) string
}

// ReadyTimeout bounds one readiness check of /readyz.
const ReadyTimeout = 2 * time.Second

// errStarting is /readyz's answer before the process set its check.
var errStarting = errors.New("starting")

// Telemetry is a process's running telemetry.
type Telemetry struct {
	traces   *sdktrace.TracerProvider
	meters   *sdkmetric.MeterProvider
	server   *http.Server
	listener net.Listener
	served   chan struct{}
	ready    atomic.Pointer[func(context.Context) error]
	log      *slog.Logger
}

// Start installs the tracer and meter providers the environment asks for
// as OpenTelemetry's global ones, and opens the listener.
//
// Traces are exported when OTEL_TRACES_EXPORTER names an exporter or an
// OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), unless OTEL_TRACES_EXPORTER is
// "none" or OTEL_SDK_DISABLED is "true"; metrics likewise with
// OTEL_METRICS_EXPORTER and OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, and
// always to the listener's /metrics when there is one. The exporters
// themselves read the rest: OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf
// by default, or grpc), headers, timeouts, OTEL_TRACES_SAMPLER...
func Start(ctx context.Context, cfg Config) (_ *Telemetry, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	t := &Telemetry{log: cfg.Logger}
	defer func() {
		if err != nil {
			_ = t.Shutdown(context.Background())
		}
	}()
	disabled := strings.EqualFold(cfg.Getenv("OTEL_SDK_DISABLED"), "true")
	tracesOn := !disabled && wanted(cfg.Getenv, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	metricsOn := !disabled && wanted(cfg.Getenv, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
	if !tracesOn && !metricsOn && cfg.Listen == "" {
		return t, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", cfg.Service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithProcessPID(), resource.WithHost())
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	if tracesOn {
		exporter, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("trace exporter: %w", err)
		}
		t.traces = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
		otel.SetTracerProvider(t.traces)
	}
	var readers []sdkmetric.Option
	if metricsOn {
		reader, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(reader))
	}
	var registry *prometheus.Registry
	if cfg.Listen != "" {
		registry = prometheus.NewRegistry()
		registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exporter, err := otelprom.New(otelprom.WithRegisterer(registry),
			otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exporter))
	}
	if len(readers) > 0 {
		t.meters = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		otel.SetMeterProvider(t.meters)
		metrics.Enable()
	}
	if cfg.Listen != "" {
		if err := t.listen(cfg.Listen, registry); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// wanted reports whether a signal's exporter is configured: its
// OTEL_*_EXPORTER names one other than "none", or an OTLP endpoint is set
// while it names none.
func wanted(getenv func(string) string, exporterVar, endpointVar string) bool {
	switch exporter := strings.TrimSpace(getenv(exporterVar)); exporter {
	case "none":
		return false
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv(endpointVar) != ""
	default:
		return true
	}
}

func (t *Telemetry) listen(addr string, registry *prometheus.Registry) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", t.serveReady)
	t.listener = l
	t.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	t.served = make(chan struct{})
	go func() {
		defer close(t.served)
		if err := t.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.log.Error("metrics listener stopped", "error", err)
		}
	}()
	t.log.Info("serving metrics and health", "addr", l.Addr().String())
	return nil
}

func (t *Telemetry) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	err := errStarting
	if check := t.ready.Load(); check != nil {
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		defer cancel()
		err = (*check)(ctx)
	}
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready:", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// SetReady sets the check of /readyz; until it is set, /readyz answers
// 503 "starting". The check gets a context that ends after ReadyTimeout.
func (t *Telemetry) SetReady(check func(context.Context) error) {
	if check == nil {
		t.ready.Store(nil)
		return
	}
	t.ready.Store(&check)
}

// Addr is the listener's address, or "" without one.
func (t *Telemetry) Addr() string {
	if t.listener == nil {
		return ""
	}
	return t.listener.Addr().String()
}

// Shutdown closes the listener and flushes the spans and metrics not yet
// exported, within ctx.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.server != nil {
		errs = append(errs, t.server.Shutdown(ctx))
		<-t.served
	}
	if t.traces != nil {
		errs = append(errs, t.traces.Shutdown(ctx))
	}
	if t.meters != nil {
		errs = append(errs, t.meters.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// ShutdownTimeout bounds Close's flush of the spans and metrics not yet
// exported.
const ShutdownTimeout = 5 * time.Second

// Close is Shutdown within ShutdownTimeout; it logs what fails.
func (t *Telemetry) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		t.log.Warn("telemetry not flushed", "error", err)
	}
}
