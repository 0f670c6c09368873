// Package oidctest runs an OpenID Connect issuer for tests: a real HTTP
// server on a free loopback port with a discovery document, its signing
// keys (JWKS), an authorization endpoint that logs in a user the test
// added (at once with login_hint, else through a login form), and a token
// endpoint that exchanges a code for an access token and an ID token,
// checking the client and its PKCE verifier (S256, required). Tests also
// mint tokens directly, forge them with keys of their own, make the issuer
// hang or stop, and count the requests it served.
package oidctest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Client is a client registered with the issuer. A client without Secret
// is a public one, which authenticates by its PKCE verifier alone.
type Client struct {
	ID           string
	Secret       string
	RedirectURIs []string
}

// Issuer is a running issuer.
type Issuer struct {
	// URL is the issuer's identifier and the address of its endpoints.
	URL string
	// TTL is how long the tokens it issues last; default 5 minutes.
	TTL time.Duration

	srv *httptest.Server

	mu       sync.Mutex
	key      *ecdsa.PrivateKey
	kid      string
	oldKeys  []jose.JSONWebKey
	users    map[string]map[string]any
	clients  map[string]Client
	codes    map[string]*grant
	requests map[string]int
	hang     chan struct{}
}

// grant is an authorization code's.
type grant struct {
	client, redirect, challenge, nonce, user, resource, scope string
	expires                                                   time.Time
}

// Option changes how Start runs an issuer.
type Option func(*Issuer)

// Host names the issuer by host instead of 127.0.0.1 (still listening on
// 127.0.0.1): "localhost" makes it another site than a server of the test
// on 127.0.0.1, as an organisation's identity provider is.
func Host(host string) Option {
	return func(iss *Issuer) {
		iss.URL = strings.Replace(iss.URL, "127.0.0.1", host, 1)
	}
}

// Start runs an issuer until the test ends.
func Start(t testing.TB, opts ...Option) *Issuer {
	t.Helper()
	iss := &Issuer{TTL: 5 * time.Minute, users: map[string]map[string]any{}, clients: map[string]Client{}, codes: map[string]*grant{}, requests: map[string]int{}}
	iss.newKey()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", iss.discovery)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", iss.discovery)
	mux.HandleFunc("GET /jwks", iss.jwks)
	mux.HandleFunc("GET /authorize", iss.authorize)
	mux.HandleFunc("POST /authorize", iss.authorize)
	mux.HandleFunc("POST /token", iss.token)
	iss.srv = httptest.NewServer(iss.counting(mux))
	iss.URL = iss.srv.URL
	for _, o := range opts {
		o(iss)
	}
	t.Cleanup(iss.Close)
	return iss
}

func (iss *Issuer) newKey() {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	if iss.key != nil {
		iss.oldKeys = append(iss.oldKeys, jose.JSONWebKey{Key: iss.key.Public(), KeyID: iss.kid, Algorithm: string(jose.ES256), Use: "sig"})
	}
	iss.key, iss.kid = key, "k"+randomString(6)
}

// RotateKey signs from now on with a new key, published beside the old ones.
func (iss *Issuer) RotateKey() {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.newKey()
}

// KeyID is the ID of the key the issuer signs with now.
func (iss *Issuer) KeyID() string {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	return iss.kid
}

// AddUser adds a user the authorization endpoint may log in; claims go
// into its tokens.
func (iss *Issuer) AddUser(name string, claims map[string]any) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.users[name] = claims
}

// AddClient registers a client.
func (iss *Issuer) AddClient(c Client) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	iss.clients[c.ID] = c
}

// Requests is how many requests the issuer served on path (/jwks,
// /token, /authorize, /.well-known/openid-configuration).
func (iss *Issuer) Requests(path string) int {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	return iss.requests[path]
}

