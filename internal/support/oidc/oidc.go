// Package oidc checks the tokens of an OpenID Connect issuer: a JWT,
// signed with one of the keys the issuer publishes (its JWKS), whose
// issuer, audience and expiry are what the verifier expects. The auth
// callout (toolbus authn), the MCP front and the console use it.
//
// The issuer's keys are fetched when first needed and kept: a token
// signed with a known key is checked without the issuer, so a token is
// checked while the issuer is down. A token naming a key the verifier does
// not know has the keys fetched again, at most once per RefreshInterval
// (once per FailureRetry after a fetch failed); in between, and while a
// fetch fails, such a token is refused at once. Fetches are shared by the
// requests that wait for them and bounded by FetchTimeout, so a flood of
// tokens naming unknown keys costs the issuer one request per interval
// and every waiting request at most FetchTimeout.
package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Defaults of Config.
const (
	DefaultFetchTimeout    = 2 * time.Second
	DefaultRefreshInterval = 30 * time.Second
	DefaultFailureRetry    = 2 * time.Second
	DefaultMaxKeyAge       = time.Hour
	DefaultLeeway          = 10 * time.Second
	// DefaultMaxTokenBytes bounds a token before it is parsed.
	DefaultMaxTokenBytes = 16 << 10
	// maxDocumentBytes bounds the discovery document and the JWKS.
	maxDocumentBytes = 1 << 20
)

