package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/support/oidc"
)

// runMCP serves Toolbus to MCP clients: over streamable HTTP on --listen,
// or over standard input and output with --stdio.
func runMCP(ctx context.Context, g globals, args []string) error {
	fs := newFlags("mcp")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the HTTP listener; MCP is served on /mcp, health on /healthz")
	stdio := fs.Bool("stdio", false, "serve one session on standard input and output instead of HTTP")
	tokensFile := fs.String("tokens", "", "bearer tokens file (YAML: tokens: {TOKEN: {agent: NAME}}); default $"+mcpfront.TokensEnv+" (TOKEN=AGENT,...)")
	turn := fs.String("turn", "", "the turn of the stdio session (default a new one)")
	origins := fs.String("allow-origin", "", "Origin headers allowed besides loopback ones, comma-separated")
	maxBytes := fs.Int64("max-request-bytes", 4<<20, "largest HTTP request body, or stdio message")
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM, how long requests in flight may finish")
	metricsListen := fs.String("metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz (ready while the NATS connection is up) on this address (host:port)")
	verbose := fs.Bool("v", false, "log at debug level")
	issuer := fs.String("oidc-issuer", os.Getenv("TOOLBUS_MCP_OIDC_ISSUER"), "also take the bearer tokens of this OpenID Connect issuer (an OAuth resource server, docs/mcp.md) ($TOOLBUS_MCP_OIDC_ISSUER)")
	resource := fs.String("resource", "", "with --oidc-issuer: the front's resource identifier, the URL of /mcp as clients reach it (default http://LISTEN/mcp)")
	audience := fs.String("oidc-audience", "", "with --oidc-issuer: the audience a token must hold (default the resource)")
	agentsClaim := fs.String("oidc-agents-claim", setup.DefaultAgentsClaim, "with --oidc-issuer: the claim naming the agents a token acts as")
	if _, err := parseInterleaved(fs, args); err != nil {
		return flagsFailed(err)
	}
	if *issuer == "" && (*resource != "" || *audience != "") {
		return usageError("toolbus mcp: --resource and --oidc-audience need --oidc-issuer")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var tokens map[string]mcpfront.Identity
	var err error
	switch {
	case *stdio:
	case *tokensFile != "":
		tokens, err = mcpfront.LoadTokens(*tokensFile)
	case os.Getenv(mcpfront.TokensEnv) != "":
		tokens, err = mcpfront.ParseTokens(os.Getenv(mcpfront.TokensEnv))
	}
	if err != nil {
		return err
	}
	var oauth *mcpfront.OAuth
	if *issuer != "" && !*stdio {
		if *resource == "" {
			*resource = "http://" + *listen + "/mcp"
		}
		if *audience == "" {
			*audience = *resource
		}
		v, err := oidc.NewVerifier(oidc.Config{Issuer: *issuer, Audiences: []string{*audience}})
		if err != nil {
			return usageError("toolbus mcp: " + err.Error())
		}
		oauth = &mcpfront.OAuth{Verifier: v, Resource: *resource, AgentsClaim: *agentsClaim}
	}
	if len(tokens) == 0 && oauth == nil && g.agent == "" {
		return usageError("toolbus mcp: --agent NAME is required without tokens (and for --stdio)")
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	stopProbes, err := serveProbes(ctx, "toolbus-mcp", *metricsListen, nc, log)
	if err != nil {
		return err
	}
	defer stopProbes()
	var allowed []string
	for o := range strings.SplitSeq(*origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			allowed = append(allowed, o)
		}
	}
	front, err := mcpfront.New(mcpfront.Config{Client: c, Tokens: tokens, OAuth: oauth, Agent: g.agent, StdioTurn: *turn, AllowedOrigins: allowed, MaxRequestBytes: *maxBytes, Logger: log})
	if err != nil {
		return err
	}
	if *stdio {
		log.Info("serving MCP on standard input and output (--turn resumes the turn)", "agent", g.agent, "turn", front.StdioTurn())
		return front.ServeStdio(ctx, os.Stdin, os.Stdout)
	}
	if len(tokens) == 0 && oauth == nil && !mcpfront.Loopback(*listen) {
		return usageError(fmt.Sprintf("toolbus mcp: without tokens the front serves loopback only; %s is not (give --tokens FILE or $%s)", *listen, mcpfront.TokensEnv))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	switch {
	case oauth != nil:
		log.Info("an OAuth resource server", "issuer", *issuer, "resource", *resource, "audience", *audience, "metadata", oauth.MetadataURL(), "static_tokens", len(tokens))
	case len(tokens) == 0:
		log.Warn("no tokens: every request is served as one agent, on loopback only", "agent", g.agent)
	default:
		log.Info("bearer tokens loaded", "tokens", len(tokens))
	}
	srv := &http.Server{Handler: front.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("MCP endpoint: http://%s/mcp\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("draining", "for", *drain)
	drainCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	front.Shutdown(drainCtx)
	if err := srv.Shutdown(drainCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
