package mcpfront

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TurnHeader names the turn of a session (on initialize) or of one request.
const TurnHeader = "Toolbus-Turn"

// TurnMetaKey names the turn of one request in its params' _meta.
const TurnMetaKey = "toolbus/turn"

// Keys of the _meta of a tool result.
const (
	MetaCallID     = "toolbus/call_id"
	MetaCode       = "toolbus/code"
	MetaState      = "toolbus/state"
	MetaApprovalID = "toolbus/approval_id"
	MetaDetails    = "toolbus/details"
	// MetaWrapped is true on a result whose structuredContent wraps a
	// value that is not a JSON object under "result".
	MetaWrapped = "toolbus/wrapped"
	// MetaTruncated is true on a result cut to its tool's
	// max_result_size; MetaFullResult then names the object that holds
	// the whole result ({"bucket", "name", "size"}), which
	// calls.full_result reads.
	MetaTruncated  = "toolbus/truncated"
	MetaFullResult = "toolbus/full_result"
)

// discoveryNamespace is the namespace of the coordinator's built-in
// discovery tool, llm_tools-list, whose calls change what a turn sees.
const discoveryNamespace = "llm_tools"

// ErrConfig is the error of a configuration that cannot serve.
var ErrConfig = errors.New("mcpfront: invalid configuration")

// Identity is what a bearer token stands for.
type Identity struct {
	Agent string `yaml:"agent" json:"agent"`
}