// algorithms are the signature algorithms a token may use: asymmetric
// ones only, so that no public key can be taken for a shared secret.
var algorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// Config says which tokens a Verifier accepts.
type Config struct {
	// Issuer is the issuer's identifier, an https (or, for a test on this
	// host, http) URL; a token's iss must be exactly it, and its
	// discovery document is Issuer/.well-known/openid-configuration.
	Issuer string
	// Audiences are the audiences accepted: a token's aud must hold one.
	Audiences []string
	// HTTPClient fetches the discovery document and the keys; its own
	// timeout, if any, applies besides FetchTimeout.
	HTTPClient *http.Client
	// FetchTimeout bounds each fetch of the discovery document or the keys.
	FetchTimeout time.Duration
	// RefreshInterval is the least time between two fetches of the keys
	// for tokens that name a key not known; FailureRetry after a fetch
	// that failed.
	RefreshInterval time.Duration
	FailureRetry    time.Duration
	// MaxKeyAge is how long fetched keys are used before they are fetched
	// again (in the background: the keys held are used meanwhile, and kept
	// if the fetch fails).
	MaxKeyAge time.Duration
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway time.Duration
	// MaxTokenBytes bounds a token's size.
	MaxTokenBytes int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Metadata is what the verifier uses of the issuer's discovery document.
type Metadata struct {
	Issuer                        string   `json:"issuer"`
	AuthorizationEndpoint         string   `json:"authorization_endpoint"`
	TokenEndpoint                 string   `json:"token_endpoint"`
	JWKSURI                       string   `json:"jwks_uri"`
	CodeChallengeMethodsSupported []string `json:"code_challenge_methods_supported"`
	EndSessionEndpoint            string   `json:"end_session_endpoint"`
}

// Token is a checked token.
type Token struct {
	Issuer   string
	Subject  string
	Audience []string
	Expiry   time.Time
	// Claims are all of the token's claims, as JSON decodes them.
	Claims map[string]any
}

// ErrUnavailable wraps the error of a token refused because the issuer's
// discovery document or keys could not be fetched.
var ErrUnavailable = errors.New("the issuer's keys are not available")

// ErrInvalid wraps the error of a token that is not one the verifier
// accepts: malformed, of another issuer or audience, expired, or whose
// signature is not the issuer's.
var ErrInvalid = errors.New("invalid token")

// Verifier checks tokens of one issuer. It is safe for concurrent use.
type Verifier struct {
	cfg Config

	mu       sync.Mutex
	meta     *Metadata
	keys     map[string]jose.JSONWebKey // by key ID
	unnamed  []jose.JSONWebKey          // keys without an ID
	fetched  time.Time                  // when the keys were last fetched
	tried    time.Time                  // when a fetch last ended
	lastErr  error                      // the last fetch's error, nil once one succeeded
	inflight chan struct{}              // closed when the fetch under way ends
	fetches  int
}

// NewVerifier returns a verifier; it reaches the issuer only once a token
// needs its keys.
func NewVerifier(cfg Config) (*Verifier, error) {
	if err := checkIssuer(cfg.Issuer); err != nil {
		return nil, err
	}
	if len(cfg.Audiences) == 0 || slices.Contains(cfg.Audiences, "") {
		return nil, fmt.Errorf("oidc: an audience is required (the aud a token of this issuer must hold)")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = DefaultFetchTimeout
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.FailureRetry <= 0 {
		cfg.FailureRetry = DefaultFailureRetry
	}
	if cfg.MaxKeyAge <= 0 {
		cfg.MaxKeyAge = DefaultMaxKeyAge
	}
	if cfg.Leeway <= 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.MaxTokenBytes <= 0 {
		cfg.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Verifier{cfg: cfg, keys: map[string]jose.JSONWebKey{}}, nil
}

// checkIssuer refuses an issuer that is not an absolute http(s) URL
// without query or fragment.
func checkIssuer(issuer string) error {
	u, err := url.Parse(issuer)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("oidc: issuer %q: want the issuer's URL, such as https://login.example.com/realms/main", issuer)
	}
	return nil
}

// Issuer is the issuer the verifier accepts.
func (v *Verifier) Issuer() string { return v.cfg.Issuer }

// Fetches is how many times the keys were fetched (or tried).
func (v *Verifier) Fetches() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.fetches
}

// Verify checks a token and returns its claims. Its error wraps ErrInvalid
// or ErrUnavailable, and says what was wrong.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Token, error) {
	if len(raw) > v.cfg.MaxTokenBytes {
		return nil, fmt.Errorf("%w: the token is %d bytes, more than the %d accepted", ErrInvalid, len(raw), v.cfg.MaxTokenBytes)
	}
	if strings.Count(raw, ".") != 2 {
		return nil, fmt.Errorf("%w: not a signed JWT (header.payload.signature)", ErrInvalid)
	}
	tok, err := jwt.ParseSigned(raw, algorithms)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(tok.Headers) != 1 {
		return nil, fmt.Errorf("%w: not one signature", ErrInvalid)
	}
	header := tok.Headers[0]
	// The issuer is checked before any fetch: a token of another issuer
	// costs no request to this one.
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, fmt.Errorf("%w: its claims cannot be read: %v", ErrInvalid, err)
	}
	if unverified.Issuer != v.cfg.Issuer {
		return nil, fmt.Errorf("%w: issuer %q, not %q", ErrInvalid, unverified.Issuer, v.cfg.Issuer)
	}
	keys, err := v.keysFor(ctx, header.KeyID)
	if err != nil {
		return nil, err
	}
	var std jwt.Claims
	var all map[string]any
	verified := false
	for _, key := range keys {
		if key.Algorithm != "" && key.Algorithm != header.Algorithm {
			continue
		}
		if err := tok.Claims(key.Key, &std, &all); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, fmt.Errorf("%w: its signature is not one of the issuer's keys (key ID %q, %s)", ErrInvalid, header.KeyID, header.Algorithm)
	}
	if std.Expiry == nil {
		return nil, fmt.Errorf("%w: it has no expiry (exp)", ErrInvalid)
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: v.cfg.Issuer, AnyAudience: v.cfg.Audiences, Time: v.cfg.Now()}, v.cfg.Leeway); err != nil {
		switch {
		case errors.Is(err, jwt.ErrExpired):
			return nil, fmt.Errorf("%w: it expired at %s", ErrInvalid, std.Expiry.Time().UTC().Format(time.RFC3339))
		case errors.Is(err, jwt.ErrInvalidAudience):
			return nil, fmt.Errorf("%w: audience %q, none of %q", ErrInvalid, []string(std.Audience), v.cfg.Audiences)
		case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
			return nil, fmt.Errorf("%w: it is not valid yet (nbf or iat in the future)", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if std.Subject == "" {
		return nil, fmt.Errorf("%w: it has no subject (sub)", ErrInvalid)
	}
	return &Token{Issuer: std.Issuer, Subject: std.Subject, Audience: std.Audience, Expiry: std.Expiry.Time(), Claims: all}, nil
}

// keysFor returns the keys a token whose header names kid may be signed
// with, fetching them when the verifier has none of that ID and may fetch.
func (v *Verifier) keysFor(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	for {
		v.mu.Lock()
		now := v.cfg.Now()
		keys := v.match(kid)
		if len(keys) > 0 {
			if !v.fetched.IsZero() && now.Sub(v.fetched) > v.cfg.MaxKeyAge && v.inflight == nil {
				v.startFetch()
			}
			v.mu.Unlock()
			return keys, nil
		}
		if wait := v.inflight; wait != nil {
			v.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %v while the keys were fetched", ErrUnavailable, ctx.Err())
			}
		}
		gap := v.cfg.RefreshInterval
		if v.lastErr != nil {
			gap = v.cfg.FailureRetry
		}
		if !v.tried.IsZero() && now.Sub(v.tried) < gap {
			err := v.lastErr
			v.mu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("%w: %v (tried %s ago; tried again after %s)", ErrUnavailable, err, now.Sub(v.tried).Round(time.Millisecond), gap)
			}
			return nil, fmt.Errorf("%w: no key of ID %q among the issuer's keys", ErrInvalid, kid)
		}
		wait := v.startFetch()
		v.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v while the keys were fetched", ErrUnavailable, ctx.Err())
		}
		v.mu.Lock()
		keys = v.match(kid)
		err := v.lastErr
		v.mu.Unlock()
		switch {
		case len(keys) > 0:
			return keys, nil
		case err != nil:
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("%w: no key of ID %q among the issuer's keys", ErrInvalid, kid)
	}
}

