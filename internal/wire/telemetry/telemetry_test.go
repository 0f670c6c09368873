package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/toolbus/toolbus/internal/wire/telemetry/metrics"
)

func env(vars map[string]string) func(string) string {
	return func(key string) string { return vars[key] }
}

// With no exporter and no listener configured, Start installs nothing:
// the global providers stay the default ones, so spans are not opened and
// the instruments record nothing.
func TestStartWithoutExporterInstallsNothing(t *testing.T) {
	tracerProvider, meterProvider := otel.GetTracerProvider(), otel.GetMeterProvider()
	tel, err := Start(context.Background(), Config{Service: "test", Getenv: env(map[string]string{"OTEL_SERVICE_NAME": "ignored"})})
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != tracerProvider || otel.GetMeterProvider() != meterProvider || metrics.Enabled() {
		t.Fatal("a provider was installed without an exporter")
	}
	if tel.Addr() != "" {
		t.Fatalf("a listener at %s", tel.Addr())
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWantedFollowsTheStandardVariables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"common endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"signal endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"other signal's endpoint", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4318/v1/metrics"}, false},
		{"exporter named", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
	} {
		if got := wanted(env(tc.vars), "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); got != tc.want {
			t.Errorf("%s: wanted = %v, want %v", tc.name, got, tc.want)
		}
	}
}
