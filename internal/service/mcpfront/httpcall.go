package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nuid"
)

// The front answers a session's tools/call over streamable HTTP itself,
// rather than through mcp-go: the request's progress notifications, its
// elicitation request and its list_changed are written on the request's
// own response stream by the goroutine that writes its result, so they
// arrive all, in order, and before the result. (mcp-go hands them to a
// goroutine of its own that can lose the last of them to the result, and,
// while the session has a GET stream open, to that stream.) Its cancel
// notification and the answer to its elicitation, which the client posts
// to the session as separate requests, are matched here by session and
// request ID.

// inflightKey names a request of a session: the agent whose token came
// with it, the session ID, and the request's JSON-RPC ID as the client
// wrote it. A message about a request (its cancellation, the answer to an
// elicitation) is matched only if it comes with the same agent's token:
// knowing a session's ID is not enough to approve or cancel its calls.
func inflightKey(agent, session string, id json.RawMessage) string {
	return agent + "\x00" + session + "\x00" + string(bytes.TrimSpace(id))
}

// serveCall answers a tools/call of a session.
func (f *Front) serveCall(ctx context.Context, w http.ResponseWriter, session string, req *rpcMessage) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key, entry := inflightKey(agentOf(ctx), session, req.ID), &inflightCall{cancel: cancel}
	f.inflight.Store(key, entry)
	defer f.inflight.CompareAndDelete(key, entry)

	out := &streamOut{f: f, w: w, session: session}
	call := &callRequest{name: req.Params.Name, args: req.Params.Arguments, meta: req.Params.Meta}
	if !f.tools.dispatches(ctx, call) {
		out.finish(req.ID, nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("tool '%s' not found: %s", call.name, "the session has no such tool")})
		return
	}
	res, err := f.calls.runCall(ctx, out, call)
	if entry.byClient.Load() {
		// A request its client cancelled is not answered (MCP's
		// cancellation); its response, if one was begun, just ends.
		out.abandon()
		return
	}
	if err != nil {
		out.finish(req.ID, nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error()})
		return
	}
	out.finish(req.ID, res, nil)
}

// dispatches reports whether the front calls a tool for the request: one
// the front has met in a tools/list, or one the session sees now (it
// listed its tools on another front).
func (l *toolList) dispatches(ctx context.Context, call *callRequest) bool {
	if _, ok := l.registered.Load(call.name); ok {
		return true
	}
	if _, err := l.visibleTools(ctx, turnOf(ctx, call.meta)); err != nil {
		l.log.Warn("tools.list failed", "agent", agentOf(ctx), "error", err)
	}
	_, ok := l.registered.Load(call.name)
	return ok
}

// cancelRequest cancels the request a notifications/cancelled names, if it
// is one the front serves; it reports whether it was.
func (f *Front) cancelRequest(agent, session string, requestID json.RawMessage) bool {
	entry, ok := f.inflight.LoadAndDelete(inflightKey(agent, session, requestID))
	if ok {
		call := entry.(*inflightCall)
		call.byClient.Store(true)
		call.cancel()
	}
	return ok
}

// inflightCall is a tools/call the front serves; byClient is set when
// its client cancelled it.
type inflightCall struct {
	cancel   context.CancelFunc
	byClient atomic.Bool
}

// answerRequest passes the client's answer to a request the front sent it
// (an elicitation) to the call waiting for it; it reports whether one was.
func (f *Front) answerRequest(agent, session string, answer *rpcMessage) bool {
	waiting, ok := f.requests.LoadAndDelete(inflightKey(agent, session, answer.ID))
	if ok {
		waiting.(chan *rpcMessage) <- answer
	}
	return ok
}

// streamOut writes a tools/call's response: one JSON body if nothing came
// before the result, else a server-sent event stream. Only the goroutine
// serving the request writes.
type streamOut struct {
	f         *Front
	w         http.ResponseWriter
	session   string
	streaming bool
	failed    error
}

var sseEvent = []byte("event: message\ndata: ")