// match returns the keys a token naming kid may be signed with: the key
// of that ID, or, for a token naming none, every key. Called with v.mu held.
func (v *Verifier) match(kid string) []jose.JSONWebKey {
	if kid != "" {
		if k, ok := v.keys[kid]; ok {
			return []jose.JSONWebKey{k}
		}
		return nil
	}
	out := slices.Clone(v.unnamed)
	for _, k := range v.keys {
		out = append(out, k)
	}
	return out
}

// startFetch starts fetching the keys; it returns the channel closed when
// the fetch ends. Called with v.mu held and no fetch under way.
func (v *Verifier) startFetch() chan struct{} {
	done := make(chan struct{})
	v.inflight = done
	v.fetches++
	go func() {
		// Not the caller's context: a fetch serves every request that
		// waits for it, and is bounded by FetchTimeout alone.
		ctx, cancel := context.WithTimeout(context.Background(), v.cfg.FetchTimeout)
		defer cancel()
		set, err := v.fetchKeys(ctx)
		v.mu.Lock()
		defer v.mu.Unlock()
		v.tried = v.cfg.Now()
		// Keys held stay in use when a fetch fails; a token naming an
		// unknown key has them fetched again after FailureRetry.
		v.lastErr = err
		if err == nil {
			v.keys, v.unnamed = map[string]jose.JSONWebKey{}, nil
			for _, k := range set {
				if k.KeyID == "" {
					v.unnamed = append(v.unnamed, k)
				} else {
					v.keys[k.KeyID] = k
				}
			}
			v.fetched = v.tried
		}
		v.inflight = nil
		close(done)
	}()
	return done
}

// fetchKeys reads the issuer's discovery document (once it succeeded, it
// is kept) and its signing keys.
func (v *Verifier) fetchKeys(ctx context.Context) ([]jose.JSONWebKey, error) {
	meta, err := v.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	var set jose.JSONWebKeySet
	if err := v.getJSON(ctx, meta.JWKSURI, &set); err != nil {
		return nil, fmt.Errorf("the issuer's keys (%s): %w", meta.JWKSURI, err)
	}
	var out []jose.JSONWebKey
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if !k.Valid() || !k.IsPublic() {
			continue
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the issuer's keys (%s) hold no public signing key", meta.JWKSURI)
	}
	return out, nil
}

// Metadata returns the issuer's discovery document, fetching it the first
// time; the issuer it names must be the verifier's.
func (v *Verifier) Metadata(ctx context.Context) (*Metadata, error) {
	v.mu.Lock()
	meta := v.meta
	v.mu.Unlock()
	if meta != nil {
		return meta, nil
	}
	ctx, cancel := context.WithTimeout(ctx, v.cfg.FetchTimeout)
	defer cancel()
	doc := strings.TrimSuffix(v.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	var m Metadata
	if err := v.getJSON(ctx, doc, &m); err != nil {
		return nil, fmt.Errorf("the issuer's discovery document (%s): %w", doc, err)
	}
	if m.Issuer != v.cfg.Issuer {
		return nil, fmt.Errorf("the issuer's discovery document (%s) names issuer %q, not %q", doc, m.Issuer, v.cfg.Issuer)
	}
	if m.JWKSURI == "" {
		return nil, fmt.Errorf("the issuer's discovery document (%s) has no jwks_uri", doc)
	}
	v.mu.Lock()
	v.meta = &m
	v.mu.Unlock()
	return &m, nil
}

func (v *Verifier) getJSON(ctx context.Context, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return err
	}
	if len(data) > maxDocumentBytes {
		return fmt.Errorf("larger than %d bytes", maxDocumentBytes)
	}
	return json.Unmarshal(data, into)
}
