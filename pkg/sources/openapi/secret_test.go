package openapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/sources/openapi"
	"github.com/toolbus/toolbus/pkg/worker"
)

const keyedAPI = `{
  "openapi": "3.0.3",
  "info": {"title": "keyed", "version": "1"},
  "servers": [{"url": "/"}],
  "paths": {
    "/big": {"get": {"operationId": "big", "responses": {"200": {"description": "too much"}}}},
    "/hangup": {"get": {"operationId": "hangup", "responses": {"200": {"description": "nothing"}}}},
    "/file": {"get": {"operationId": "file", "parameters": [{"name": "name", "in": "query", "schema": {"type": "string"}}], "responses": {"200": {"description": "bytes"}}}}
  }
}`

// TestAnAPIKeyInTheQueryIsNeverShown: a key sent as a query parameter is
// masked in what the agent and the logs see of a request's URL: the
// errors of a response too large and of a connection dropped, and the URI
// of a resource block.
func TestAnAPIKeyInTheQueryIsNeverShown(t *testing.T) {
	const secret = "k1-secret-value"
	t.Setenv("TOOLBUS_TEST_QUERY_KEY", secret)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/openapi.json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, keyedAPI)
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("x", 2048))
		case "/hangup":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case "/file":
			if r.URL.Query().Get("key") != secret {
				http.Error(w, "no key", http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write([]byte{0, 1, 2, 0xff})
		}
	}))
	t.Cleanup(api.Close)
	tools := startSource(t, openapi.Config{Name: "keyed", Spec: api.URL + "/openapi.json", MaxResponseSize: 1024,
		Auth: openapi.Auth{APIKeyEnv: "TOOLBUS_TEST_QUERY_KEY", Query: "key"}})
	for _, method := range []string{"big", "hangup"} {
		_, err := tools[method].Handler.Handle(context.Background(), &worker.Call{ID: "c-" + method, Tool: method, Arguments: []byte(`{}`), Attempt: 1})
		if err == nil {
			t.Fatalf("%s: no error", method)
		}
		if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "key=xxxxx") {
			t.Errorf("%s: %v; want the key masked as key=xxxxx", method, err)
		}
	}
	res := call(t, tools["file"], `{"name":"a&b"}`)
	if len(res.Content) != 1 || res.Content[0].URI == "" {
		t.Fatalf("file: %+v, want one resource block", res.Content)
	}
	if uri := res.Content[0].URI; strings.Contains(uri, secret) || !strings.Contains(uri, "key=xxxxx") || !strings.Contains(uri, "name=a%26b") {
		t.Errorf("resource URI %q: want the key masked and the other parameters as sent", uri)
	}
}