// Hang makes every request wait, unanswered, until release is called (or
// its client gives up), as an issuer whose host is overloaded does.
func (iss *Issuer) Hang() (release func()) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	ch := make(chan struct{})
	iss.hang = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			iss.mu.Lock()
			if iss.hang == ch {
				iss.hang = nil
			}
			iss.mu.Unlock()
			close(ch)
		})
	}
}

// Close stops the issuer: its address refuses connections from then on.
func (iss *Issuer) Close() {
	iss.mu.Lock()
	if iss.hang != nil {
		close(iss.hang)
		iss.hang = nil
	}
	iss.mu.Unlock()
	iss.srv.CloseClientConnections()
	iss.srv.Close()
}

func (iss *Issuer) counting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		iss.mu.Lock()
		iss.requests[r.URL.Path]++
		hang := iss.hang
		iss.mu.Unlock()
		if hang != nil {
			select {
			case <-hang:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Token mints a token of the issuer for subject sub with audience aud (a
// string, or a list of strings), lasting TTL; claims are added, and may
// override any of those (an exp in the past makes an expired token).
func (iss *Issuer) Token(sub string, aud any, claims map[string]any) string {
	now := time.Now()
	all := map[string]any{"iss": iss.URL, "sub": sub, "aud": aud, "iat": now.Unix(), "exp": now.Add(iss.TTL).Unix()}
	for k, v := range claims {
		all[k] = v
	}
	return iss.Sign(all)
}

// Sign signs claims as they are with the issuer's current key.
func (iss *Issuer) Sign(claims map[string]any) string {
	iss.mu.Lock()
	key, kid := iss.key, iss.kid
	iss.mu.Unlock()
	return SignWith(key, kid, claims)
}

// SignWith signs claims with key (ECDSA P-256, RSA or Ed25519) under key
// ID kid: with a key of its own and the issuer's key ID, a test forges a
// token.
func SignWith(key crypto.Signer, kid string, claims map[string]any) string {
	alg := jose.ES256
	switch key.Public().(type) {
	case *ecdsa.PublicKey:
	case interface{ Size() int }:
		alg = jose.RS256
	default:
		alg = jose.EdDSA
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		panic(err)
	}
	token, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		panic(err)
	}
	return token
}

func (iss *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                iss.URL,
		"authorization_endpoint":                iss.URL + "/authorize",
		"token_endpoint":                        iss.URL + "/token",
		"jwks_uri":                              iss.URL + "/jwks",
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"ES256"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post", "none"},
		"scopes_supported":                      []string{"openid", "profile", "email"},
	})
}

