package integration

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestUnknownContentTypeIsAnsweredInJSON: a request in an encoding the
// coordinator does not speak is refused in JSON, which a client that does
// not speak MessagePack can read.
func TestUnknownContentTypeIsAnsweredInJSON(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	nc := testenv.Connect(t, srv.URL())
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", ";;"} {
		msg := nats.NewMsg("toolbus.api." + messages.EndpointCallsGet)
		msg.Header.Set(messages.HeaderContentType, ct)
		msg.Data = []byte("call_id=x")
		reply, err := nc.RequestMsg(msg, testenv.Patience)
		if err != nil {
			t.Fatal(err)
		}
		if got := reply.Header.Get(messages.HeaderContentType); got != messages.ContentTypeJSON {
			t.Errorf("Content-Type %q: answered with Content-Type %q", ct, got)
		}
		var e messages.Error
		if err := json.Unmarshal(reply.Data, &e); err != nil || e.Code != messages.CodeBadRequest {
			t.Errorf("Content-Type %q: body %q is not a JSON error (%v)", ct, reply.Data, err)
		}
		if got, want := reply.Header.Get(micro.ErrorHeader), string(e.Code)+": "+e.Message; got != want {
			t.Errorf("Nats-Service-Error = %q, want %q", got, want)
		}
	}
}

// TestNamesAsProtocolMdStatesThem: a tool named with a dot separator is
// the tool; a second dot, a bad route, routed call ID or notify subject is
// refused with invalid_name, whose Nats-Service-Error is "<code>: <message>";
// a request without Toolbus-Version is read as version 3.
func TestNamesAsProtocolMdStatesThem(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "catalog", Tools: catalogTools()})
	nc := testenv.Connect(t, srv.URL())
	const route = "Qm3kVd8sJx2LwT9bNc4RfA"

	// rawRequest sends no Toolbus-Version header.
	body, h := rawRequest(t, nc, messages.EndpointCallsSubmit, messages.SubmitRequest{Tool: "catalog.details", Arguments: messages.JSON(`{"query":"x"}`), Wait: true})
	var reply messages.SubmitReply
	if err := json.Unmarshal(body, &reply); err != nil || h.Get(micro.ErrorHeader) != "" || reply.Result == nil || reply.Result.Tool != "catalog-details" {
		t.Fatalf("catalog.details: %s %v", body, h)
	}

	for _, tc := range []struct {
		name string
		req  messages.SubmitRequest
	}{
		{"a second dot", messages.SubmitRequest{Tool: "catalog.details.more"}},
		{"a wildcard", messages.SubmitRequest{Tool: "catalog.*"}},
		{"a short route", messages.SubmitRequest{Tool: "catalog-details", Route: "short"}},
		{"a call ID off its route", messages.SubmitRequest{Tool: "catalog-details", Route: route, CallID: "x.y"}},
		{"a notify subject with a wildcard", messages.SubmitRequest{Tool: "catalog-details", Notify: "_INBOX.a.*"}},
		{"a notify subject outside _INBOX", messages.SubmitRequest{Tool: "catalog-details", Notify: "results.a"}},
		{"a turn with a dot", messages.SubmitRequest{Tool: "catalog-details", Turn: "t.1"}},
	} {
		body, h := rawRequest(t, nc, messages.EndpointCallsSubmit, tc.req)
		var e messages.Error
		if err := json.Unmarshal(body, &e); err != nil || e.Code != messages.CodeInvalidName {
			t.Errorf("%s: %s (%v)", tc.name, body, err)
			continue
		}
		if got := h.Get(micro.ErrorHeader); got != "invalid_name: "+e.Message {
			t.Errorf("%s: Nats-Service-Error %q", tc.name, got)
		}
		if got := h.Get(micro.ErrorCodeHeader); got != "400" {
			t.Errorf("%s: Nats-Service-Error-Code %q", tc.name, got)
		}
	}
}
