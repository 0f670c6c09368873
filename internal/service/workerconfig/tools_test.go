package workerconfig

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
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
	src := settingsOf(m.Delivery, m.Include, m.Exclude, m.Tools).wrap(&toolsSource{tools: tools}, nil)
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
	d := settingsOf(string(messages.DeliveryAtMostOnce), nil, nil, nil)
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

// listSource is a source that lists the tools it was given, reports a
// new list when told, and records that it was stopped.
type listSource struct {
	toolsSource
	update  func([]worker.Tool)
	stopped bool
}

func (s *listSource) Start(ctx context.Context, update func([]worker.Tool)) ([]worker.Tool, error) {
	s.update = update
	return s.tools, nil
}
func (s *listSource) Stop(ctx context.Context) error { s.stopped = true; return nil }

func tool(method, original string, tags ...string) worker.Tool {
	return worker.Tool{Definition: messages.ToolDefinition{Method: method, OriginalName: original, Title: method + " title",
		Description: method + " description", Metadata: messages.ToolMetadata{Tags: tags}}}
}

// settingsOfFile parses a configuration whose one source is an MCP server
// and returns its settings.
func settingsOfFile(t *testing.T, source string) toolSettings {
	t.Helper()
	cfg, err := Parse("w.yaml", []byte("namespaces:\n  - name: x\n    sources:\n      - mcp:\n          name: s\n          command: srv\n"+source))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Namespaces[0].Sources[0].MCP
	return settingsOf(m.Delivery, m.Include, m.Exclude, m.Tools)
}

// TestToolSelection: include keeps the tools whose source name or method
// matches a pattern, or that carry a tag (the source's or one the file
// adds); exclude then removes its own; a tool's settings rename it (its
// source name kept as its original name), replace its title and
// description and add tags; what the file names that no tool matches is
// logged, as is a selection that leaves nothing.
func TestToolSelection(t *testing.T) {
	settings := settingsOfFile(t, `          include: {names: ["get-*", "files.*"], tags: [chosen]}
          exclude: {names: [get-secret], tags: [destructive, unused]}
          tools:
            get-sum: {name: add, title: Add, description: Adds two numbers., tags: [math]}
            echo: {tags: [chosen]}
            files.read: {name: read}
            get-wipe: {title: Wipe}
            nosuch: {title: Nothing}
`)
	var logs bytes.Buffer
	src := &listSource{toolsSource: toolsSource{tools: []worker.Tool{
		tool("get-sum", "", messages.TagReadOnly),
		tool("get-secret", ""),
		tool("get-wipe", "", messages.TagDestructive),
		tool("echo", ""),
		tool("files_read_601e4e", "files.read"),
		tool("other", ""),
	}}}
	wrapped := settings.wrap(src, slog.New(slog.NewTextHandler(&logs, nil)))
	got, err := wrapped.Start(context.Background(), func([]worker.Tool) {})
	if err != nil {
		t.Fatal(err)
	}
	byMethod := map[string]messages.ToolDefinition{}
	for _, tl := range got {
		byMethod[tl.Definition.Method] = tl.Definition
	}
	if want := []string{"add", "echo", "read"}; !slices.Equal(slices.Sorted(maps.Keys(byMethod)), want) {
		t.Fatalf("served %v, want %v", slices.Sorted(maps.Keys(byMethod)), want)
	}
	add := byMethod["add"]
	if add.OriginalName != "get-sum" || add.Title != "Add" || add.Description != "Adds two numbers." || !slices.Equal(add.Metadata.Tags, []string{messages.TagReadOnly, "math"}) {
		t.Errorf("the renamed tool: %+v", add)
	}
	if read := byMethod["read"]; read.OriginalName != "files.read" || read.Title != "files_read_601e4e title" {
		t.Errorf("a tool renamed by its source name: %+v", read)
	}
	if echo := byMethod["echo"]; echo.OriginalName != "" || !slices.Equal(echo.Metadata.Tags, []string{"chosen"}) || echo.Description != "echo description" {
		t.Errorf("a tool included by a tag the file adds: %+v", echo)
	}
	for _, want := range []string{
		`msg="the configuration names a tool the source does not list" source=s tool=nosuch`,
		`msg="the configuration sets a tool it does not serve" source=s tool=get-wipe reason="include and exclude leave it out"`,
		`msg="a selection of the configuration matches no tool the source lists" source=s exclude="tags unused"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %s:\n%s", want, logs.String())
		}
	}
	if src.tools[0].Definition.Method != "get-sum" || src.tools[0].Definition.Title != "get-sum title" {
		t.Error("the source's own list was changed")
	}

	logs.Reset()
	nothing := settingsOfFile(t, "          include: {names: [nosuch*]}\n")
	if got, err := nothing.wrap(&listSource{toolsSource: toolsSource{tools: src.tools}}, slog.New(slog.NewTextHandler(&logs, nil))).Start(context.Background(), func([]worker.Tool) {}); err != nil || len(got) != 0 {
		t.Errorf("an include that matches nothing: %v %v", got, err)
	}
	for _, want := range []string{`include="names nosuch*"`, `level=ERROR msg="the source serves no tool: include and exclude leave out every tool it lists" source=s listed=6`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %s:\n%s", want, logs.String())
		}
	}
}

// TestRenameCollision: a tool renamed to the name of another tool of the
// source fails the source's start (the source is stopped); in a later
// list, the renamed tool keeps the name, the other is not served, and the
// log says so.
func TestRenameCollision(t *testing.T) {
	settings := settingsOfFile(t, "          tools:\n            get-sum: {name: echo}\n")
	src := &listSource{toolsSource: toolsSource{tools: []worker.Tool{tool("get-sum", ""), tool("echo", "")}}}
	_, err := settings.wrap(src, nil).Start(context.Background(), func([]worker.Tool) {})
	if !errors.Is(err, errRenameCollision) || !strings.Contains(err.Error(), "get-sum is renamed echo, the name of another tool it lists") || !src.stopped {
		t.Fatalf("start: %v (source stopped: %v)", err, src.stopped)
	}

	var logs bytes.Buffer
	src = &listSource{toolsSource: toolsSource{tools: []worker.Tool{tool("get-sum", "")}}}
	var updated []worker.Tool
	if _, err := settings.wrap(src, slog.New(slog.NewTextHandler(&logs, nil))).Start(context.Background(), func(tools []worker.Tool) { updated = tools }); err != nil {
		t.Fatal(err)
	}
	src.update([]worker.Tool{tool("get-sum", ""), tool("echo", "")})
	if len(updated) != 1 || updated[0].Definition.Method != "echo" || updated[0].Definition.OriginalName != "get-sum" {
		t.Errorf("the list after a change: %+v", updated)
	}
	if !strings.Contains(logs.String(), `level=ERROR msg="tool not served: the configuration renames another tool of the source to its name" source=s error="a renamed tool takes the name of another tool of the source: get-sum is renamed echo, the name of another tool it lists"`) {
		t.Errorf("log:\n%s", logs.String())
	}
}
