package workerconfig

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// toolsSource is a source that lists the tools it was given.
type toolsSource struct{ tools []worker.Tool }

func (s *toolsSource) Name() string { return "s" }
func (s *toolsSource) Start(ctx context.Context, update func([]worker.Tool)) ([]worker.Tool, error) {
	return s.tools, nil
}
func (s *toolsSource) Stop(ctx context.Context) error { return nil }

// TestDeliveryKeys checks that a source's delivery applies to its tools,
// and a tool's own, named by its method or by the source's name for it,
// wins over it.
func TestDeliveryKeys(t *testing.T) {
	cfg, err := Parse("w.yaml", []byte(`
namespaces:
  - name: x
    sources:
      - mcp:
          name: s
          command: srv
          delivery: at_most_once
          tools:
            list_files: {delivery: at_least_once}
            files.read: {delivery: at_least_once}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Namespaces[0].Sources[0].MCP
	tools := []worker.Tool{
		{Definition: messages.ToolDefinition{Method: "delete_file", Delivery: messages.DeliveryAtLeastOnce}},
		{Definition: messages.ToolDefinition{Method: "list_files", Delivery: messages.DeliveryAtMostOnce}},
		{Definition: messages.ToolDefinition{Method: "files_read_601e4e", OriginalName: "files.read"}},
	}
	src := deliveriesOf(m.Delivery, m.Tools).wrap(&toolsSource{tools: tools}, nil)
	got, err := src.Start(context.Background(), func([]worker.Tool) {})
	if err != nil {
		t.Fatal(err)
	}
	want := []messages.Delivery{messages.DeliveryAtMostOnce, messages.DeliveryAtLeastOnce, messages.DeliveryAtLeastOnce}
	for i, w := range want {
		if d := got[i].Definition.Delivery; d != w {
			t.Errorf("%s: delivery %q, want %q", got[i].Definition.Method, d, w)
		}
	}
	if tools[0].Definition.Delivery != messages.DeliveryAtLeastOnce {
		t.Error("the source's own list was changed")
	}
}

// healthSource is a toolsSource that says it is down.
type healthSource struct {
	toolsSource
	changed chan struct{}
}

func (s *healthSource) Unavailable() string            { return "source s is down: connection refused" }
func (s *healthSource) HealthChanged() <-chan struct{} { return s.changed }

// TestDeliveryKeepsSourceHealth: a source with configured deliveries still
// tells the worker when it is down (an MCP server away), so that its tools
// are listed unavailable; a source that cannot tell is not made to.
func TestDeliveryKeepsSourceHealth(t *testing.T) {
	d := deliveriesOf(string(messages.DeliveryAtMostOnce), nil)
	inner := &healthSource{changed: make(chan struct{})}
	h, ok := d.wrap(inner, nil).(worker.SourceHealth)
	if !ok {
		t.Fatal("the wrapped source no longer tells its health")
	}
	if h.Unavailable() != inner.Unavailable() || h.HealthChanged() != inner.changed {
		t.Errorf("health %q %v", h.Unavailable(), h.HealthChanged())
	}
	if _, ok := d.wrap(&toolsSource{}, nil).(worker.SourceHealth); ok {
		t.Error("a source without health was given one")
	}
}
