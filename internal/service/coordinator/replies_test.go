package coordinator

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/messages"
)

// repliesEnv is a coordinator on a server whose messages carry at most
// maxPayload bytes, a client connection, and a ledger to store calls with.
func repliesEnv(t *testing.T, maxPayload int32) (*Coordinator, *nats.Conn, *ledger.Ledger) {
	t.Helper()
	srv := embedded.ServerWith(t, natsserver.Config{DataDir: t.TempDir(), MaxPayload: maxPayload})
	nc := embedded.Connect(t, srv.URL())
	c := startCoordinator(t, embedded.Connect(t, srv.URL()))
	l := ledger.New(nc, c.js, c.names)
	t.Cleanup(l.Close)
	return c, nc, l
}

// storeCallWith writes a queued call with these arguments, as the
// coordinator writes one.
func storeCallWith(t *testing.T, l *ledger.Ledger, id string, args string) {
	t.Helper()
	now := time.Now().UTC()
	call := &messages.CallRequest{CallID: id, Tool: "demo-echo", Namespace: "demo", Method: "echo", QueuedAt: now, Arguments: messages.JSON(args)}
	ev := &messages.CallEvent{CallID: id, Kind: messages.EventQueued, Time: now, Request: call}
	if _, err := l.Append(context.Background(), messages.TurnBucket(""), "demo", ev); err != nil {
		t.Fatal(err)
	}
}

// askJSON sends a JSON request with these headers and returns the reply.
func askJSON(t *testing.T, c *Coordinator, nc *nats.Conn, endpoint string, body any, header nats.Header) *nats.Msg {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if header == nil {
		header = nats.Header{messages.HeaderContentType: {messages.ContentTypeJSON}}
	}
	reply, err := nc.RequestMsg(&nats.Msg{Subject: c.names.APIGroup() + "." + endpoint, Header: header, Data: data}, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", endpoint, err)
	}
	return reply
}

// TestAReplyTooLargeForTheServerIsRefusedNotDropped: a reply past the
// server's max_payload, which the server would not carry, is answered with
// payload_too_large naming its size and the limit, instead of leaving the
// requester to wait out its timeout.
func TestAReplyTooLargeForTheServerIsRefusedNotDropped(t *testing.T) {
	c, nc, l := repliesEnv(t, 64<<10)
	// Arguments and a result of 40 KiB each: either fits in a message,
	// the call with both does not.
	text := strings.Repeat("x", 40<<10)
	storeCallWith(t, l, "big-call", `{"text":"`+text+`"}`)
	now := time.Now().UTC()
	res := &messages.CallResult{CallID: "big-call", Tool: "demo-echo", Status: messages.StateCompleted, Attempt: 1, Worker: "w1",
		QueuedAt: now, StartedAt: now, FinishedAt: now, Content: []messages.ContentBlock{messages.TextBlock(text)}}
	if _, err := l.Append(context.Background(), messages.TurnBucket(""), "demo", &messages.CallEvent{CallID: "big-call", Kind: messages.EventResult, Time: now, Result: res}); err != nil {
		t.Fatal(err)
	}
	reply := askJSON(t, c, nc, messages.EndpointCallsGet, messages.GetCallRequest{CallID: "big-call"}, nil)
	if got := reply.Header.Get(micro.ErrorCodeHeader); got != "413" {
		t.Fatalf("calls.get of an 80 KiB call on a 64 KiB server: error code %q, want 413; body %.200s", got, reply.Data)
	}
	var e messages.Error
	if err := json.Unmarshal(reply.Data, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %.200s", err, reply.Data)
	}
	if e.Code != messages.CodePayloadTooLarge || !strings.Contains(e.Message, "more than the 65536") || !strings.Contains(e.Message, "calls.get") {
		t.Errorf("error %+v, want payload_too_large naming calls.get and the 65536-byte limit", e)
	}
	// A reply that fits is answered.
	storeCallWith(t, l, "small-call", `{"text":"a"}`)
	reply = askJSON(t, c, nc, messages.EndpointCallsGet, messages.GetCallRequest{CallID: "small-call"}, nil)
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("calls.get of a small call: error %s %s", code, reply.Data)
	}
}

// TestJSONRepliesKeepAnglesAndAmpersands: a JSON reply writes <, > and &
// as themselves, so arguments full of them take no more room than in
// MessagePack.
func TestJSONRepliesKeepAnglesAndAmpersands(t *testing.T) {
	c, nc, l := repliesEnv(t, 0)
	storeCallWith(t, l, "html-call", `{"text":"<b>a & b</b>"}`)
	reply := askJSON(t, c, nc, messages.EndpointCallsGet, messages.GetCallRequest{CallID: "html-call"}, nil)
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("calls.get: error %s %s", code, reply.Data)
	}
	if !strings.Contains(string(reply.Data), `"<b>a & b</b>"`) {
		t.Errorf("calls.get in JSON: %s; want the arguments' text as it was sent", reply.Data)
	}
}

// TestRequestHeadersInLowerCaseAreUnderstood: a client that writes its
// header names in lower case is read and answered in the encoding it
// named.
func TestRequestHeadersInLowerCaseAreUnderstood(t *testing.T) {
	c, nc, _ := repliesEnv(t, 0)
	reply := askJSON(t, c, nc, messages.EndpointToolsList, messages.ListToolsRequest{}, nats.Header{"content-type": {messages.ContentTypeJSON}})
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("tools.list with content-type in lower case: error %s %s", code, reply.Data)
	}
	if ct := reply.Header.Get(messages.HeaderContentType); ct != messages.ContentTypeJSON {
		t.Errorf("reply's Content-Type %q, want %s", ct, messages.ContentTypeJSON)
	}
	var tools messages.ListToolsReply
	if err := json.Unmarshal(reply.Data, &tools); err != nil {
		t.Errorf("reply is not JSON: %v: %.200s", err, reply.Data)
	}
	reply = askJSON(t, c, nc, messages.EndpointToolsList, messages.ListToolsRequest{}, nats.Header{"content-type": {messages.ContentTypeJSON}, "toolbus-version": {"9"}})
	if code := reply.Header.Get(micro.ErrorCodeHeader); code == "" || !strings.Contains(reply.Header.Get(micro.ErrorHeader), "not supported") {
		t.Errorf("toolbus-version 9 in lower case: %q %q, want it refused as an unsupported version", code, reply.Header.Get(micro.ErrorHeader))
	}
}

// TestEventsAfterTheLastSequenceThereIsAreNone: calls.events after the
// largest sequence there can be has nothing to answer, not the call's
// first events.
func TestEventsAfterTheLastSequenceThereIsAreNone(t *testing.T) {
	c, nc, l := repliesEnv(t, 0)
	storeCallWith(t, l, "seq-call", `{"text":"a"}`)
	reply := askJSON(t, c, nc, messages.EndpointCallsEvents, messages.CallEventsRequest{CallID: "seq-call", After: 1<<64 - 1}, nil)
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("calls.events: error %s %s", code, reply.Data)
	}
	var events messages.CallEventsReply
	if err := json.Unmarshal(reply.Data, &events); err != nil {
		t.Fatal(err)
	}
	if len(events.Events) != 0 {
		t.Errorf("calls.events after 2^64-1: %d events (%s), want none", len(events.Events), reply.Data)
	}
}
