package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	bus "github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/sources"
	"github.com/toolbus/toolbus/pkg/worker"
)

// Transport names how the worker talks to an MCP server.
type Transport string

const (
	// TransportStdio runs the server as a child process and speaks to it
	// over its standard input and output.
	TransportStdio Transport = "stdio"
	// TransportSSE connects to a server's HTTP+SSE endpoint (protocol 2024-11-05).
	TransportSSE Transport = "sse"
	// TransportHTTP connects to a server's streamable HTTP endpoint.
	TransportHTTP Transport = "http"
)

// Config describes one MCP server.
type Config struct {
	// Name identifies the server within its namespace; it is the tools'
	// ToolSource.Name. Required.
	Name string
	// Namespace is the namespace the tools are served in. Methods are
	// shortened so that "namespace-method" fits 64 characters. Defaults to
	// leaving room for the longest namespace there can be.
	Namespace string
	// Transport defaults to TransportStdio when Command is set and to
	// TransportHTTP when URL is.
	Transport Transport

	// Command, Args, Env and Dir start a stdio server. The server does not
	// inherit the worker's environment, which holds the worker's secrets:
	// it gets the variables InheritedEnv lists and those InheritEnv names,
	// where the worker has them set, and then Env's KEY=VALUE entries.
	Command    string
	Args       []string
	Env        []string
	InheritEnv []string
	Dir        string

	// Roots are directories offered to the server as its roots (absolute
	// paths, sent as file:// URIs). With roots the worker declares the MCP
	// roots capability and answers roots/list; without, it declares none.
	Roots []string

	// URL of an SSE or streamable HTTP server, and headers sent with every request.
	URL     string
	Headers map[string]string

	// ConnectTimeout bounds starting or connecting to the server,
	// initializing the session and listing the tools. Defaults to 30s.
	ConnectTimeout time.Duration
	// MinBackoff is the wait before a restart or reconnection; it doubles,
	// up to MaxBackoff, while connections keep failing or ending within a
	// minute. Defaults to 250ms and 30s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// PingInterval is how often a network server is pinged, so that a lost
	// connection is noticed and restored before a call needs it. Defaults to
	// 15s; a negative value disables pings.
	PingInterval time.Duration
	// UnavailableWait is how long a call waits for the server to come back
	// before it is handed back for another attempt. Defaults to 30s.
	UnavailableWait time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Transport == "" {
		if c.URL != "" && c.Command == "" {
			c.Transport = TransportHTTP
		} else {
			c.Transport = TransportStdio
		}
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 30 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 250 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.PingInterval == 0 {
		c.PingInterval = 15 * time.Second
	}
	if c.UnavailableWait == 0 {
		c.UnavailableWait = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c *Config) validate() error {
	if c.Name == "" {
		return errors.New("mcp: Config.Name is required")
	}
	switch c.Transport {
	case TransportStdio:
		if c.Command == "" {
			return fmt.Errorf("mcp: server %s: the stdio transport needs a Command", c.Name)
		}
		if c.URL != "" {
			return fmt.Errorf("mcp: server %s: the stdio transport takes a Command, not a URL", c.Name)
		}
	case TransportSSE, TransportHTTP:
		if c.URL == "" {
			return fmt.Errorf("mcp: server %s: the %s transport needs a URL", c.Name, c.Transport)
		}
		if c.Command != "" {
			return fmt.Errorf("mcp: server %s: the %s transport takes a URL, not a Command", c.Name, c.Transport)
		}
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("mcp: server %s: URL %q is not an http or https URL", c.Name, c.URL)
		}
	default:
		return fmt.Errorf("mcp: server %s: unknown transport %q (want stdio, sse or http)", c.Name, c.Transport)
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("mcp: server %s: environment entry %q is not KEY=VALUE", c.Name, kv)
		}
	}
	for name, value := range c.Headers {
		if err := sources.CheckHeaderValue(value); err != nil {
			return fmt.Errorf("mcp: server %s: header %s: %w", c.Name, name, err)
		}
	}
	for _, dir := range c.Roots {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("mcp: server %s: root %q is not an absolute path", c.Name, dir)
		}
	}
	for _, name := range c.InheritEnv {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return fmt.Errorf("mcp: server %s: %q is not an environment variable name", c.Name, name)
		}
	}
	if c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff {
		return fmt.Errorf("mcp: server %s: backoff from %v to %v is not a range", c.Name, c.MinBackoff, c.MaxBackoff)
	}
	return nil
}

