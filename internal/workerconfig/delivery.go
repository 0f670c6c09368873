package workerconfig

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// ToolConfig is what a source's configuration says of one of its tools,
// named by the source's name for it or by its method.
type ToolConfig struct {
	// Delivery is at_least_once or at_most_once (see messages.Delivery).
	Delivery string `yaml:"delivery"`
}

// validateDelivery checks a source's delivery and the deliveries of its tools.
func validateDelivery(v *validator, at []any, delivery string, tools map[string]ToolConfig) {
	if delivery != "" {
		if _, err := messages.ParseDelivery(delivery); err != nil {
			v.add(append(at, "delivery"), "%v", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(tools)) {
		switch d := tools[name].Delivery; {
		case name == "":
			v.add(append(at, "tools"), "a tool needs a name")
		case d == "":
			v.add(append(at, "tools", name, "delivery"), "required: at_least_once or at_most_once")
		default:
			if _, err := messages.ParseDelivery(d); err != nil {
				v.add(append(at, "tools", name, "delivery"), "%v", err)
			}
		}
	}
}

// deliveries is what a source's configuration says of its tools'
// delivery guarantees: one for all of them, and one per tool.
type deliveries struct {
	all   messages.Delivery
	tools map[string]messages.Delivery
}

func deliveriesOf(all string, tools map[string]ToolConfig) deliveries {
	d := deliveries{all: messages.Delivery(all)}
	if len(tools) > 0 {
		d.tools = make(map[string]messages.Delivery, len(tools))
		for name, tc := range tools {
			d.tools[name] = messages.Delivery(tc.Delivery)
		}
	}
	return d
}

// wrap returns src, or src with the configured deliveries when there are
// any; log hears of tools named in the configuration that src lacks.
func (d deliveries) wrap(src worker.Source, log *slog.Logger) worker.Source {
	if d.all == "" && len(d.tools) == 0 {
		return src
	}
	if log == nil {
		log = slog.Default()
	}
	wrapped := &deliverySource{Source: src, deliveries: d, log: log}
	// The worker asks a source whether it is down (an MCP server away);
	// the wrapper must not hide the answer.
	if h, ok := src.(worker.SourceHealth); ok {
		return &deliveryHealthSource{deliverySource: wrapped, health: h}
	}
	return wrapped
}

// deliveryHealthSource is a deliverySource over a source that tells when
// it cannot serve its tools.
type deliveryHealthSource struct {
	*deliverySource
	health worker.SourceHealth
}

func (s *deliveryHealthSource) Unavailable() string            { return s.health.Unavailable() }
func (s *deliveryHealthSource) HealthChanged() <-chan struct{} { return s.health.HealthChanged() }

// of is the configured delivery of a tool, or "" to keep the source's.
func (d deliveries) of(def *messages.ToolDefinition) messages.Delivery {
	if v, ok := d.tools[def.Method]; ok {
		return v
	}
	if v, ok := d.tools[def.OriginalName]; ok && def.OriginalName != "" {
		return v
	}
	return d.all
}

// deliverySource is a source whose tools get the configured deliveries,
// in every list it reports.
type deliverySource struct {
	worker.Source
	deliveries deliveries
	log        *slog.Logger
}

func (s *deliverySource) Start(ctx context.Context, update func([]worker.Tool)) ([]worker.Tool, error) {
	tools, err := s.Source.Start(ctx, func(tools []worker.Tool) { update(s.apply(tools)) })
	return s.apply(tools), err
}

func (s *deliverySource) apply(tools []worker.Tool) []worker.Tool {
	if tools == nil {
		return nil
	}
	out := slices.Clone(tools)
	named := make(map[string]bool, len(s.deliveries.tools))
	for i := range out {
		def := &out[i].Definition
		if d := s.deliveries.of(def); d != "" {
			def.Delivery = d
		}
		named[def.Method], named[def.OriginalName] = true, true
	}
	for _, name := range slices.Sorted(maps.Keys(s.deliveries.tools)) {
		if !named[name] {
			s.log.Warn("the configuration sets the delivery of a tool the source does not list", "source", s.Name(), "tool", name)
		}
	}
	return out
}
