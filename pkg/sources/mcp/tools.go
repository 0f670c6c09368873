package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources"
	"github.com/toolbus/toolbus/pkg/worker"
)

// toolsOf turns the server's tool list into worker tools, sorted by method.
func (s *Source) toolsOf(list []mcpgo.Tool) ([]worker.Tool, error) {
	names := make([]string, len(list))
	for i, t := range list {
		names[i] = t.Name
	}
	methods := sources.Methods(s.cfg.Namespace, names)
	seen := make(map[string]bool, len(list))
	tools := make([]worker.Tool, 0, len(list))
	for _, t := range list {
		if seen[t.Name] {
			s.log.Warn("MCP server lists a tool twice; the first one is served", "tool", t.Name)
			continue
		}
		seen[t.Name] = true
		def, err := s.definition(t, methods[t.Name])
		if err != nil {
			return nil, err
		}
		original := t.Name
		tools = append(tools, worker.Tool{
			Definition: def,
			Handler: worker.HandlerFunc(func(ctx context.Context, call *worker.Call) (*worker.Result, error) {
				return s.call(ctx, original, call)
			}),
		})
	}
	slices.SortFunc(tools, func(a, b worker.Tool) int { return strings.Compare(a.Definition.Method, b.Definition.Method) })
	return tools, nil
}

func (s *Source) definition(t mcpgo.Tool, method string) (messages.ToolDefinition, error) {
	def := messages.ToolDefinition{
		Method:      method,
		Title:       t.Title,
		Description: t.Description,
		Metadata:    messages.ToolMetadata{Tags: tags(t.Annotations)},
		Delivery:    delivery(t.Annotations),
		Source:      messages.ToolSource{Kind: messages.SourceMCP, Name: s.cfg.Name},
	}
	if def.Title == "" {
		def.Title = t.Annotations.Title
	}
	if method != t.Name {
		def.OriginalName = t.Name
	}
	in, err := inputSchema(t)
	if err != nil {
		return def, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
	}
	def.InputSchema = in
	out, err := outputSchema(t)
	if err != nil {
		return def, fmt.Errorf("tool %q: output schema: %w", t.Name, err)
	}
	def.OutputSchema = out
	return def, nil
}

func inputSchema(t mcpgo.Tool) (messages.JSON, error) {
	if t.RawInputSchema != nil {
		return messages.JSON(t.RawInputSchema), nil
	}
	if t.InputSchema.Type == "" {
		return messages.JSON(`{"type":"object"}`), nil
	}
	return json.Marshal(t.InputSchema)
}

func outputSchema(t mcpgo.Tool) (messages.JSON, error) {
	if t.RawOutputSchema != nil {
		return messages.JSON(t.RawOutputSchema), nil
	}
	if t.OutputSchema.Type == "" {
		return nil, nil
	}
	return json.Marshal(t.OutputSchema)
}

// tags maps the hints a server set to true to Toolbus tags.
func tags(a mcpgo.ToolAnnotation) []string {
	var out []string
	readOnly := a.ReadOnlyHint != nil && *a.ReadOnlyHint
	if readOnly {
		out = append(out, messages.TagReadOnly)
	}
	if !readOnly && a.DestructiveHint != nil && *a.DestructiveHint {
		out = append(out, messages.TagDestructive)
	}
	if a.OpenWorldHint != nil && *a.OpenWorldHint {
		out = append(out, messages.TagNetwork)
	}
	return out
}

// delivery is the guarantee the server's hints ask for. Only the hints the
// server set count: MCP's own defaults for a tool that is not read-only
// (destructiveHint true, idempotentHint false) would make every tool
// without annotations at most once, so a tool without hints is at least
// once, as before. A read-only tool is at least once whatever else it
// says (MCP gives the other hints meaning only when readOnlyHint is
// false). Otherwise idempotentHint, when set, decides, since it says
// whether a repeated call has further effects, which is what a second
// delivery would be: false is at most once, true at least once, even for
// a destructive tool. Without it, destructiveHint true is at most once.
func delivery(a mcpgo.ToolAnnotation) messages.Delivery {
	switch {
	case a.ReadOnlyHint != nil && *a.ReadOnlyHint:
		return messages.DeliveryAtLeastOnce
	case a.IdempotentHint != nil:
		if *a.IdempotentHint {
			return messages.DeliveryAtLeastOnce
		}
		return messages.DeliveryAtMostOnce
	case a.DestructiveHint != nil && *a.DestructiveHint:
		return messages.DeliveryAtMostOnce
	}
	return messages.DeliveryAtLeastOnce
}
