package openapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/toolbus/toolbus/pkg/sources"
	"github.com/toolbus/toolbus/pkg/worker"
)

// Auth names the environment variables that hold the API's credentials.
// At most one of BearerEnv and APIKeyEnv is set.
type Auth struct {
	// BearerEnv names the variable holding a token sent as
	// "Authorization: Bearer <token>".
	BearerEnv string
	// APIKeyEnv names the variable holding an API key, sent in the header
	// named Header or in the query parameter named Query (one of the two).
	APIKeyEnv string
	Header    string
	Query     string
}

// Validate reports settings that do not go together.
func (a Auth) Validate() error {
	switch {
	case a.BearerEnv != "" && a.APIKeyEnv != "":
		return errors.New("choose a bearer token or an API key, not both")
	case a.BearerEnv != "" && (a.Header != "" || a.Query != ""):
		return errors.New("a header or query parameter name goes with an API key, not a bearer token")
	case a.APIKeyEnv != "" && (a.Header == "") == (a.Query == ""):
		return errors.New("an API key goes in exactly one of a header and a query parameter")
	case a.APIKeyEnv == "" && (a.Header != "" || a.Query != ""):
		return errors.New("a header or query parameter name is set but no API key variable")
	}
	return nil
}

// Config describes one HTTP API.
type Config struct {
	// Name identifies the API within its namespace; it is the tools'
	// ToolSource.Name. Required.
	Name string
	// Namespace is the namespace the tools are served in. Methods are
	// shortened so that "namespace-method" fits 64 characters. Defaults to
	// leaving room for the longest namespace there can be.
	Namespace string
	// Spec is the OpenAPI 3 document: a file path or an http(s) URL. Required.
	Spec string
	// BaseURL is where requests go. Defaults to the document's first server
	// URL (its variables at their defaults), resolved against Spec's URL
	// when it is relative.
	BaseURL string
	Auth    Auth
	// Headers are sent with every request, before the operation's header
	// parameters and the credentials, which win over them.
	Headers map[string]string
	// MaxResponseSize is the largest response body read, in bytes; a larger
	// one is a tool error. Defaults to 4 MiB.
	MaxResponseSize int64
	// LoadTimeout bounds reading the document at Start, with every file and
	// URL its references lead to. Defaults to 30s.
	LoadTimeout time.Duration
	// MaxSpecSize is the most bytes the document may have, with every file
	// and URL its references lead to; a larger one fails Start. Defaults
	// to 32 MiB.
	MaxSpecSize int64
	// HTTPClient sends the requests. Defaults to a client of its own.
	HTTPClient *http.Client
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Source serves the operations of one HTTP API. Create it with New.
type Source struct {
	cfg  Config
	log  *slog.Logger
	base *url.URL
	// credential is the bearer token or API key read at Start.
	credential string
}

// New returns a source for the API that cfg describes. The document is
// read by Start.
func New(cfg Config) (*Source, error) {
	if cfg.Name == "" {
		return nil, errors.New("openapi: Config.Name is required")
	}
	if cfg.Spec == "" {
		return nil, fmt.Errorf("openapi: service %s: Config.Spec is required", cfg.Name)
	}
	if err := cfg.Auth.Validate(); err != nil {
		return nil, fmt.Errorf("openapi: service %s: auth: %w", cfg.Name, err)
	}
	if cfg.BaseURL != "" {
		if u, err := url.Parse(cfg.BaseURL); err != nil || !u.IsAbs() || u.Host == "" {
			return nil, fmt.Errorf("openapi: service %s: base URL %q is not an absolute URL", cfg.Name, cfg.BaseURL)
		}
	}
	for name, value := range cfg.Headers {
		if err := sources.CheckHeaderValue(value); err != nil {
			return nil, fmt.Errorf("openapi: service %s: header %s: %w", cfg.Name, name, err)
		}
	}
	if cfg.MaxResponseSize == 0 {
		cfg.MaxResponseSize = 4 << 20
	}
	if cfg.LoadTimeout == 0 {
		cfg.LoadTimeout = 30 * time.Second
	}
	if cfg.MaxSpecSize == 0 {
		cfg.MaxSpecSize = 32 << 20
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Source{cfg: cfg, log: cfg.Logger.With("openapi_service", cfg.Name)}, nil
}

// Name returns the API's name.
func (s *Source) Name() string { return s.cfg.Name }

// Start reads the credentials, loads and validates the document, and
// returns one tool per operation. The tools never change while the source
// runs, so update is not used.
func (s *Source) Start(ctx context.Context, update func([]worker.Tool)) ([]worker.Tool, error) {
	if err := s.readCredential(); err != nil {
		return nil, fmt.Errorf("openapi: service %s: %w", s.cfg.Name, err)
	}
	doc, specURL, order, err := load(ctx, s.cfg.Spec, s.cfg.HTTPClient, loadLimits{timeout: s.cfg.LoadTimeout, size: s.cfg.MaxSpecSize})
	if err != nil {
		return nil, fmt.Errorf("openapi: service %s: %w", s.cfg.Name, err)
	}
	base, err := baseURL(s.cfg.BaseURL, doc, specURL)
	if err != nil {
		return nil, fmt.Errorf("openapi: service %s: %w", s.cfg.Name, err)
	}
	s.base = base
	tools, err := s.tools(doc, order)
	if err != nil {
		return nil, fmt.Errorf("openapi: service %s: %w", s.cfg.Name, err)
	}
	return tools, nil
}

// Stop closes idle connections to the API.
func (s *Source) Stop(ctx context.Context) error {
	s.cfg.HTTPClient.CloseIdleConnections()
	return nil
}

func (s *Source) readCredential() error {
	name, field := s.cfg.Auth.BearerEnv, "bearer_env"
	if name == "" {
		name, field = s.cfg.Auth.APIKeyEnv, "api_key_env"
	}
	if name == "" {
		return nil
	}
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return fmt.Errorf("auth: environment variable %s (%s) is not set", name, field)
	}
	s.credential = strings.TrimSpace(v)
	if err := sources.CheckHeaderValue(s.credential); err != nil {
		return fmt.Errorf("auth: environment variable %s (%s): %w", name, field, err)
	}
	return nil
}
