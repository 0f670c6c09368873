package integration

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
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
		reply, err := nc.RequestMsg(msg, 10*time.Second)
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