// Source serves the tools of one MCP server. Create it with New.
type Source struct {
	cfg Config
	log *slog.Logger

	// progress routes notifications/progress by token to the call's context.
	progress sync.Map
	tokens   atomic.Uint64
	// relist is signalled by notifications/tools/list_changed.
	relist chan struct{}
	// connections is shared by the sessions of a network server.
	connections *http.Transport
	// reported is the tool list last returned or passed to update, as JSON.
	reported []byte

	mu      sync.Mutex
	current *session
	// downReason is the last failure to connect since current was last
	// set; "" while connected or before the first failure.
	downReason string
	// changed is closed, and replaced, whenever current changes.
	changed chan struct{}
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a source for the server that cfg describes. Nothing is
// started or connected before Start.
func New(cfg Config) (*Source, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Source{
		cfg:         cfg,
		log:         cfg.Logger.With("mcp_server", cfg.Name),
		relist:      make(chan struct{}, 1),
		changed:     make(chan struct{}),
		connections: http.DefaultTransport.(*http.Transport).Clone(),
	}, nil
}

// Name returns the server's name.
func (s *Source) Name() string { return s.cfg.Name }

// PID returns the process ID of the running stdio server, or 0 when none
// runs (a network transport, or between a crash and the restart).
func (s *Source) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil || s.current.proc == nil {
		return 0
	}
	return s.current.proc.PID()
}

// Start starts or connects to the server and returns its tools. A stdio
// server that cannot be started, or fails to initialize, fails Start; a
// network server that cannot be reached does not: Start returns no tools
// and the source keeps connecting in the background. Later failures are
// repaired by restarting or reconnecting, and each new tool list is passed
// to update.
func (s *Source) Start(ctx context.Context, update func([]worker.Tool)) ([]worker.Tool, error) {
	s.mu.Lock()
	if s.started || s.stopped {
		s.mu.Unlock()
		return nil, fmt.Errorf("mcp: server %s: a source starts once, before Stop", s.cfg.Name)
	}
	s.started = true
	s.mu.Unlock()
	// The source outlives the context of Start; Stop ends it.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sess, tools, err := s.connect(ctx, runCtx)
	if err != nil && (s.cfg.Transport == TransportStdio || ctx.Err() != nil) {
		cancel()
		return nil, fmt.Errorf("mcp: server %s: %w", s.cfg.Name, err)
	}
	if err != nil {
		// A network server may come later: the worker serves its other
		// sources meanwhile, and this one's tools once it answers.
		s.log.Warn("MCP server not reachable at start; retrying in the background", "error", err, "retry_after", s.cfg.MinBackoff)
		s.setDown(err)
		s.reported = fingerprint(nil)
		if err := s.run(cancel, func() { s.supervise(runCtx, nil, update) }); err != nil {
			return nil, err
		}
		return nil, nil
	}
	// Servers often change their list as the session starts (tools that
	// depend on the client's capabilities); a change announced by now is
	// taken into the list Start returns.
	for range 3 {
		select {
		case <-s.relist:
			lctx, lcancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
			tools, err = s.listTools(lctx, sess)
			lcancel()
			if err != nil {
				sess.close()
				cancel()
				return nil, fmt.Errorf("mcp: server %s: list tools: %w", s.cfg.Name, err)
			}
			continue
		default:
		}
		break
	}
	s.reported = fingerprint(tools)
	s.setCurrent(sess)
	err = s.run(cancel, func() { s.supervise(runCtx, sess, update) })
	if err != nil {
		sess.close()
		return nil, err
	}
	return tools, nil
}

// run starts supervise, the goroutine that keeps the source connected
// until Stop, unless Stop came first.
func (s *Source) run(cancel context.CancelFunc, supervise func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		cancel()
		return fmt.Errorf("mcp: server %s: stopped while starting", s.cfg.Name)
	}
	s.cancel = cancel
	s.done = make(chan struct{})
	go supervise()
	return nil
}

// Stop disconnects from the server, stopping its process and every process
// of its group, and returns once they are gone.
func (s *Source) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mcp: server %s did not stop: %w", s.cfg.Name, ctx.Err())
	}
}