// Config configures a front.
type Config struct {
	// Client is the front's client of the bus. Required.
	Client *client.Client
	// Tokens maps bearer tokens to the agents they stand for. Without
	// tokens, every request is Agent's, and Handler serves loopback
	// connections only.
	Tokens map[string]Identity
	// OAuth, when set, also takes the bearer tokens of an OpenID Connect
	// issuer (oauth.go); Tokens may be given beside it.
	OAuth *OAuth
	// Agent is the agent served when there are no tokens, and the agent of
	// a stdio session.
	Agent string
	// StdioTurn is the turn of the stdio session. Defaults to a new turn.
	StdioTurn string
	// AllowedOrigins are the Origin headers a request may carry besides
	// loopback ones ("http://localhost:3000"). A request with another
	// Origin is refused with 403.
	AllowedOrigins []string
	// MaxRequestBytes bounds an HTTP request's body. Defaults to 4 MiB.
	MaxRequestBytes int64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Front is an MCP server in front of the bus.
type Front struct {
	cfg Config
	// mcp serves HTTP, stdio serves stdio; both declare tasks, which the
	// front answers from the ledger itself (see serveRequests and
	// stdioTasks).
	mcp   *server.MCPServer
	stdio *server.MCPServer
	http  *server.StreamableHTTPServer
	log   *slog.Logger
	// stdioEnd is the end of the stdio session's input being handed to
	// mcp-go (see drainStdio).
	stdioEnd atomic.Pointer[stdioEnd]

	// gate admits the HTTP requests; tools answers tools/list and
	// dispatches tools/call to calls, which runs them on the bus.
	gate  *gate
	tools *toolList
	calls *caller
	// inflight holds the cancel functions of the tools/call requests the
	// front serves itself over HTTP, by session and request ID (see
	// serveCall); requests, the channels of the calls that wait for the
	// client's answer to a request of the front's.
	inflight sync.Map
	requests sync.Map
}

// New returns a front.
func New(cfg Config) (*Front, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: no client", ErrConfig)
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 4 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for token, id := range cfg.Tokens {
		if token == "" {
			return nil, fmt.Errorf("%w: an empty token", ErrConfig)
		}
		if err := messages.ValidateID("agent", id.Agent); err != nil {
			return nil, fmt.Errorf("%w: token for %q: %w", ErrConfig, id.Agent, err)
		}
	}
	if cfg.Agent != "" {
		if err := messages.ValidateID("agent", cfg.Agent); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if cfg.OAuth != nil {
		if err := cfg.OAuth.check(); err != nil {
			return nil, err
		}
	}
	if len(cfg.Tokens) == 0 && cfg.OAuth == nil && cfg.Agent == "" {
		return nil, fmt.Errorf("%w: neither tokens nor an agent", ErrConfig)
	}
	if cfg.StdioTurn == "" {
		cfg.StdioTurn = newTurn()
	} else if err := messages.ValidateID("turn", cfg.StdioTurn); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	f := &Front{cfg: cfg, log: cfg.Logger}
	f.gate = &gate{cfg: &f.cfg, log: f.log}
	f.calls = &caller{cfg: &f.cfg, log: f.log}
	f.tools = &toolList{cfg: &f.cfg, log: f.log, call: f.calls.call}
	f.mcp = newServer(f.tools.hooks(), server.WithTaskCapabilities(true, true, true))
	f.stdio = newServer(f.tools.hooks(), server.WithTaskCapabilities(true, true, true))
	f.stdio.AddNotificationHandler(stdioInputEndedMethod, f.stdioInputEnded)
	f.tools.servers = []*server.MCPServer{f.mcp, f.stdio}
	f.http = server.NewStreamableHTTPServer(f.mcp,
		server.WithEndpointPath("/mcp"),
		server.WithSessionIdManagerResolver(sessionResolver{}),
		server.WithHTTPContextFunc(f.httpContext),
		server.WithStreamableHTTPLogger(cfg.Logger),
	)
	return f, nil
}

// newServer is an mcp-go server of the front's with hooks.
func newServer(hooks *server.Hooks, opts ...server.ServerOption) *server.MCPServer {
	return server.NewMCPServer("toolbus", "2", append([]server.ServerOption{
		server.WithToolCapabilities(true),
		server.WithHooks(hooks),
		server.WithRecovery(),
		server.WithInstructions(instructions),
	}, opts...)...)
}

// instructions are those of every session. The discovery tool may not be
// among a session's tools (its agent's rules may not show it), so they do
// not say it is.
const instructions = "Toolbus tools. If llm_tools-list is among your tools, call it to find more tools; those it finds are listed from your next step."

// newTurn names the turn of a session that names none.
func newTurn() string { return "mcp-" + nuid.Next() }

// Handler serves MCP on /mcp and a health check on /healthz.
func (f *Front) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("/mcp", f.gate.guard(f.serveRequests))
	if f.cfg.OAuth != nil {
		mux.HandleFunc("GET /.well-known/oauth-protected-resource", f.gate.serveMetadata)
		if p := metadataPath(f.cfg.OAuth.Resource); p != "/.well-known/oauth-protected-resource" {
			mux.HandleFunc("GET "+p, f.gate.serveMetadata)
		}
	}
	return mux
}

// Loopback reports whether addr, a host:port or a host, is a loopback address.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// gate is what an HTTP request passes before the front serves it: the
// Host and Origin checks and CORS, the body's bound, and who the request
// acts as, by a token of Config.Tokens or, as an OAuth resource server
// (oauth.go), by an issuer's token.
type gate struct {
	cfg *Config
	log *slog.Logger
}

// guard checks the Host header and the origin, authenticates and bounds
// the body before the front and mcp-go see the request, so that what the
// front answers itself (tasks, a session's tools/call) is guarded as
// mcp-go's own requests are; next serves the request as agent's.
func (g *gate) guard(next func(w http.ResponseWriter, r *http.Request, agent string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		onLoopback := loopbackAddr(local)
		if onLoopback && !Loopback(r.Host) {
			// DNS rebinding: a page of another site whose name now
			// resolves to this machine reaches the listener under its name.
			http.Error(w, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host), http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !g.originAllowed(origin) {
				http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
				return
			}
			// A page of an allowed origin is a client too: the browser
			// lets it read the answers, and asks first (preflight)
			// without its token.
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", corsExposed)
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
				h.Set("Access-Control-Allow-Headers", corsAllowed)
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		agent := g.cfg.Agent
		if len(g.cfg.Tokens) > 0 || g.cfg.OAuth != nil {
			token := bearerToken(r.Header.Get("Authorization"))
			id, known := g.cfg.Tokens[token]
			switch {
			case known:
				agent = id.Agent
			case token != "" && g.cfg.OAuth != nil:
				var ok bool
				if agent, ok = g.tokenAgent(w, r, token); !ok {
					return
				}
			case token != "":
				g.challenge(w, http.StatusUnauthorized, "invalid_token", "")
				return
			default:
				g.challenge(w, http.StatusUnauthorized, "", "")
				return
			}
		} else if !onLoopback || !Loopback(r.RemoteAddr) {
			http.Error(w, "Forbidden: without tokens only loopback clients are served", http.StatusForbidden)
			return
		}
		if r.ContentLength > g.cfg.MaxRequestBytes {
			http.Error(w, "request body: larger than the front takes", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, g.cfg.MaxRequestBytes)
		next(w, r, agent)
	})
}

// The headers a page of an allowed origin may send and read (CORS).
const (
	corsAllowed = "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID, " + TurnHeader + ", " + AgentHeader
	corsExposed = "Mcp-Session-Id, WWW-Authenticate"
)

// loopbackAddr reports whether a listener's address is a loopback one,
// without formatting a TCP address.
func loopbackAddr(a net.Addr) bool {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.IsLoopback()
	}
	return a != nil && Loopback(a.String())
}

// bearerToken is the token of an Authorization header, "" if it holds
// none; the scheme's name is case-insensitive (RFC 7235).
func bearerToken(authorization string) string {
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func (g *gate) originAllowed(origin string) bool {
	for _, o := range g.cfg.AllowedOrigins {
		if o == origin {
			return true
		}
	}
	host := origin
	if _, rest, ok := strings.Cut(origin, "://"); ok {
		host = rest
	}
	return Loopback(host)
}

// ErrStdioInUse is the error of a stdio session started while the process
// serves another.
var ErrStdioInUse = errors.New("mcpfront: the process serves a stdio session already")

// stdioServing is set while the process serves a stdio session. mcp-go
// keeps the session of its stdio servers in one variable of the process:
// two sessions at once would share its notifications, its client's
// capabilities and its output.
var stdioServing atomic.Bool

// ServeStdio serves one session on in and out until ctx ends or in closes.
// Task requests are answered by the front from the ledger, as over HTTP;
// the rest go to mcp-go. The goroutine that reads in ends when in closes.
// A process serves one stdio session at a time (ErrStdioInUse).
func (f *Front) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	if !stdioServing.CompareAndSwap(false, true) {
		return ErrStdioInUse
	}
	defer stdioServing.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// input ends when in closes, before mcp-go ends the requests in
	// flight: a request that ends then leaves its call running (see
	// cancels), as one that a client cancels does not.
	input, inputEnded := context.WithCancel(ctx)
	defer inputEnded()
	stdio := server.NewStdioServer(f.stdio)
	stdio.SetContextFunc(func(ctx context.Context) context.Context {
		return context.WithValue(f.stdioContext(ctx), transportKey{}, input)
	})
	lines := &lineWriter{w: out}
	toServer, fromFront := io.Pipe()
	end := &stdioEnd{token: rand.Text(), handled: make(chan struct{})}
	f.stdioEnd.Store(end)
	go f.stdioTasks(f.stdioContext(ctx), in, fromFront, lines, func() {
		f.drainStdio(fromFront, end)
		f.calls.markClientCancelled()
		inputEnded()
	})
	defer toServer.Close()
	return stdio.Listen(ctx, toServer, lines)
}

// stdioInputEndedMethod is the notification the front hands mcp-go after
// the last line of a stdio session's input (drainStdio); clients do not
// send it, and one that did would need the session's token.
const stdioInputEndedMethod = "notifications/toolbus/input_ended"

// stdioDrainWait bounds how long the end of a stdio session's input waits
// for mcp-go to handle the lines before it.
const stdioDrainWait = 5 * time.Second

// stdioEnd is the end of one stdio session's input: handled is closed once
// mcp-go has handled the notification carrying token.
type stdioEnd struct {
	token   string
	handled chan struct{}
	once    sync.Once
}

// drainStdio waits, before the session's input is taken as ended, until
// mcp-go has handled every line before the end. mcp-go reads its lines in
// order and handles a notification on its reading goroutine, a
// notifications/cancelled too: once it has handled one of the front's own
// after the last line, a cancel the client sent just before closing its
// input has cancelled its request, and that request's call is cancelled
// rather than left running as those of a session that merely ends.
func (f *Front) drainStdio(next *io.PipeWriter, end *stdioEnd) {
	line, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": stdioInputEndedMethod, "params": map[string]string{"token": end.token}})
	// The write returns when mcp-go reads it; it fails at once when mcp-go
	// no longer reads, and once the pipe is closed after a wait that ran
	// out.
	failed := make(chan struct{})
	go func() {
		if _, err := next.Write(append(line, '\n')); err != nil {
			close(failed)
		}
	}()
	timer := time.NewTimer(stdioDrainWait)
	defer timer.Stop()
	select {
	case <-end.handled:
	case <-failed:
	case <-timer.C:
		f.log.Debug("stdio: the end of the input was not handled in time")
	}
}

func (f *Front) stdioInputEnded(_ context.Context, n mcp.JSONRPCNotification) {
	end := f.stdioEnd.Load()
	if token, _ := n.Params.AdditionalFields["token"].(string); end != nil && token == end.token {
		end.once.Do(func() { close(end.handled) })
	}
}

// StdioTurn is the turn of the stdio session: the one Config named, or
// the new one the front made. Give it to --turn to resume the session's
// turn in a later process.
func (f *Front) StdioTurn() string { return f.cfg.StdioTurn }

func (f *Front) stdioContext(ctx context.Context) context.Context {
	ctx = context.WithValue(ctx, agentKey{}, f.cfg.Agent)
	return context.WithValue(ctx, sessionTurnKey{}, f.cfg.StdioTurn)
}

// stdioTasks reads the stdio session's messages, one a line: it answers
// task requests, each in a goroutine of its own (tasks/result waits for
// the result), refuses a tools/list with a cursor (see hasListCursor), and
// passes the rest on to mcp-go. A line longer than
// MaxRequestBytes ends the session. ended is called when in ends, before
// mcp-go reads the end of next.
func (f *Front) stdioTasks(ctx context.Context, in io.Reader, next *io.PipeWriter, out *lineWriter, ended context.CancelFunc) {
	scanner := bufio.NewScanner(in)
	// A Scanner's limit is the larger of its buffer's capacity and max,
	// and counts the line's newline.
	limit := int(min(f.cfg.MaxRequestBytes, math.MaxInt32-1)) + 1
	scanner.Buffer(make([]byte, 0, min(64<<10, limit)), limit)
	for scanner.Scan() {
		line := scanner.Bytes()
		var req rpcMessage
		parsed := json.Unmarshal(line, &req) == nil
		if parsed && req.Method == "notifications/cancelled" && len(req.Params.RequestID) > 0 {
			out.cancel(req.Params.RequestID)
		}
		if parsed && req.hasListCursor() {
			if err := out.writeMessage(newResponse(req.ID, nil, badListCursor(req.Params.Cursor))); err != nil {
				f.log.Debug("tools/list answer not sent", "error", err)
			}
			continue
		}
		if parsed && req.isTaskRequest() {
			go func() {
				result, rpcErr := f.task(ctx, &req)
				if err := out.writeMessage(newResponse(req.ID, result, rpcErr)); err != nil {
					f.log.Debug("task answer not sent", "error", err)
				}
			}()
			continue
		}
		if _, err := next.Write(append(slices.Clip(line), '\n')); err != nil {
			ended()
			return
		}
	}
	ended()
	err := scanner.Err()
	if errors.Is(err, bufio.ErrTooLong) {
		err = fmt.Errorf("stdio: a message longer than %d bytes, the limit (--max-request-bytes): %w", f.cfg.MaxRequestBytes, err)
	}
	next.CloseWithError(err)
}

// lineWriter writes whole messages, one a line, for mcp-go and for the
// front's own answers alike: mcp-go writes each message in one Write.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
	// cancelled holds the IDs of requests the client cancelled, whose
	// answers are not sent.
	cancelled map[string]struct{}
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cancelled) > 0 {
		var answer struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(p, &answer) == nil && answer.Method == "" && len(answer.ID) > 0 {
			id := string(bytes.TrimSpace(answer.ID))
			if _, ok := l.cancelled[id]; ok {
				// The answer to a request its client cancelled: MCP
				// has it unsent.
				delete(l.cancelled, id)
				return len(p), nil
			}
		}
	}
	return l.w.Write(p)
}

