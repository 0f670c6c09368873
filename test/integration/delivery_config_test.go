package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/workerconfig"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestConfiguredDeliveryReachesTheCatalog: an OpenAPI API's operations get
// the delivery the worker's configuration gives them, the source's for all
// and a tool's own over it (named by the source's name or by method), and
// tools.list shows it; without configuration a DELETE and a POST are at
// most once.
func TestConfiguredDeliveryReachesTheCatalog(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	spec, err := filepath.Abs(filepath.Join("testdata", "items.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(file, []byte(`
namespaces:
  - name: plain
    sources:
      - openapi:
          name: items
          spec: `+spec+`
          base_url: "http://127.0.0.1:1/api"
          tools:
            items.get/v2: {delivery: at_most_once}
  - name: configured
    sources:
      - openapi:
          name: items
          spec: `+spec+`
          base_url: "http://127.0.0.1:1/api"
          delivery: at_most_once
          tools:
            deleteItem: {delivery: at_least_once}
            search: {delivery: at_least_once}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := workerconfig.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	nss, err := cfg.WorkerNamespaces(testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Worker(t, srv.URL(), worker.Config{}, nss...)
	c := testenv.Client(t, srv.URL(), client.Options{})
	wants := map[string]messages.Delivery{
		"plain-deleteItem":      messages.DeliveryAtMostOnce,
		"plain-updateItem":      messages.DeliveryAtMostOnce,
		"plain-search":          messages.DeliveryAtLeastOnce,
		"plain-items.get/v2":    messages.DeliveryAtMostOnce,
		"configured-deleteItem": messages.DeliveryAtLeastOnce,
		"configured-updateItem": messages.DeliveryAtMostOnce,
		"configured-search":     messages.DeliveryAtLeastOnce,
	}
	got := map[string]messages.Delivery{}
	// The coordinator's catalog follows the worker's registration a moment later.
	testenv.Eventually(t, "the coordinator to list the worker's tools", func() bool {
		list, err := c.ListTools(testenv.Context(t), messages.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		clear(got)
		for _, e := range list.Tools {
			got[e.Name] = e.Delivery
			if e.OriginalName != "" {
				got[e.Namespace+"-"+e.OriginalName] = e.Delivery
			}
		}
		for name := range wants {
			if _, ok := got[name]; !ok {
				return false
			}
		}
		return true
	})
	for name, want := range wants {
		if got[name] != want {
			t.Errorf("%s: delivery %q, want %q", name, got[name], want)
		}
	}

	// Nothing listens at the base URL: the refused connection reached
	// nothing, yet an at-most-once operation is not tried again; its call
	// ends failed with outcome_unknown, after one attempt.
	agent := testenv.Client(t, srv.URL(), client.Options{Agent: "tester"})
	res, err := agent.Call(testenv.Context(t), "plain-deleteItem", map[string]any{"id": "7"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateFailed || res.Error == nil || res.Error.Code != messages.ResultOutcomeUnknown || res.Attempt != 1 {
		t.Fatalf("an at-most-once DELETE to a refused connection: %+v (error %+v)", res, res.Error)
	}
}