func (s *Source) setCurrent(sess *session) {
	s.mu.Lock()
	s.current = sess
	if sess != nil {
		s.downReason = ""
	}
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// setDown records that connecting failed: the source is down until a
// session is set. A stdio server is never reported down: it is restarted
// at once, and calls wait for it.
func (s *Source) setDown(err error) {
	if s.cfg.Transport == TransportStdio || err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != nil && !s.current.isLost() {
		return
	}
	wasUp := s.downReason == ""
	s.downReason = err.Error()
	if wasUp {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// Unavailable returns why a network server cannot serve its tools now —
// not reachable at start, or its session lost and the first try to
// connect again failed — or "" when it can. A session lost and replaced
// at the first try is not reported. It implements worker.SourceHealth.
func (s *Source) Unavailable() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.stopped || s.current != nil && !s.current.isLost() {
		return ""
	}
	return s.downReason
}

// HealthChanged returns a channel that is closed when the server connects,
// its session is lost or a try to connect fails. It implements
// worker.SourceHealth.
func (s *Source) HealthChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// supervise keeps the source connected until ctx ends: it re-lists tools
// when the server says they changed, pings network servers, and replaces a
// lost session with a new one after a backoff.
// With a nil sess it begins by connecting.
func (s *Source) supervise(ctx context.Context, sess *session, update func([]worker.Tool)) {
	defer close(s.done)
	retry := s.reconnects().Start()
	for {
		var pause time.Duration
		if sess == nil {
			pause, _ = retry.Failed(nil) // the connection Start tried
		} else {
			began := time.Now()
			s.follow(ctx, sess, update)
			s.setCurrent(nil)
			sess.close()
			if ctx.Err() != nil {
				return
			}
			if time.Since(began) > stableConnection {
				retry.Reset()
			}
			pause, _ = retry.Failed(sess.cause())
			s.log.Warn("MCP server connection lost; reconnecting", "error", sess.cause(), "after", pause)
		}
		if sess = s.reconnect(ctx, retry, pause, update); sess == nil {
			return
		}
	}
}

// reconnects is the policy of restarts and reconnections: pauses from
// MinBackoff doubling to MaxBackoff, for as long as the source runs. The
// server is the source's own, so no crowd of clients retries in step.
func (s *Source) reconnects() bus.RetryPolicy {
	return bus.RetryPolicy{Initial: s.cfg.MinBackoff, Max: s.cfg.MaxBackoff, NoJitter: true, Retryable: func(error) bool { return true }}
}

// reconnect connects after pause, and again after each failure with
// retry's pauses, until it has a session, which it returns, or ctx ends
// (nil).
func (s *Source) reconnect(ctx context.Context, retry *bus.Retrier, pause time.Duration, update func([]worker.Tool)) *session {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		sess, tools, err := s.connect(ctx, ctx)
		if err == nil {
			s.setCurrent(sess)
			s.log.Info("MCP server reconnected", "tools", len(tools))
			s.report(update, tools)
			return sess
		}
		if ctx.Err() != nil {
			return nil
		}
		pause, _ = retry.Failed(err)
		s.log.Warn("MCP server reconnection failed", "error", err, "retry_after", pause)
		s.setDown(err)
	}
}

// report passes a tool list to update unless it is the list reported last:
// a reconnection or a list_changed notification often brings no change, and
// the catalog need not be written again.
func (s *Source) report(update func([]worker.Tool), tools []worker.Tool) {
	fp := fingerprint(tools)
	if bytes.Equal(fp, s.reported) {
		return
	}
	s.reported = fp
	update(tools)
}

// fingerprint encodes the definitions of a tool list, which is sorted by method.
func fingerprint(tools []worker.Tool) []byte {
	defs := make([]*messages.ToolDefinition, len(tools))
	for i := range tools {
		defs[i] = &tools[i].Definition
	}
	data, _ := json.Marshal(defs)
	return data
}

// stableConnection is how long a connection must have lasted for the
// backoff to start again from its minimum.
const stableConnection = time.Minute

// follow serves one session until it is lost or ctx ends.
func (s *Source) follow(ctx context.Context, sess *session, update func([]worker.Tool)) {
	var ping <-chan time.Time
	if sess.proc == nil && s.cfg.PingInterval > 0 {
		t := time.NewTicker(s.cfg.PingInterval)
		defer t.Stop()
		ping = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.lost:
			return
		case <-s.relist:
			lctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
			tools, err := s.listTools(lctx, sess)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("MCP server tools not listed after list_changed", "error", err)
					sess.failOnTransportError(err)
				}
				continue
			}
			s.report(update, tools)
		case <-ping:
			pctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
			err := sess.ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("MCP server did not answer a ping", "error", err)
				sess.failOnTransportError(err)
			}
		}
	}
}

// awaitSession returns a live session, waiting for one while the server is
// being restarted or reconnected.
func (s *Source) awaitSession(ctx context.Context) (*session, error) {
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		sess, changed, stopped := s.current, s.changed, s.stopped
		s.mu.Unlock()
		if sess != nil && !sess.isLost() {
			return sess, nil
		}
		if stopped {
			return nil, worker.Retry(fmt.Errorf("MCP server %s: the source is stopping", s.cfg.Name))
		}
		if timeout == nil {
			t := time.NewTimer(s.cfg.UnavailableWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-timeout:
			return nil, worker.Retry(fmt.Errorf("MCP server %s has not been reachable for %v", s.cfg.Name, s.cfg.UnavailableWait))
		}
	}
}

// onNotification handles the server's notifications. It runs on the
// transport's reading goroutine and must not block.
func (s *Source) onNotification(n mcpgo.JSONRPCNotification) {
	switch n.Method {
	case string(mcpgo.MethodNotificationToolsListChanged):
		select {
		case s.relist <- struct{}{}:
		default:
		}
	case string(mcpgo.MethodNotificationProgress):
		fields := n.Params.AdditionalFields
		token, ok := fields["progressToken"].(string)
		if !ok {
			return
		}
		ctx, ok := s.progress.Load(token)
		if !ok {
			return
		}
		progress, _ := fields["progress"].(float64)
		total, _ := fields["total"].(float64)
		message, _ := fields["message"].(string)
		worker.ReportProgress(ctx.(context.Context), progress, total, message)
	}
}

// isTransportError tells a failure to reach the server from an error the
// server answered.
func isTransportError(err error) bool {
	var terr *transport.Error
	return errors.As(err, &terr) || errors.Is(err, transport.ErrTransportClosed)
}