// cancel notes that the client cancelled the request id, whose answer, if
// one comes, is dropped. At most maxCancelled are held: a client that
// cancels requests already answered leaves their IDs behind.
func (l *lineWriter) cancel(id json.RawMessage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancelled == nil || len(l.cancelled) >= maxCancelled {
		l.cancelled = make(map[string]struct{})
	}
	l.cancelled[string(bytes.TrimSpace(id))] = struct{}{}
}

// maxCancelled bounds the cancelled requests a stdio session remembers.
const maxCancelled = 1024

func (l *lineWriter) writeMessage(msg any) error {
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	_, err = l.Write(append(data, '\n'))
	return err
}

// Shutdown closes the front's HTTP sessions.
// Calls in flight whose requests end from now on are left running on the
// bus rather than cancelled.
func (f *Front) Shutdown(ctx context.Context) {
	f.calls.draining.Store(true)
	f.http.CloseSessions(ctx)
}

type (
	agentKey       struct{}
	sessionTurnKey struct{}
	headerKey      struct{}
	// transportKey holds the context of the stdio connection: when a tool
	// call's context ends and this one has not, the client cancelled the
	// request.
	transportKey struct{}
)

func (f *Front) httpContext(ctx context.Context, r *http.Request) context.Context {
	ctx = context.WithValue(ctx, agentKey{}, r.Context().Value(agentKey{}))
	ctx = context.WithValue(ctx, headerKey{}, r.Header)
	if s := server.ClientSessionFromContext(ctx); s != nil {
		if turn, ok := turnOfSession(s.SessionID()); ok {
			ctx = context.WithValue(ctx, sessionTurnKey{}, turn)
		}
	}
	return ctx
}

