package client_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// TestFullResultThroughTheCoordinator: a client that reads through the
// coordinator gets a cut result's whole, a page at a time through
// calls.full_result, each page within one message, and the pages add up
// to the result its tool returned.
func TestFullResultThroughTheCoordinator(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	big := strings.Repeat("0123456789", 300_000) // 3 MB: several pages
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "t", Tools: []worker.Tool{
		worker.Func("big", "Returns a lot.", func(ctx context.Context, in struct{}) (string, error) { return big, nil }, worker.WithMaxResultSize(4096)),
		worker.Func("small", "Returns a little.", func(ctx context.Context, in struct{}) (string, error) { return "little", nil }),
	}})
	nc := testenv.Connect(t, srv.URL())
	c := testenv.Client(t, srv.URL(), client.Options{CoordinatorReads: true})
	ctx := testenv.Context(t)
	res, err := c.Call(ctx, "t-big", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.FullResult == nil {
		t.Fatalf("result not cut: %+v", res)
	}
	whole, err := c.FullResult(ctx, res.FullResult)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.Content) != 1 || whole.Content[0].Text != big {
		t.Fatalf("the whole result has %d blocks, the first of %d bytes; want one of %d", len(whole.Content), len(whole.Content[0].Text), len(big))
	}

	// The raw endpoint, as a client in another language sends it.
	ask := func(body map[string]any) (*messages.FullResultReply, *messages.Error) {
		t.Helper()
		data, _ := json.Marshal(body)
		subject, _ := messages.MustNames("toolbus").APISubject(messages.EndpointCallsFullResult)
		m := nats.NewMsg(subject)
		m.Header.Set(messages.HeaderContentType, messages.ContentTypeJSON)
		m.Data = data
		reply, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if reply.Header.Get("Nats-Service-Error-Code") != "" {
			var e messages.Error
			if err := json.Unmarshal(reply.Data, &e); err != nil {
				t.Fatal(err)
			}
			return nil, &e
		}
		var out messages.FullResultReply
		if err := json.Unmarshal(reply.Data, &out); err != nil {
			t.Fatal(err)
		}
		return &out, nil
	}
	var pages int
	var read []byte
	cursor := ""
	for {
		page, e := ask(map[string]any{"call_id": res.CallID, "cursor": cursor})
		if e != nil {
			t.Fatalf("page %d: %+v", pages, e)
		}
		pages++
		if page.Offset != int64(len(read)) || len(page.Data) > int(nc.MaxPayload()/2) || len(page.Data) == 0 {
			t.Fatalf("page %d: offset %d, %d bytes, after %d bytes", pages, page.Offset, len(page.Data), len(read))
		}
		read = append(read, page.Data...)
		if page.NextCursor == "" {
			if int64(len(read)) != page.Size || !strings.HasPrefix(page.Digest, "SHA-256=") {
				t.Fatalf("last page: %d bytes read of %d, digest %q", len(read), page.Size, page.Digest)
			}
			break
		}
		cursor = page.NextCursor
	}
	if pages < 4 {
		t.Fatalf("%d pages for %d bytes, want several within one message each", pages, len(read))
	}
	var again messages.CallResult
	if err := json.Unmarshal(read, &again); err != nil || again.Content[0].Text != big {
		t.Fatalf("the pages do not decode to the result: %v", err)
	}

	small, err := c.Call(ctx, "t-small", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		body map[string]any
		code messages.ErrorCode
		says string
	}{
		{map[string]any{"call_id": small.CallID}, messages.CodeBadRequest, "was not cut"},
		{map[string]any{"call_id": "PZ1EJQ8Ty4UhRr2X7bLr9m"}, messages.CodeCallNotFound, "no call"},
		{map[string]any{"call_id": res.CallID, "cursor": "v1.x.y"}, messages.CodeBadRequest, "cursor"},
		{map[string]any{"call_id": res.CallID, "cursor": "v1.PZ1EJQ8Ty4UhRr2X7bLr9m.12.100"}, messages.CodeConflict, "from the start"},
		{map[string]any{}, messages.CodeBadRequest, "call_id"},
	} {
		if _, e := ask(bad.body); e == nil || e.Code != bad.code || !strings.Contains(e.Message, bad.says) {
			t.Errorf("%v: %+v, want %s saying %q", bad.body, e, bad.code, bad.says)
		}
	}
}
