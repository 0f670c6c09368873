package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Source provides tools that live elsewhere — an MCP server, an HTTP API —
// and may change while the worker runs.
type Source interface {
	// Name identifies the source within its namespace, in logs and in the
	// tools' ToolSource.Name.
	Name() string
	// Start connects to the source and returns its tools. Later changes are
	// reported by calling update with the complete new list; update may be
	// called from any goroutine until Stop returns.
	Start(ctx context.Context, update func([]Tool)) ([]Tool, error)
	// Stop disconnects and releases everything the source started.
	Stop(ctx context.Context) error
}

// SourceHealth is implemented by a Source that can tell when it cannot
// serve its tools, such as an MCP server it cannot reach. The worker asks
// at every heartbeat and names such sources in it; the catalog then lists
// their tools unavailable and the coordinator refuses their calls with
// tool_unavailable, until the source answers again.
type SourceHealth interface {
	// Unavailable returns why the source cannot serve its tools now, or
	// "" when it can.
	Unavailable() string
	// HealthChanged returns a channel that is closed when the answer of
	// Unavailable may have changed; the worker then refreshes its
	// heartbeat at once rather than at the next interval.
	HealthChanged() <-chan struct{}
}

// followHealth refreshes the namespace's heartbeat whenever the source
// goes down or comes back, until ctx ends.
func (w *Worker) followHealth(ctx context.Context, store heartbeatStore, ns *namespace, h SourceHealth) {
	defer w.bg.Done()
	down := ""
	for {
		changed := h.HealthChanged()
		if now := h.Unavailable(); (now == "") != (down == "") {
			down = now
			hctx, cancel := context.WithTimeout(ctx, writeTimeout)
			if err := w.heartbeats.send(hctx, store, ns); err != nil && ctx.Err() == nil {
				w.log.Warn("heartbeat failed", "namespace", ns.Name, "error", err)
			}
			cancel()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// downSources lists the namespace's sources that cannot serve now.
func downSources(ns *namespace) []messages.SourceDown {
	var down []messages.SourceDown
	for _, src := range ns.Sources {
		h, ok := src.(SourceHealth)
		if !ok {
			continue
		}
		if reason := h.Unavailable(); reason != "" {
			down = append(down, messages.SourceDown{Source: src.Name(), Reason: reason})
		}
	}
	return down
}

// setSourceTools replaces one source's tools in a namespace and brings
// the catalog in line: new and changed tools are written, vanished ones
// removed. A tool whose input schema no call could pass (too costly to
// validate against, not a schema the coordinator compiles, or of another
// type than object) is left out, with a warning, and the source's other
// tools are served.
func (w *Worker) setSourceTools(ctx context.Context, ns *namespace, source string, tools []Tool) error {
	prepared := make([]*Tool, 0, len(tools))
	for i := range tools {
		t := tools[i]
		err := prepareTool(ns.Name, &t)
		if unusable := (*unusableSchemaError)(nil); errors.As(err, &unusable) {
			w.log.Warn("tool skipped: it is not served", "namespace", ns.Name, "source", source, "tool", t.Definition.Name, "reason", fmt.Sprintf("tool %s: %v", t.Definition.Name, unusable))
			continue
		}
		if err != nil {
			return fmt.Errorf("source %s: %w", source, err)
		}
		prepared = append(prepared, &t)
	}
	if len(tools) > 0 && len(prepared) == 0 {
		w.log.Error("source serves no tool: every tool it lists was skipped", "namespace", ns.Name, "source", source, "skipped", len(tools))
	}
	w.mu.Lock()
	var removed []*Tool
	for method, t := range ns.tools {
		if ns.owner[method] == source && !slices.ContainsFunc(prepared, func(p *Tool) bool { return p.Definition.Method == method }) {
			removed = append(removed, t)
			delete(ns.tools, method)
			delete(ns.owner, method)
		}
	}
	for _, t := range prepared {
		if owner, taken := ns.owner[t.Definition.Method]; taken && owner != source {
			w.mu.Unlock()
			return fmt.Errorf("source %s: tool %s is already served by %s", source, t.Definition.Name, ownerName(owner))
		}
		ns.tools[t.Definition.Method] = t
		ns.owner[t.Definition.Method] = source
	}
	store := w.store
	w.mu.Unlock()
	if store == nil {
		return nil // not started yet: Start registers everything
	}
	for _, t := range prepared {
		if err := store.PutTool(ctx, &t.Definition); err != nil {
			return err
		}
	}
	for _, t := range removed {
		if err := store.DeleteTool(ctx, t.Definition.ToolName()); err != nil {
			return err
		}
	}
	return nil
}

func ownerName(owner string) string {
	if owner == "" {
		return "the namespace's Go tools"
	}
	return "source " + owner
}