func agentOf(ctx context.Context) string {
	agent, _ := ctx.Value(agentKey{}).(string)
	return agent
}

// turnOf is the turn of a request: named in its _meta, else in its
// Toolbus-Turn header, else the session's.
func turnOf(ctx context.Context, meta *mcp.Meta) string {
	if meta != nil {
		if turn, ok := meta.AdditionalFields[TurnMetaKey].(string); ok && turn != "" {
			return turn
		}
	}
	if h, ok := ctx.Value(headerKey{}).(http.Header); ok {
		if turn := h.Get(TurnHeader); turn != "" {
			return turn
		}
	}
	turn, _ := ctx.Value(sessionTurnKey{}).(string)
	return turn
}

// cancels reports whether the end of a tool call's context cancels the
// Toolbus call: it does when the client cancelled the request
// (notifications/cancelled) or, over HTTP, dropped it, where the two
// arrive together; it does not when the front drains or a stdio
// connection ends.
func (c *caller) cancels(ctx context.Context) bool {
	if ctx.Err() == nil || c.draining.Load() {
		return false
	}
	transport, stdio := ctx.Value(transportKey{}).(context.Context)
	if !stdio || transport.Err() == nil {
		return true
	}
	// The input ended: only a request the client cancelled before it did.
	mark, _ := ctx.Value(clientCancelledKey{}).(*atomic.Bool)
	return mark != nil && mark.Load()
}