func (o *streamOut) send(msg any) error {
	if o.failed != nil {
		return o.failed
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if !o.streaming {
		h := o.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		o.w.WriteHeader(http.StatusOK)
		o.streaming = true
	}
	buf := make([]byte, 0, len(sseEvent)+len(data)+2)
	buf = append(append(append(buf, sseEvent...), data...), '\n', '\n')
	if _, err := o.w.Write(buf); err != nil {
		o.failed = err
		return err
	}
	if fl, ok := o.w.(http.Flusher); ok {
		fl.Flush()
	}
	return nil
}

// abandon ends a response without an answer: an event stream with what
// was sent of it, or none at all.
func (o *streamOut) abandon() {
	if o.streaming || o.failed != nil {
		return
	}
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	o.w.WriteHeader(http.StatusOK)
}

func (o *streamOut) notify(_ context.Context, method string, params map[string]any) error {
	msg := map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "method": method}
	if params != nil {
		msg["params"] = params
	}
	return o.send(msg)
}

// elicit sends elicitation/create on the request's stream and waits for
// the client's answer, which it posts to the session: to this front,
// since the request's stream is held by it.
func (o *streamOut) elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	if _, elicits, _ := parseSession(o.session); !elicits {
		return nil, errNoElicitation
	}
	if err := req.Params.Validate(); err != nil {
		return nil, err
	}
	id, _ := json.Marshal("toolbus-" + nuid.Next())
	answers := make(chan *rpcMessage, 1)
	key := inflightKey(agentOf(ctx), o.session, id)
	o.f.requests.Store(key, answers)
	defer o.f.requests.Delete(key)
	msg := map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "id": json.RawMessage(id), "method": string(mcp.MethodElicitationCreate), "params": req.Params}
	if err := o.send(msg); err != nil {
		return nil, err
	}
	select {
	case answer := <-answers:
		if len(answer.Error) > 0 && string(answer.Error) != "null" {
			return nil, fmt.Errorf("elicitation refused by the client: %s", answer.Error)
		}
		var result mcp.ElicitationResult
		if err := json.Unmarshal(answer.Result, &result); err != nil {
			return nil, fmt.Errorf("elicitation answer: %w", err)
		}
		return &result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// finish writes the request's result or error.
func (o *streamOut) finish(id json.RawMessage, result any, rpcErr *rpcError) {
	msg := newResponse(id, result, rpcErr)
	if o.streaming {
		if err := o.send(msg); err != nil && !errors.Is(err, context.Canceled) {
			o.f.log.Debug("response not sent", "error", err)
		}
		return
	}
	if err := writeResponse(o.w, msg); err != nil {
		o.f.log.Debug("response not sent", "error", err)
	}
}

// rpcResponse is a JSON-RPC response as the front writes it.
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

func newResponse(id json.RawMessage, result any, rpcErr *rpcError) *rpcResponse {
	msg := &rpcResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: id, Error: rpcErr}
	if rpcErr == nil {
		msg.Result = result
		if r, ok := result.(*mcp.CallToolResult); ok {
			msg.Result = wireResult(r)
		}
	}
	return msg
}

// toolResultJSON is a tools/call result as mcp.CallToolResult encodes
// itself, the fields the front sets, without the two maps and the second
// pass over the bytes that its own encoding costs on every call.
type toolResultJSON struct {
	Meta              map[string]any `json:"_meta,omitempty"`
	Content           []mcp.Content  `json:"content"`
	StructuredContent any            `json:"structuredContent,omitempty"`
	IsError           bool           `json:"isError,omitempty"`
}

func wireResult(r *mcp.CallToolResult) *toolResultJSON {
	out := &toolResultJSON{Content: r.Content, StructuredContent: r.StructuredContent, IsError: r.IsError}
	if r.Meta != nil {
		out.Meta = r.Meta.AdditionalFields
	}
	if len(r.RawStructuredContent) > 0 {
		out.StructuredContent = r.RawStructuredContent
	}
	if out.Content == nil {
		out.Content = []mcp.Content{}
	}
	return out
}

// responseBuffers holds the buffers responses are encoded in.
var responseBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writeResponse writes msg as one application/json body with its length,
// in one write: never chunked, so that the client reads the body to its
// end as it decodes it and keeps the connection.
func writeResponse(w http.ResponseWriter, msg *rpcResponse) error {
	buf := responseBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 64<<10 {
			buf.Reset()
			responseBuffers.Put(buf)
		}
	}()
	if err := json.NewEncoder(buf).Encode(msg); err != nil {
		msg = &rpcResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: msg.ID, Error: &rpcError{Code: mcp.INTERNAL_ERROR, Message: "response not encoded: " + err.Error()}}
		buf.Reset()
		if err := json.NewEncoder(buf).Encode(msg); err != nil {
			return err
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	_, err := w.Write(buf.Bytes())
	return err
}
