package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// ErrInvalidConfig is the error of a configuration the console cannot
// serve with; the message names the field.
var ErrInvalidConfig = errors.New("admin: invalid configuration")

// TokensEnv is the environment variable that may hold the operators'
// tokens, as "TOKEN=NAME" pairs separated by commas.
const TokensEnv = "TOOLBUS_CONSOLE_TOKENS"

// MinTokenLength is the shortest token accepted: a token is the only
// secret between the network and operator rights on the bus.
const MinTokenLength = 16

// Operator is who a token logs in as.
type Operator struct {
	Name string `yaml:"operator" json:"operator"`
}

// Config configures a console.
type Config struct {
	// Client is the console's client of the bus, and its only way to it:
	// every page is read with the coordinator's API, so its NATS user
	// needs an operator's rights (docs/security.md) and no JetStream.
	// Required. It must name no
	// Agent: tools.list would then answer with that agent's view of the
	// catalog, without the disabled tools.
	Client *client.Client
	// By is who the console says decided an approval (approvals.decide's
	// by): with identities (docs/security.md) it must be the console's
	// NATS user's name, and the operator logged in is then named in the
	// reason. Empty names the operator logged in.
	By string
	// Prefix of subjects and resources, checked as a name. Defaults to
	// "toolbus". The console's requests use the Client's own prefix.
	Prefix string
	// Tokens maps login tokens to operators. Without tokens the console
	// serves loopback clients only, and only with LoopbackWithoutTokens.
	Tokens map[string]Operator
	// OIDC, when set, logs operators in with an OpenID Connect issuer
	// (oidc.go), beside Tokens or without them.
	OIDC *OIDCLogin
	// LoopbackWithoutTokens lets a console without tokens serve clients
	// that connect over loopback, as operator "dev" (toolbus dev).
	LoopbackWithoutTokens bool
	// TraceURL is the operator's tracing UI, a URL template in which
	// "{trace_id}" is replaced by a call's trace ID. Empty shows no link.
	TraceURL string
	// AllowedOrigins lists Origin values accepted on POSTs besides the
	// console's own (scheme and host of the request).
	AllowedOrigins []string
	// SecureCookies marks the session cookie Secure; set it when the
	// console is reached over HTTPS (a TLS-terminating proxy).
	SecureCookies bool
	// MaxRequestBytes bounds a request body. Defaults to 64 KiB.
	MaxRequestBytes int64
	// SessionTTL is how long a login lasts. Defaults to 12h.
	SessionTTL time.Duration
	// MaxSessions bounds the sessions held in memory; a login beyond it
	// ends the oldest. Defaults to 10000.
	MaxSessions int
	// MaxStreams bounds the event streams (a call page's live timeline)
	// open at once; more are answered 503. Defaults to 256.
	MaxStreams int
	// StreamLifetime ends an event stream after this long; the browser
	// reconnects and resumes after the last event it has. Defaults to 10m.
	StreamLifetime time.Duration
	// RequestTimeout bounds each request the console makes to the bus.
	// Defaults to 10s.
	RequestTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = messages.DefaultPrefix
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 64 << 10
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 10000
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 256
	}
	if c.StreamLifetime <= 0 {
		c.StreamLifetime = 10 * time.Minute
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.Client == nil {
		return fmt.Errorf("%w: Client is required", ErrInvalidConfig)
	}
	if len(c.Tokens) == 0 && c.OIDC == nil && !c.LoopbackWithoutTokens {
		return fmt.Errorf("%w: no Tokens: a console without tokens serves loopback only, and only with LoopbackWithoutTokens", ErrInvalidConfig)
	}
	if c.OIDC != nil {
		if err := c.OIDC.check(); err != nil {
			return err
		}
	}
	for token, op := range c.Tokens {
		if len(token) < MinTokenLength {
			return fmt.Errorf("%w: the token of operator %q is shorter than %d characters", ErrInvalidConfig, op.Name, MinTokenLength)
		}
		if op.Name == "" {
			return fmt.Errorf("%w: a token names no operator", ErrInvalidConfig)
		}
	}
	if c.TraceURL != "" && !strings.Contains(c.TraceURL, "{trace_id}") {
		return fmt.Errorf("%w: TraceURL %q holds no {trace_id}", ErrInvalidConfig, c.TraceURL)
	}
	if c.TraceURL != "" && !strings.HasPrefix(c.TraceURL, "https://") && !strings.HasPrefix(c.TraceURL, "http://") {
		return fmt.Errorf("%w: TraceURL %q is not an http or https URL", ErrInvalidConfig, c.TraceURL)
	}
	return nil
}

// LoadTokens reads a tokens file:
//
//	tokens:
//	  <token>: {operator: alice}
func LoadTokens(path string) (map[string]Operator, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Tokens map[string]Operator `yaml:"tokens"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(file.Tokens) == 0 {
		return nil, fmt.Errorf("%w: %s holds no tokens", ErrInvalidConfig, path)
	}
	return file.Tokens, nil
}

// ParseTokens reads tokens written as TokensEnv holds them.
func ParseTokens(s string) (map[string]Operator, error) {
	out := map[string]Operator{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		token, name, ok := strings.Cut(pair, "=")
		if !ok || token == "" || name == "" {
			return nil, fmt.Errorf("%w: %s: want TOKEN=NAME pairs separated by commas", ErrInvalidConfig, TokensEnv)
		}
		out[token] = Operator{Name: name}
	}
	return out, nil
}
