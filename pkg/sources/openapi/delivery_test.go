package openapi_test

import (
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources/openapi"
)

// everyMethod is a document with an operation of each HTTP method.
const everyMethod = `{
  "openapi": "3.0.3",
  "info": {"title": "pets", "version": "1"},
  "paths": {
    "/pets": {
      "get": {"operationId": "list", "responses": {"200": {"description": "ok"}}},
      "head": {"operationId": "head", "responses": {"200": {"description": "ok"}}},
      "options": {"operationId": "options", "responses": {"200": {"description": "ok"}}},
      "trace": {"operationId": "trace", "responses": {"200": {"description": "ok"}}},
      "post": {"operationId": "create", "responses": {"201": {"description": "created"}}},
      "put": {"operationId": "replace", "responses": {"200": {"description": "ok"}}},
      "patch": {"operationId": "change", "responses": {"200": {"description": "ok"}}},
      "delete": {"operationId": "remove", "responses": {"204": {"description": "gone"}}}
    }
  }
}`

// TestDeliveryFollowsTheMethod: an operation whose method HTTP does not
// make idempotent (POST, PATCH) is at most once, so that a call whose
// worker died while the request was out is not sent twice; DELETE too; the
// idempotent methods are at least once.
func TestDeliveryFollowsTheMethod(t *testing.T) {
	t.Parallel()
	api, _ := petsAPI(t, everyMethod)
	tools := startSource(t, openapi.Config{Name: "pets", Namespace: "pets", Spec: api.URL + "/openapi.json", BaseURL: api.URL})
	want := map[string]messages.Delivery{
		"list":    messages.DeliveryAtLeastOnce,
		"head":    messages.DeliveryAtLeastOnce,
		"options": messages.DeliveryAtLeastOnce,
		"trace":   messages.DeliveryAtLeastOnce,
		"replace": messages.DeliveryAtLeastOnce,
		"create":  messages.DeliveryAtMostOnce,
		"change":  messages.DeliveryAtMostOnce,
		"remove":  messages.DeliveryAtMostOnce,
	}
	if len(tools) != len(want) {
		t.Fatalf("%d tools, want %d", len(tools), len(want))
	}
	for method, d := range want {
		def := tools[method].Definition
		if got := def.EffectiveDelivery(); got != d {
			t.Errorf("%s (%s): delivery %q, want %q", method, def.Metadata.Extra["http_method"], got, d)
		}
	}
}
