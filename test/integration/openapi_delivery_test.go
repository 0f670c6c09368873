package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/workerconfig"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestOpenAPIPostIsNotSentTwiceWhenItsWorkerDies: a worker cut off the
// network while an API's POST is out leaves the call to another worker,
// which does not send the POST again (it could create the pet twice): the
// call fails with outcome_unknown and the API saw one POST. The same
// API's PUT, idempotent, runs again on the other worker.
func TestOpenAPIPostIsNotSentTwiceWhenItsWorkerDies(t *testing.T) {
	t.Parallel()
	var posts, puts atomic.Int32
	firstOut := make(chan string, 2)
	release := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/openapi.yaml" {
			io.WriteString(w, `openapi: 3.0.3
info: {title: pets, version: "1"}
paths:
  /pets:
    post:
      operationId: createPet
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
      responses: {"201": {description: created}}
    put:
      operationId: replacePets
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
      responses: {"200": {description: replaced}}
`)
			return
		}
		n := &posts
		if r.Method == http.MethodPut {
			n = &puts
		}
		if n.Add(1) == 1 {
			// The first request of each method hangs until the test ends:
			// its worker is cut off meanwhile.
			firstOut <- r.Method
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id": 1}`)
	}))
	t.Cleanup(api.Close)
	t.Cleanup(func() { close(release) })

	file := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(file, []byte(`
namespaces:
  - name: pets
    sources:
      - openapi:
          name: pets
          spec: `+api.URL+`/openapi.yaml
          base_url: `+api.URL+`
`), 0o600); err != nil {
		t.Fatal(err)
	}
	namespaces := func() []worker.Namespace {
		cfg, err := workerconfig.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		nss, err := cfg.WorkerNamespaces(testenv.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		return nss
	}

	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	proxy := testenv.NewProxy(t, srv.Addr().String())
	testenv.Worker(t, "", worker.Config{Conn: testenv.Connect(t, proxy.URL()), AckWait: liveLeaseAckWait}, namespaces()...)
	c := testenv.Client(t, srv.URL(), client.Options{})
	ctx := testenv.Context(t)
	want := map[string]messages.Delivery{"pets-createPet": messages.DeliveryAtMostOnce, "pets-replacePets": messages.DeliveryAtLeastOnce}
	got := map[string]messages.Delivery{}
	// The coordinator's catalog follows the worker's registration a moment later.
	testenv.Eventually(t, "the coordinator to list the API's tools", func() bool {
		list, err := c.ListTools(ctx, messages.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Tools {
			got[e.Name] = e.Delivery
		}
		return got["pets-createPet"] != "" && got["pets-replacePets"] != ""
	})
	for name, d := range want {
		if got[name] != d {
			t.Errorf("tools.list: %s is %q, want %q", name, got[name], d)
		}
	}
	post, err := c.Submit(ctx, messages.SubmitRequest{Tool: "pets-createPet", Arguments: messages.JSON(`{"name":"Rex"}`)})
	if err != nil {
		t.Fatal(err)
	}
	put, err := c.Submit(ctx, messages.SubmitRequest{Tool: "pets-replacePets", Arguments: messages.JSON(`{"name":"Rex"}`)})
	if err != nil {
		t.Fatal(err)
	}
	receive(t, firstOut, "the first request to reach the API")
	receive(t, firstOut, "the second request to reach the API")
	proxy.Cut()
	t.Cleanup(proxy.Restore)
	testenv.Worker(t, srv.URL(), worker.Config{AckWait: liveLeaseAckWait}, namespaces()...)

	res, err := c.Wait(ctx, post.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateFailed || res.Error == nil || res.Error.Code != messages.ResultOutcomeUnknown {
		t.Errorf("the POST whose worker died: %+v (error %+v), want failed with outcome_unknown", res, res.Error)
	}
	res, err = c.Wait(ctx, put.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != messages.StateCompleted || res.IsError || res.Attempt != 2 {
		t.Errorf("the PUT whose worker died: %+v (error %+v), want completed by its second attempt", res, res.Error)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("the API got %d POSTs, want 1", n)
	}
	if n := puts.Load(); n != 2 {
		t.Errorf("the API got %d PUTs, want 2", n)
	}
}
