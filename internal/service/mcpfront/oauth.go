package mcpfront

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/toolbus/toolbus/internal/support/oidc"
	"github.com/toolbus/toolbus/pkg/messages"
)

// AgentHeader names, on a request whose token names several agents, the
// one the request acts as.
const AgentHeader = "Toolbus-Agent"

// OAuth makes the front an OAuth 2.1 resource server of an OpenID Connect
// issuer (the MCP authorization specification): a request's bearer token
// may be a JWT of the issuer for the front's resource, whose claim names
// its agents. The front publishes its protected resource metadata
// (RFC 9728) and points a client that has no token to it.
type OAuth struct {
	// Verifier checks tokens: the issuer's, for the front's audience
	// (its Resource, unless the installation names another). Required.
	Verifier *oidc.Verifier
	// Resource is the front's resource identifier, the URL of its MCP
	// endpoint as clients reach it (https://mcp.example.com/mcp).
	// Required.
	Resource string
	// AgentsClaim names the claim listing the agents a token acts as.
	// Required.
	AgentsClaim string
	// Scopes are the scopes a client should ask for, listed in the
	// metadata; none by default.
	Scopes []string
}

// metadataPath is where the protected resource metadata of a resource
// whose path is path is: /.well-known/oauth-protected-resource, then the
// path (RFC 9728, 3.1).
func metadataPath(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return "/.well-known/oauth-protected-resource"
	}
	return "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.EscapedPath(), "/")
}

// MetadataURL is the URL of the front's protected resource metadata.
func (o *OAuth) MetadataURL() string {
	u, _ := url.Parse(o.Resource)
	return u.Scheme + "://" + u.Host + metadataPath(o.Resource)
}

func (o *OAuth) check() error {
	u, err := url.Parse(o.Resource)
	switch {
	case o.Verifier == nil:
		return fmt.Errorf("%w: OAuth without a verifier", ErrConfig)
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%w: resource %q: want the URL of the front's MCP endpoint, such as https://mcp.example.com/mcp", ErrConfig, o.Resource)
	case o.AgentsClaim == "":
		return fmt.Errorf("%w: OAuth without the agents claim", ErrConfig)
	}
	return nil
}

// serveMetadata answers the protected resource metadata.
func (g *gate) serveMetadata(w http.ResponseWriter, _ *http.Request) {
	o := g.cfg.OAuth
	doc := map[string]any{
		"resource":                 o.Resource,
		"authorization_servers":    []string{o.Verifier.Issuer()},
		"bearer_methods_supported": []string{"header"},
		"resource_name":            "Toolbus",
	}
	if len(o.Scopes) > 0 {
		doc["scopes_supported"] = o.Scopes
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	_ = json.NewEncoder(w).Encode(doc)
}

// challenge answers 401 with the scheme the front takes and where its
// metadata is; error is RFC 6750's code for a token that was given.
func (g *gate) challenge(w http.ResponseWriter, status int, code, description string) {
	value := `Bearer realm="toolbus"`
	if g.cfg.OAuth != nil {
		value = fmt.Sprintf(`Bearer resource_metadata=%q`, g.cfg.OAuth.MetadataURL())
	}
	if code != "" {
		value += fmt.Sprintf(`, error=%q`, code)
	}
	if code != "" && description != "" {
		value += fmt.Sprintf(`, error_description=%q`, strings.ReplaceAll(description, `"`, "'"))
	}
	w.Header().Set("WWW-Authenticate", value)
	text := http.StatusText(status)
	if description != "" {
		text += ": " + description
	}
	http.Error(w, text, status)
}

// tokenAgent checks a bearer token of the issuer and returns the agent
// the request acts as: the one AgentHeader names, which the token's claim
// must allow, or the token's one agent.
func (g *gate) tokenAgent(w http.ResponseWriter, r *http.Request, token string) (string, bool) {
	o := g.cfg.OAuth
	tok, err := o.Verifier.Verify(r.Context(), token)
	if errors.Is(err, oidc.ErrUnavailable) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "Service Unavailable: the identity provider's keys cannot be fetched now: "+err.Error(), http.StatusServiceUnavailable)
		return "", false
	}
	if err != nil {
		g.log.Info("bearer token refused", "remote", r.RemoteAddr, "reason", err)
		g.challenge(w, http.StatusUnauthorized, "invalid_token", err.Error())
		return "", false
	}
	patterns, _, err := tok.Strings(o.AgentsClaim)
	if err == nil {
		for _, p := range patterns {
			if err = messages.ValidateAgentPattern(p); err != nil {
				err = fmt.Errorf("claim %s: %w", o.AgentsClaim, err)
				break
			}
		}
	}
	if err != nil {
		g.challenge(w, http.StatusForbidden, "insufficient_scope", err.Error())
		return "", false
	}
	agent := r.Header.Get(AgentHeader)
	if agent == "" {
		if len(patterns) != 1 || strings.ContainsAny(patterns[0], "*?") {
			g.challenge(w, http.StatusForbidden, "insufficient_scope", fmt.Sprintf("the token's claim %s names %q: name the agent with the %s header", o.AgentsClaim, patterns, AgentHeader))
			return "", false
		}
		return patterns[0], true
	}
	if err := messages.ValidateID("agent", agent); err != nil {
		http.Error(w, "Bad Request: "+AgentHeader+": "+err.Error(), http.StatusBadRequest)
		return "", false
	}
	for _, p := range patterns {
		if matchAgent(p, agent) {
			return agent, true
		}
	}
	g.challenge(w, http.StatusForbidden, "insufficient_scope", fmt.Sprintf("the token's claim %s does not name agent %s", o.AgentsClaim, agent))
	return "", false
}

// matchAgent matches an agent pattern as the coordinator does: '*' any
// run of characters, '?' one.
func matchAgent(pattern, agent string) bool {
	ok, _ := path.Match(pattern, agent)
	return ok
}
