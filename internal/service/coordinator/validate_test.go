package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// request sends a JSON request to an endpoint as any client could, and
// returns the error code of the reply ("" for a success).
func request(t *testing.T, nc *nats.Conn, endpoint string, body any) messages.ErrorCode {
	t.Helper()
	subject, err := messages.MustNames("").APISubject(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{messages.HeaderContentType: []string{messages.ContentTypeJSON}}}
	reply, err := nc.RequestMsgWithContext(testenv.Context(t), msg)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Header.Get(micro.ErrorCodeHeader) == "" {
		return ""
	}
	var e messages.Error
	if err := json.Unmarshal(reply.Data, &e); err != nil {
		t.Fatalf("error reply %q: %v", reply.Data, err)
	}
	return e.Code
}

// turnKeys lists the keys of the turns bucket.
func turnKeys(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	kv, err := js.KeyValue(testenv.Context(t), messages.MustNames("").TurnsBucket())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(testenv.Context(t))
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// tools.activate refuses agent names that are not IDs, and writes nothing
// to the turns bucket for them; a valid agent's activation is written.
func TestActivateRefusesBadAgentNamesAndWritesNothing(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	echo := worker.Func("echo", "Echoes.", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{echo}})
	nc := testenv.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	for _, agent := range []string{"a.b", "*", ">", "$JS", strings.Repeat("a", 129)} {
		code := request(t, nc, messages.EndpointToolsActivate, messages.ActivateRequest{Agent: agent, Turn: "turn1", Tools: []string{"t-echo"}})
		if code != messages.CodeInvalidName {
			t.Errorf("agent %.10q: code %q; want %s", agent, code, messages.CodeInvalidName)
		}
	}
	if keys := turnKeys(t, js); len(keys) != 0 {
		t.Fatalf("turns bucket holds %v after refused activations", keys)
	}

	if code := request(t, nc, messages.EndpointToolsActivate, messages.ActivateRequest{Agent: "analyst", Turn: "turn1", Tools: []string{"t-echo"}}); code != "" {
		t.Fatalf("valid activation: %s", code)
	}
	if keys := turnKeys(t, js); len(keys) != 1 || keys[0] != "state.turn1" {
		t.Fatalf("turns bucket holds %v; want the valid activation's turn", keys)
	}
}

// Integer fields out of range are refused before anything is queued.
func TestSubmitRefusesOutOfRangeTimeouts(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	nc := testenv.Connect(t, srv.URL())
	for _, sr := range []messages.SubmitRequest{
		{Tool: "t-echo", TimeoutMS: math.MaxInt64},
		{Tool: "t-echo", TimeoutMS: 1e13},
		{Tool: "t-echo", Wait: true, WaitMS: math.MaxInt64},
	} {
		if code := request(t, nc, messages.EndpointCallsSubmit, sr); code != messages.CodeBadRequest {
			t.Errorf("timeout_ms %d wait_ms %d: code %q; want bad_request", sr.TimeoutMS, sr.WaitMS, code)
		}
	}
	if code := request(t, nc, messages.EndpointToolsDiscover, messages.DiscoverRequest{Query: "x", Page: math.MaxInt64}); code != messages.CodeBadRequest {
		t.Errorf("discover page 2^63-1: code %q; want bad_request", code)
	}
}
