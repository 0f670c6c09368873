package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/pkg/worker"
)

// protocolVersion is the MCP revision the source speaks; see the package documentation.
const protocolVersion = mcpgo.LATEST_LEGACY_PROTOCOL_VERSION

// session is one connection to the server: for stdio, one run of its process.
type session struct {
	client    *client.Client
	transport transport.Interface
	proc      *process

	lost     chan struct{}
	lostOnce sync.Once
	err      error

	pings atomic.Uint64 // numbers the source's ping requests

	// skipped holds the JSON text of the IDs of requests whose response
	// was larger than maxMessageSize and was not read (see messageLimit).
	skipped sync.Map
}

// skip records that the response to the request with the ID id (its JSON
// text) was too large to read.
func (sess *session) skip(id string) { sess.skipped.Store(id, struct{}{}) }

// wasSkipped reports whether the response to the request with the ID id
// was too large to read, and forgets it.
func (sess *session) wasSkipped(id mcpgo.RequestId) bool {
	data, err := json.Marshal(id)
	if err != nil {
		return false
	}
	_, found := sess.skipped.LoadAndDelete(string(data))
	return found
}

func (sess *session) fail(err error) {
	sess.lostOnce.Do(func() {
		sess.err = err
		close(sess.lost)
	})
}

func (sess *session) failOnTransportError(err error) {
	if isTransportError(err) {
		sess.fail(err)
	}
}

func (sess *session) isLost() bool {
	select {
	case <-sess.lost:
		return true
	default:
		return false
	}
}

// cause says why the session was lost.
func (sess *session) cause() error {
	<-sess.lost
	if sess.proc != nil {
		select {
		case <-sess.proc.exited:
			return sess.proc.exitError()
		default:
		}
	}
	return sess.err
}

// close ends the session and, for stdio, the server's processes.
func (sess *session) close() {
	sess.fail(errClosed)
	_ = sess.client.Close()
	if sess.proc != nil {
		sess.proc.stop()
	}
}

var errClosed = fmt.Errorf("session closed")

// connect starts or reaches the server, initializes a session and lists the
// tools, within ConnectTimeout and ctx. The session lives until runCtx ends
// or it is closed.
func (s *Source) connect(ctx, runCtx context.Context) (*session, []worker.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	sess := &session{lost: make(chan struct{})}
	var tr transport.Interface
	switch s.cfg.Transport {
	case TransportStdio:
		proc, err := startProcess(&s.cfg, s.log)
		if err != nil {
			return nil, nil, err
		}
		sess.proc = proc
		tr = transport.NewIO(&messageLimit{r: proc.stdout, framing: perLine, limit: maxMessageSize, tooLarge: sess.fail, skipped: sess.skip}, proc.stdin, nil)
	case TransportSSE:
		sse, err := transport.NewSSE(s.cfg.URL,
			transport.WithHeaders(s.cfg.Headers),
			transport.WithHTTPClient(s.httpClient(sess)),
			transport.WithSSELogger(s.log))
		if err != nil {
			return nil, nil, err
		}
		tr = sse
	case TransportHTTP:
		http, err := transport.NewStreamableHTTP(s.cfg.URL,
			transport.WithHTTPHeaders(s.cfg.Headers),
			transport.WithHTTPBasicClient(s.httpClient(sess)),
			transport.WithHTTPLogger(s.log),
			// Without the standing GET stream, notifications/tools/list_changed
			// would only arrive while a call is running. The option is
			// deprecated for protocol version 2026-07-28, which replaced the
			// stream with subscriptions/listen (Client.Listen); the source
			// speaks 2025-11-25 (see the package documentation), where the
			// stream is the only way.
			//lint:ignore SA1019 the source speaks protocol version 2025-11-25, where this stream carries list_changed
			transport.WithContinuousListening())
		if err != nil {
			return nil, nil, err
		}
		tr = http
	}
	sess.transport = tr
	opts := []client.ClientOption{client.WithProtocolVersion(protocolVersion)}
	if len(s.cfg.Roots) > 0 {
		opts = append(opts, client.WithRootsHandler(roots(s.cfg.Roots)))
	}
	sess.client = client.NewClient(recording(tr), opts...)
	sess.client.OnNotification(s.onNotification)
	sess.client.OnConnectionLost(sess.fail)
	fail := func(step string, err error) (*session, []worker.Tool, error) {
		if sess.isLost() && errors.Is(sess.err, errMessageTooLarge) || errors.Is(err, errMessageTooLarge) {
			err = errMessageTooLarge // the client only saw the transport close, or wrapped it in its layers
		}
		sess.close()
		err = plainTransportError(err)
		if sess.proc != nil {
			return nil, nil, fmt.Errorf("%s: %w (%w)", step, err, sess.proc.exitError())
		}
		return nil, nil, fmt.Errorf("%s: %w", step, err)
	}
	if err := sess.client.Start(runCtx); err != nil {
		return fail("connect", err)
	}
	if sess.proc != nil {
		go func() {
			<-sess.proc.exited
			sess.fail(sess.proc.exitError())
		}()
	}
	var init mcpgo.InitializeRequest
	init.Params.ProtocolVersion = protocolVersion
	init.Params.ClientInfo = mcpgo.Implementation{Name: "toolbus", Version: "1"}
	if _, err := sess.client.Initialize(ctx, init); err != nil {
		return fail("initialize", err)
	}
	tools, err := s.listTools(ctx, sess)
	if err != nil {
		return fail("list tools", err)
	}
	return sess, tools, nil
}

