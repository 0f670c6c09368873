package exposure

import (
	"slices"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// def builds a definition from a name in any spelling.
func def(name string) messages.ToolDefinition {
	n, err := messages.ParseToolName(name)
	if err != nil {
		panic(err)
	}
	return messages.ToolDefinition{
		Name:        n.String(),
		Namespace:   n.Namespace,
		Method:      n.Method,
		Description: "Tool " + n.String() + ".",
		InputSchema: messages.JSON(`{"type":"object","properties":{"q":{"type":"string"}}}`),
	}
}

func catalogOf(version uint64, names ...string) *Catalog {
	defs := make([]messages.ToolDefinition, len(names))
	for i, n := range names {
		defs[i] = def(n)
	}
	return NewCatalog(version, defs)
}

func mustWorkspace(t testing.TB, bundles []Bundle, agents ...Agent) *Workspace {
	t.Helper()
	ws, err := NewWorkspace(bundles, agents)
	if err != nil {
		t.Fatalf("NewWorkspace: %v", err)
	}
	return ws
}

func assertNames(t testing.TB, what string, got, want []string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func mustLookup(t testing.TB, a *Admission, name string) *Tool {
	t.Helper()
	tool, ok := a.Lookup(name)
	if !ok {
		t.Fatalf("%s is not admitted; admitted: %v", name, toolNames(a.Tools()))
	}
	return tool
}

func toolNames(tools []Tool) []string {
	out := make([]string, len(tools))
	for i := range tools {
		out[i] = tools[i].Name
	}
	return out
}

func bundle(id string, rules ...Rule) Bundle { return Bundle{ID: id, Match: rules} }
