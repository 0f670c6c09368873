package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

func discovered(r *messages.DiscoverReply) []string {
	var out []string
	for _, h := range r.Hits {
		out = append(out, h.Name)
	}
	return out
}

func describedTool(method, description string, opts ...worker.ToolOption) worker.Tool {
	return worker.Func(method, description, func(ctx context.Context, in struct {
		Input string `json:"input,omitempty"`
	}) (string, error) {
		return method, nil
	}, opts...)
}

// TestDiscoveryThroughCoordinators: tools a worker registers are found
// through any coordinator; a discovery page makes its tools visible on the
// turn's next iteration, also when the model discovers through the
// built-in tool; disabled and denied tools never appear.
func TestDiscoveryThroughCoordinators(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bundles", "base.yaml"), `
id: base
match:
  - name: "llm/tools:list"
    tier: critical
`)
	writeFile(t, filepath.Join(dir, "agents", "analyst.yaml"), `
id: analyst
tool:
  bundles: [base]
  items:
    - name: "weather"
      tier: onDemand
      exclude: ["weather:delete_station"]
`)
	srv := testenv.Server(t)
	pol := mustPolicy(t, `
default: allow
rules:
  - tool: "weather:admin_console"
    agent: analyst
    effect: deny
    reason: analysts do not administer
`)
	cfg := func(c *coordinator.Config) { c.WorkspaceDir = dir; c.Policy = pol }
	testenv.Coordinator(t, srv.URL(), cfg)
	testenv.Coordinator(t, srv.URL(), cfg)
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "weather", Tools: []worker.Tool{
		describedTool("forecast", "Returns the weather forecast for a city for the next days."),
		describedTool("current_conditions", "Returns the current temperature, wind and humidity at a location."),
		describedTool("delete_station", "Deletes a weather station from the network."),
		describedTool("admin_console", "Opens the weather service's administration console."),
	}})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "mail", Tools: []worker.Tool{
		describedTool("send", "Sends an email message to a recipient."),
	}})
	c := testenv.Client(t, srv.URL(), client.Options{Agent: "analyst"})
	ctx := testenv.Context(t)

	// Each coordinator answers; queries go to either.
	testenv.Eventually(t, "the tools to be discoverable", func() bool {
		for range 4 {
			r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "weather forecast"})
			if err != nil || len(r.Hits) == 0 || r.Hits[0].Name != "weather-forecast" {
				return false
			}
			// The namespaces register independently; mail's too must be in.
			if r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "mail-send"}); err != nil || len(r.Hits) == 0 {
				return false
			}
		}
		return true
	})
	r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "weather station administration delete"})
	if err != nil {
		t.Fatal(err)
	}
	if got := discovered(r); slices.Contains(got, "weather-delete_station") || slices.Contains(got, "weather-admin_console") {
		t.Fatalf("excluded or denied tools discovered: %v", got)
	}
	// An exact name ranks first.
	if r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "mail-send"}); err != nil || len(r.Hits) == 0 || r.Hits[0].Name != "mail-send" || !r.Hits[0].Exact {
		t.Fatalf("exact name: %+v %v", r, err)
	}

	// A page returned in a turn makes its tools visible next iteration.
	before, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t1"})
	if err != nil || slices.Contains(namesOf(before), "weather-current_conditions") {
		t.Fatalf("before discovery: %v %v", namesOf(before), err)
	}
	page, err := c.Discover(ctx, messages.DiscoverRequest{Query: "temperature wind humidity", Turn: "t1", PageSize: 1, Format: "openai-responses"})
	if err != nil || len(page.Hits) != 1 || page.Hits[0].Name != "weather-current_conditions" || len(page.Schemas) != 1 {
		t.Fatalf("discover: %+v %v", page, err)
	}
	after, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t1"})
	if err != nil || !slices.Contains(namesOf(after), "weather-current_conditions") || slices.Contains(namesOf(after), "weather-forecast") {
		t.Fatalf("after discovery: %v %v", namesOf(after), err)
	}

	// The model can discover through the built-in tool, which it sees by the critical rule.
	if !slices.Contains(namesOf(before), "llm_tools-list") {
		t.Fatalf("the built-in discovery tool is not visible: %v", namesOf(before))
	}
	res, err := c.Call(ctx, "llm_tools-list", map[string]any{"query": "send an email"}, client.WithTurn("t2"))
	if err != nil || res.IsError {
		t.Fatalf("discovery tool: %+v %v", res, err)
	}
	var found struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(res.StructuredContent, &found); err != nil || len(found.Tools) == 0 || found.Tools[0].Name != "mail-send" {
		t.Fatalf("discovery tool found %s (%v)", res.StructuredContent, err)
	}
	if l, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: "t2"}); err != nil || !slices.Contains(namesOf(l), "mail-send") {
		t.Fatalf("after the discovery tool: %v %v", namesOf(l), err)
	}

	// A disabled tool disappears from discovery at once.
	admin := testenv.Client(t, srv.URL(), client.Options{Agent: "ops"})
	if err := admin.Operator().SetToolEnabled(ctx, "weather-forecast", false, "broken"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the disabled tool to leave discovery", func() bool {
		for range 4 {
			r, err := c.Discover(ctx, messages.DiscoverRequest{Query: "weather forecast"})
			if err != nil || slices.Contains(discovered(r), "weather-forecast") {
				return false
			}
		}
		return true
	})
}