// httpClient returns a client for one session's requests, sharing the
// source's connections.
func (s *Source) httpClient(sess *session) *http.Client {
	return &http.Client{Transport: sessionWatch{base: s.connections, lost: sess.fail, skipped: sess.skip}}
}

// listTools lists every page of the server's tools, at most maxTools.
func (s *Source) listTools(ctx context.Context, sess *session) ([]worker.Tool, error) {
	var (
		req   mcpgo.ListToolsRequest
		tools []mcpgo.Tool
		seen  = map[mcpgo.Cursor]bool{}
	)
	for {
		res, err := sess.client.ListToolsByPage(ctx, req)
		if err != nil {
			return nil, err
		}
		tools = append(tools, res.Tools...)
		if len(tools) > maxTools {
			return nil, fmt.Errorf("the server lists more than %d tools", maxTools)
		}
		if res.NextCursor == "" {
			return s.toolsOf(tools)
		}
		if seen[res.NextCursor] {
			return nil, fmt.Errorf("the server's tool list repeats the page %q", res.NextCursor)
		}
		seen[res.NextCursor] = true
		req.Params.Cursor = res.NextCursor
	}
}

// ping sends the ping request of protocol version 2025-11-25, which the
// source speaks (the MCP client's Ping is deprecated, as version 2026-07-28
// dropped the request). Its IDs are strings, so they cannot collide with the
// client's numeric ones. A failure to deliver it is a *transport.Error.
func (sess *session) ping(ctx context.Context) error {
	id := mcpgo.NewRequestId("toolbus-ping-" + strconv.FormatUint(sess.pings.Add(1), 10))
	resp, err := sess.transport.SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcpgo.JSONRPC_VERSION, ID: id, Method: string(mcpgo.MethodPing)})
	if err != nil {
		return transport.NewError(err)
	}
	if resp.Error != nil {
		return resp.Error.AsError()
	}
	return nil
}

// cancelTimeout bounds sending notifications/cancelled.
const cancelTimeout = 5 * time.Second

// sendCancel tells the server to stop working on a request.
func (sess *session) sendCancel(id mcpgo.RequestId, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	return sess.transport.SendNotification(ctx, mcpgo.JSONRPCNotification{
		JSONRPC: mcpgo.JSONRPC_VERSION,
		Notification: mcpgo.Notification{
			Method: string(mcpgo.MethodNotificationCancelled),
			Params: mcpgo.NotificationParams{AdditionalFields: map[string]any{"requestId": id, "reason": reason}},
		},
	})
}

