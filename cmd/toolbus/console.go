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

	"github.com/toolbus/toolbus/internal/service/admin"
	"github.com/toolbus/toolbus/internal/support/oidc"
)

// consoleSecretEnv may hold the console's client secret at the issuer.
const consoleSecretEnv = "TOOLBUS_CONSOLE_OIDC_SECRET"

// runConsole serves the admin console (docs/operations.md, "Admin console")
// to operators who log in with a token.
func runConsole(ctx context.Context, g globals, args []string) error {
	fs := newFlags("console")
	listen := fs.String("listen", "127.0.0.1:8090", "address of the console's HTTP listener")
	tokensFile := fs.String("tokens", "", "operators' tokens file (YAML: tokens: {TOKEN: {operator: NAME}}); default $"+admin.TokensEnv+" (TOKEN=NAME,...)")
	traceURL := fs.String("trace-url", "", "the tracing UI's URL for a trace, with {trace_id} in it (e.g. http://jaeger:16686/trace/{trace_id})")
	origins := fs.String("allow-origin", "", "Origin headers allowed on forms besides the console's own, comma-separated")
	secure := fs.Bool("secure-cookies", false, "mark the session cookie Secure (the console is reached over HTTPS)")
	maxBytes := fs.Int64("max-request-bytes", 64<<10, "largest HTTP request body")
	metricsListen := fs.String("metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz (ready while the NATS connection is up) on this address (host:port)")
	verbose := fs.Bool("v", false, "log at debug level")
	issuer := fs.String("oidc-issuer", os.Getenv("TOOLBUS_CONSOLE_OIDC_ISSUER"), "also log operators in with this OpenID Connect issuer ($TOOLBUS_CONSOLE_OIDC_ISSUER)")
	clientID := fs.String("oidc-client-id", os.Getenv("TOOLBUS_CONSOLE_OIDC_CLIENT_ID"), "with --oidc-issuer: the console's client ID at the issuer ($TOOLBUS_CONSOLE_OIDC_CLIENT_ID)")
	secretFile := fs.String("oidc-client-secret-file", "", "with --oidc-issuer: a file holding the client's secret, else $"+consoleSecretEnv+"; without a secret the console is a public client (PKCE alone)")
	redirect := fs.String("oidc-redirect-url", "", "with --oidc-issuer: the console's callback as browsers reach it (default http://LISTEN/login/oidc/callback)")
	operatorsClaim := fs.String("oidc-operators-claim", "", "with --oidc-issuer: the claim that makes a user an operator (true, or holding --oidc-operators-value); required")
	operatorsValue := fs.String("oidc-operators-value", "", "with --oidc-operators-claim: the value (a group) that makes an operator")
	nameClaim := fs.String("oidc-name-claim", "", "with --oidc-issuer: the claim naming the operator; without it preferred_username, then email, then sub")
	if _, err := parseInterleaved(fs, args); err != nil {
		return flagsFailed(err)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	tokens, err := consoleTokens(*tokensFile)
	if err != nil {
		return err
	}
	if g.agent != "" {
		// The console lists the whole catalog, not one agent's view of it.
		return usageError("toolbus console acts as no agent: drop --agent")
	}
	var login *admin.OIDCLogin
	if *issuer != "" {
		if *clientID == "" || *operatorsClaim == "" {
			return usageError("toolbus console: --oidc-issuer needs --oidc-client-id and --oidc-operators-claim (only operators log in)")
		}
		secret := os.Getenv(consoleSecretEnv)
		if *secretFile != "" {
			data, err := os.ReadFile(*secretFile)
			if err != nil {
				return usageError("toolbus console: --oidc-client-secret-file: " + err.Error())
			}
			secret = strings.TrimSpace(string(data))
		}
		if *redirect == "" {
			*redirect = "http://" + *listen + "/login/oidc/callback"
		}
		v, err := oidc.NewVerifier(oidc.Config{Issuer: *issuer, Audiences: []string{*clientID}})
		if err != nil {
			return usageError("toolbus console: " + err.Error())
		}
		login = &admin.OIDCLogin{Verifier: v, ClientID: *clientID, ClientSecret: secret, RedirectURL: *redirect,
			OperatorsClaim: *operatorsClaim, OperatorsValue: *operatorsValue, NameClaim: *nameClaim}
	} else if *clientID != "" || *operatorsClaim != "" || *operatorsValue != "" || *nameClaim != "" || *secretFile != "" || *redirect != "" {
		return usageError("toolbus console: the --oidc-… options need --oidc-issuer URL")
	}
	if len(tokens) == 0 && login == nil {
		return usageError("toolbus console: give operators' tokens with --tokens FILE or $" + admin.TokensEnv + ", or an identity provider with --oidc-issuer (toolbus dev serves a console on loopback without them)")
	}
	nc, c, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	defer c.Close()
	stopProbes, err := serveProbes(ctx, "toolbus-console", *metricsListen, nc, log)
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
	console, err := admin.New(admin.Config{
		// With identities an approval's decider must be the NATS user.
		Client: c, Prefix: g.prefix, Tokens: tokens, OIDC: login, TraceURL: *traceURL, By: g.natsUser(),
		AllowedOrigins: allowed, SecureCookies: *secure, MaxRequestBytes: *maxBytes, Logger: log,
	})
	if errors.Is(err, admin.ErrInvalidConfig) {
		return usageError(err.Error())
	}
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: console.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Info("operators' tokens loaded", "tokens", len(tokens))
	if login != nil {
		log.Info("operators log in with the identity provider", "issuer", *issuer, "client_id", *clientID, "redirect_url", *redirect, "operators_claim", *operatorsClaim, "operators_value", *operatorsValue)
	}
	fmt.Printf("Admin console: http://%s/\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A call page's event stream lasts as long as its call: the pages
	// reconnect to the next console.
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// consoleTokens reads the operators' tokens of --tokens FILE, else of
// $TOOLBUS_CONSOLE_TOKENS. A mistake in them is the command line's (a
// usage error), not Toolbus's.
func consoleTokens(file string) (map[string]admin.Operator, error) {
	var tokens map[string]admin.Operator
	var err error
	switch {
	case file != "":
		tokens, err = admin.LoadTokens(file)
	case os.Getenv(admin.TokensEnv) != "":
		tokens, err = admin.ParseTokens(os.Getenv(admin.TokensEnv))
	}
	if errors.Is(err, admin.ErrInvalidConfig) {
		return nil, usageError(err.Error())
	}
	return tokens, err
}