func (iss *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	iss.mu.Lock()
	keys := append(slices.Clone(iss.oldKeys), jose.JSONWebKey{Key: iss.key.Public(), KeyID: iss.kid, Algorithm: string(jose.ES256), Use: "sig"})
	iss.mu.Unlock()
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: keys})
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><title>Test issuer: log in</title></head><body>
<h1>Log in to the test issuer</h1>
<form method="post" action="/authorize">
{{range $k, $v := .}}<input type="hidden" name="{{$k}}" value="{{$v}}">
{{end}}<label>User <input id="username" name="login_hint" autocomplete="off"></label>
<button id="login" type="submit">Log in</button>
</form></body></html>`))

// authorize logs in the user login_hint names and sends the browser back
// to the client with a code; without login_hint it shows a form asking
// for the user.
func (iss *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.Form
	iss.mu.Lock()
	client, known := iss.clients[q.Get("client_id")]
	iss.mu.Unlock()
	switch {
	case !known:
		http.Error(w, "unknown client_id "+q.Get("client_id"), http.StatusBadRequest)
		return
	case !slices.Contains(client.RedirectURIs, q.Get("redirect_uri")):
		http.Error(w, "redirect_uri "+q.Get("redirect_uri")+" is not one of the client's", http.StatusBadRequest)
		return
	case q.Get("response_type") != "code":
		http.Error(w, "response_type must be code", http.StatusBadRequest)
		return
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		http.Error(w, "PKCE is required: code_challenge with code_challenge_method S256", http.StatusBadRequest)
		return
	}
	user := q.Get("login_hint")
	if user == "" {
		fields := map[string]string{}
		for k := range q {
			fields[k] = q.Get(k)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = loginPage.Execute(w, fields)
		return
	}
	iss.mu.Lock()
	_, exists := iss.users[user]
	iss.mu.Unlock()
	if !exists {
		http.Error(w, "unknown user "+user, http.StatusUnauthorized)
		return
	}
	code := randomString(24)
	iss.mu.Lock()
	iss.codes[code] = &grant{client: client.ID, redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge"), nonce: q.Get("nonce"),
		user: user, resource: q.Get("resource"), scope: q.Get("scope"), expires: time.Now().Add(time.Minute)}
	iss.mu.Unlock()
	back, _ := url.Parse(q.Get("redirect_uri"))
	values := back.Query()
	values.Set("code", code)
	if state := q.Get("state"); state != "" {
		values.Set("state", state)
	}
	values.Set("iss", iss.URL)
	back.RawQuery = values.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// token exchanges a code for tokens: the client must be the code's (its
// secret checked for a confidential one), and the verifier the code's
// challenge's.
func (iss *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, "invalid_request", err.Error())
		return
	}
	if r.PostForm.Get("grant_type") != "authorization_code" {
		oauthError(w, "unsupported_grant_type", "only authorization_code")
		return
	}
	clientID, secret, basic := r.BasicAuth()
	if basic {
		clientID, _ = url.QueryUnescape(clientID)
		secret, _ = url.QueryUnescape(secret)
	} else {
		clientID, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	iss.mu.Lock()
	client, known := iss.clients[clientID]
	g := iss.codes[r.PostForm.Get("code")]
	delete(iss.codes, r.PostForm.Get("code"))
	claims := iss.users[userOf(g)]
	iss.mu.Unlock()
	switch {
	case !known || (client.Secret != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(client.Secret)) != 1):
		w.Header().Set("WWW-Authenticate", `Basic realm="test issuer"`)
		w.WriteHeader(http.StatusUnauthorized)
		writeJSON(w, 0, map[string]string{"error": "invalid_client"})
		return
	case g == nil || time.Now().After(g.expires) || g.client != clientID:
		oauthError(w, "invalid_grant", "unknown, used or expired code, or another client's")
		return
	case g.redirect != r.PostForm.Get("redirect_uri"):
		oauthError(w, "invalid_grant", "redirect_uri is not the authorization request's")
		return
	}
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	if base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		oauthError(w, "invalid_grant", "code_verifier does not match the code_challenge")
		return
	}
	var aud any = clientID
	if resource := r.PostForm.Get("resource"); resource != "" {
		aud = resource
	} else if g.resource != "" {
		aud = g.resource
	}
	access := map[string]any{"scope": g.scope, "client_id": clientID}
	id := map[string]any{}
	for k, v := range claims {
		access[k], id[k] = v, v
	}
	if g.nonce != "" {
		id["nonce"] = g.nonce
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": iss.Token(g.user, aud, access),
		"id_token":     iss.Token(g.user, clientID, id),
		"token_type":   "Bearer",
		"expires_in":   int(iss.TTL.Seconds()),
		"scope":        g.scope,
	})
}

func userOf(g *grant) string {
	if g == nil {
		return ""
	}
	return g.user
}

func oauthError(w http.ResponseWriter, code, description string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code, "error_description": description})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if status != 0 {
		w.WriteHeader(status)
	}
	_ = json.NewEncoder(w).Encode(v)
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.TrimRight(base64.RawURLEncoding.EncodeToString(b), "=")[:n]
}

// String describes the issuer for a test's log.
func (iss *Issuer) String() string { return fmt.Sprintf("test issuer %s", iss.URL) }
