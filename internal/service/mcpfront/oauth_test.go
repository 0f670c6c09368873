package mcpfront_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/oidctest"
	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/mcpfront"
	"github.com/toolbus/toolbus/internal/support/oidc"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// oauthFront starts a front that takes the issuer's tokens for its own
// resource (its /mcp URL), and the static token beside them.
func (s stack) oauthFront(t testing.TB, iss *oidctest.Issuer, mutate ...func(*oidc.Config)) (resource string) {
	t.Helper()
	var handler atomic.Value
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	resource = hs.URL + "/mcp"
	cfg := oidc.Config{Issuer: iss.URL, Audiences: []string{resource}}
	for _, m := range mutate {
		m(&cfg)
	}
	v, err := oidc.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mcpfront.New(mcpfront.Config{
		Client: testenv.Client(t, s.url, client.Options{}),
		Tokens: map[string]mcpfront.Identity{token: {Agent: "analyst"}},
		OAuth:  &mcpfront.OAuth{Verifier: v, Resource: resource, AgentsClaim: "toolbus_agents"},
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	handler.Store(f.Handler())
	return resource
}

// initialize posts an initialize with the authorization and headers
// given, and returns the response, its body read.
func initialize(t *testing.T, resource, authorization string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, resource, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// TestOAuthResourceServer: the front publishes its protected resource
// metadata (RFC 9728) at the well-known URI of its resource, points a
// request without a token to it in WWW-Authenticate, takes a token of the
// issuer for its resource as the agent its claim names (or the one the
// request names among them), and refuses tokens of another audience or
// issuer, expired or forged (401 invalid_token), and tokens naming no
// agent it may use (403); the static tokens still work.
func TestOAuthResourceServer(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	iss := oidctest.Start(t)
	other := oidctest.Start(t)
	resource := s.oauthFront(t, iss)
	base := strings.TrimSuffix(resource, "/mcp")

	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			BearerMethods        []string `json:"bearer_methods_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || meta.Resource != resource || !slices.Equal(meta.AuthorizationServers, []string{iss.URL}) || !slices.Equal(meta.BearerMethods, []string{"header"}) {
			t.Errorf("%s: %d %+v %v", path, resp.StatusCode, meta, err)
		}
	}

	resp, _ := initialize(t, resource, "")
	want := `Bearer resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp"`
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
		t.Errorf("without a token: %d %q, want 401 %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
	}

	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	one := map[string]any{"toolbus_agents": "guest"}
	now := time.Now()
	for _, tc := range []struct {
		name, token string
		status      int
		says        string
	}{
		{"another audience", iss.Token("alice", "toolbus", one), http.StatusUnauthorized, "audience"},
		{"another issuer", other.Token("alice", resource, one), http.StatusUnauthorized, "issuer"},
		{"expired", iss.Token("alice", resource, map[string]any{"toolbus_agents": "guest", "exp": now.Add(-time.Minute).Unix()}), http.StatusUnauthorized, "expired"},
		{"forged", oidctest.SignWith(forger, iss.KeyID(), map[string]any{"iss": iss.URL, "sub": "alice", "aud": resource, "exp": now.Add(time.Minute).Unix(), "toolbus_agents": "guest"}), http.StatusUnauthorized, "signature"},
		{"not a JWT", "wrong", http.StatusUnauthorized, "invalid_token"},
		{"no agent", iss.Token("alice", resource, nil), http.StatusForbidden, "name the agent"},
		{"a subject wildcard", iss.Token("alice", resource, map[string]any{"toolbus_agents": "support.>"}), http.StatusForbidden, "subject wildcard"},
		{"every agent", iss.Token("alice", resource, map[string]any{"toolbus_agents": "*"}), http.StatusForbidden, "every agent"},
		{"patterns only", iss.Token("alice", resource, map[string]any{"toolbus_agents": "triage-*"}), http.StatusForbidden, "Toolbus-Agent"},
	} {
		resp, body := initialize(t, resource, "Bearer "+tc.token)
		challenge := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != tc.status || !strings.Contains(challenge+body, tc.says) || !strings.HasPrefix(challenge, `Bearer resource_metadata=`) {
			t.Errorf("%s: %d %q %q, want %d saying %q", tc.name, resp.StatusCode, challenge, body, tc.status, tc.says)
		}
	}

	// The claim's agent is the session's: guest and analyst see other tools.
	guest, _ := connect(t, resource[:len(resource)-len("/mcp")], map[string]string{"Authorization": "Bearer " + iss.Token("alice", resource, one)})
	analyst, _ := connect(t, base, bearer())
	guestTools, analystTools := names(t, guest), names(t, analyst)
	if slices.Contains(guestTools, "demo-word_count") || slices.Equal(guestTools, analystTools) || !slices.Contains(guestTools, "demo-echo") {
		t.Errorf("as guest %v; as analyst %v", guestTools, analystTools)
	}
	// A token of several agents names the one each request acts as.
	several := iss.Token("bob", resource, map[string]any{"toolbus_agents": []any{"gue*", "analyst"}})
	picked, _ := connect(t, base, map[string]string{"Authorization": "Bearer " + several, mcpfront.AgentHeader: "guest"})
	if got := names(t, picked); !slices.Equal(got, guestTools) {
		t.Errorf("Toolbus-Agent guest: %v, want %v", got, guestTools)
	}
	resp, body := initialize(t, resource, "Bearer "+several, mcpfront.AgentHeader, "billing-bot")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "does not name agent billing-bot") {
		t.Errorf("an agent the token does not name: %d %s", resp.StatusCode, body)
	}
	res, err := callTool(testenv.Context(t), guest, "demo-echo", map[string]any{"text": "hi"}, nil)
	if err != nil || res.IsError {
		t.Fatalf("a call as the token's agent: %v %+v", err, res)
	}
	calls, err := testenv.Client(t, s.url, client.Options{}).ListCalls(testenv.Context(t), messages.CallsListRequest{Agent: "guest", Tool: "demo-echo"})
	if err != nil || len(calls.Calls) != 1 {
		t.Errorf("the call as guest on the bus: %+v %v", calls, err)
	}
}

// TestOAuthIssuerDown: with the issuer hanging, a token whose keys the
// front has not fetched is answered 503 after the fetch's timeout, and the
// next at once without a fetch; the front never hangs a request.
func TestOAuthIssuerDown(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	iss := oidctest.Start(t)
	resource := s.oauthFront(t, iss, func(c *oidc.Config) { c.FetchTimeout = 300 * time.Millisecond; c.FailureRetry = time.Hour })
	release := iss.Hang()
	defer release()
	for range 5 {
		resp, body := initialize(t, resource, "Bearer "+iss.Token("alice", resource, map[string]any{"toolbus_agents": "guest"}))
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "identity provider") {
			t.Errorf("with the issuer hanging: %d %q", resp.StatusCode, body)
		}
	}
	if n := iss.Requests("/.well-known/openid-configuration"); n != 1 {
		t.Errorf("%d requests to the issuer for 5 tokens", n)
	}
	// The static token does not need the issuer.
	if resp, _ := initialize(t, resource, "Bearer "+token); resp.StatusCode != http.StatusOK {
		t.Errorf("the static token while the issuer hangs: %d", resp.StatusCode)
	}
}

// TestTypeScriptSDKClientOAuth: the official TypeScript SDK client finds
// the front's authorization server from its 401 and its metadata, logs in
// with the authorization code flow and PKCE at the issuer (for the front's
// resource, RFC 8707), and lists and calls tools with the access token it
// got, as the agent its claim names.
func TestTypeScriptSDKClientOAuth(t *testing.T) {
	t.Parallel()
	node := nodeWithSDK(t)
	s := startStack(t)
	iss := oidctest.Start(t)
	const redirect = "http://127.0.0.1/callback"
	iss.AddClient(oidctest.Client{ID: "mcp-sdk-client", RedirectURIs: []string{redirect}})
	iss.AddUser("carol", map[string]any{"toolbus_agents": []any{"guest"}})
	resource := s.oauthFront(t, iss)

	output := runSDKTests(t, node, "testdata/sdk_oauth.test.mjs", "TOOLBUS_MCP_URL="+resource, "TOOLBUS_OIDC_CLIENT_ID=mcp-sdk-client", "TOOLBUS_OIDC_REDIRECT="+redirect, "TOOLBUS_OIDC_USER=carol")
	if iss.Requests("/token") != 1 || iss.Requests("/authorize") != 1 {
		t.Errorf("the issuer served %d authorizations and %d token requests", iss.Requests("/authorize"), iss.Requests("/token"))
	}
	calls, err := testenv.Client(t, s.url, client.Options{}).ListCalls(testenv.Context(t), messages.CallsListRequest{Agent: "guest", Tool: "demo-echo"})
	if err != nil || len(calls.Calls) != 1 {
		t.Errorf("the SDK's call as guest on the bus: %+v %v", calls, err)
	}
	if !regexp.MustCompile(`pass [1-9]\n`).MatchString(output) {
		t.Error("the script ran no test")
	}
}