// requestIDKey marks a context whose tools/call request should have its
// JSON-RPC ID recorded: the MCP client picks IDs itself, and the source
// needs the ID to cancel the request.
type requestIDKey struct{}

type requestID struct {
	mu  sync.Mutex
	id  mcpgo.RequestId
	set bool
}

func (r *requestID) get() (mcpgo.RequestId, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id, r.set
}

// recording wraps a transport so that it records the ID of the tools/call
// requests whose context asks for it. The wrapper always presents itself as
// an HTTP connection: the MCP client then leaves the cancellation of a
// request to the source, which sends it with the call's own reason on every
// transport, rather than sending "context canceled" itself over stdio.
func recording(tr transport.Interface) transport.Interface { return recorder{tr} }

type recorder struct{ transport.Interface }

func (r recorder) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if rec, ok := ctx.Value(requestIDKey{}).(*requestID); ok && req.Method == string(mcpgo.MethodToolsCall) {
		rec.mu.Lock()
		rec.id, rec.set = req.ID, true
		rec.mu.Unlock()
	}
	return r.Interface.SendRequest(ctx, req)
}

// SetRequestHandler passes the server's requests (ping) to the client.
func (r recorder) SetRequestHandler(h transport.RequestHandler) {
	if b, ok := r.Interface.(transport.BidirectionalInterface); ok {
		b.SetRequestHandler(h)
	}
}

// SetConnectionLostHandler tells the session when an SSE stream breaks.
func (r recorder) SetConnectionLostHandler(h func(error)) {
	if s, ok := r.Interface.(interface{ SetConnectionLostHandler(func(error)) }); ok {
		s.SetConnectionLostHandler(h)
	}
}

// RequiresLegacyProtocol forwards what the streamable HTTP transport says.
func (r recorder) RequiresLegacyProtocol() bool {
	l, ok := r.Interface.(interface{ RequiresLegacyProtocol() bool })
	return ok && l.RequiresLegacyProtocol()
}

// SetProtocolVersion forwards the negotiated version to an HTTP transport,
// which sends it in a header; stdio has no use for it.
func (r recorder) SetProtocolVersion(version string) {
	if h, ok := r.Interface.(transport.HTTPConnection); ok {
		h.SetProtocolVersion(version)
	}
}

// sessionWatch notices a server that has forgotten the session — it
// restarted, or expired the session — which streamable HTTP reports as an
// HTTP error to a request carrying the session ID: 404 as the protocol
// says, or 400 naming the session, as some servers do. The MCP client
// hands such an answer back as an ordinary error response, so the source
// would otherwise take it for the tool's failure.
type sessionWatch struct {
	base    http.RoundTripper
	lost    func(error)
	skipped func(id string)
}

func (w sessionWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	limitBody(resp, w.lost, w.skipped)
	if req.Header.Get(transport.HeaderKeySessionID) == "" {
		return resp, nil
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		w.lost(fmt.Errorf("the server no longer knows the session: %s", resp.Status))
	case http.StatusBadRequest:
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
		if bytes.Contains(bytes.ToLower(head), []byte("session")) {
			w.lost(fmt.Errorf("the server no longer knows the session: %s: %s", resp.Status, bytes.TrimSpace(head)))
		}
	}
	return resp, nil
}

// sendError is a request that did not reach the server. The MCP client
// wraps such a failure in layers that repeat themselves ("transport error:
// failed to send request: failed to send request: Post ..."); its message
// is the HTTP client's alone, which names the method, the URL and why,
// while the whole chain stays there for errors.Is and errors.As.
type sendError struct {
	err   error
	cause *url.Error
}

func (e *sendError) Error() string { return e.cause.Error() }
func (e *sendError) Unwrap() error { return e.err }

// plainTransportError gives a request that failed in the HTTP client the
// HTTP client's message; other errors are returned as they are.
func plainTransportError(err error) error {
	var cause *url.Error
	if err == nil || !errors.As(err, &cause) {
		return err
	}
	return &sendError{err: err, cause: cause}
}
