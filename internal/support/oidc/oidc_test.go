package oidc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/dev/oidctest"
	"github.com/toolbus/toolbus/internal/support/oidc"
)

const audience = "toolbus"

func verifier(t *testing.T, iss *oidctest.Issuer, mutate ...func(*oidc.Config)) *oidc.Verifier {
	t.Helper()
	cfg := oidc.Config{Issuer: iss.URL, Audiences: []string{audience}}
	for _, m := range mutate {
		m(&cfg)
	}
	v, err := oidc.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVerifyAcceptsTheIssuersTokensOnly: a token of the issuer for the
// audience is accepted with its claims; one of another audience or issuer,
// expired, not yet valid, without exp or sub, forged with another key
// under the issuer's key ID, signed with an algorithm the verifier does
// not take (none, HS256 with the public key), or not a JWT, is refused
// with ErrInvalid and a message naming what is wrong.
func TestVerifyAcceptsTheIssuersTokensOnly(t *testing.T) {
	t.Parallel()
	iss := oidctest.Start(t)
	other := oidctest.Start(t)
	v := verifier(t, iss)
	ctx := context.Background()

	tok, err := v.Verify(ctx, iss.Token("alice", []string{"elsewhere", audience}, map[string]any{"toolbus_agents": []any{"support-bot"}}))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Subject != "alice" || tok.Issuer != iss.URL {
		t.Errorf("token %+v", tok)
	}
	if agents, _, _ := tok.Strings("toolbus_agents"); len(agents) != 1 || agents[0] != "support-bot" {
		t.Errorf("agents %q", agents)
	}

	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	base := func(extra map[string]any) map[string]any {
		c := map[string]any{"iss": iss.URL, "sub": "alice", "aud": audience, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}
		for k, val := range extra {
			if val == nil {
				delete(c, k)
			} else {
				c[k] = val
			}
		}
		return c
	}
	for _, tc := range []struct {
		name, token, want string
	}{
		{"another audience", iss.Token("alice", "another-api", nil), `audience ["another-api"]`},
		{"another issuer", other.Token("alice", audience, nil), "issuer " + `"` + other.URL},
		{"expired", iss.Token("alice", audience, map[string]any{"exp": now.Add(-time.Minute).Unix()}), "expired at"},
		{"not yet valid", iss.Token("alice", audience, map[string]any{"nbf": now.Add(time.Hour).Unix()}), "not valid yet"},
		{"no expiry", iss.Sign(base(map[string]any{"exp": nil})), "no expiry"},
		{"no subject", iss.Sign(base(map[string]any{"sub": nil})), "no subject"},
		{"forged signature", oidctest.SignWith(forger, iss.KeyID(), base(nil)), "signature is not one of the issuer's keys"},
		{"key of another type", oidctest.SignWith(edKey, iss.KeyID(), base(nil)), "signature is not one of the issuer's keys"},
		{"alg none", unsigned(base(nil)), "unexpected signature algorithm"},
		{"HS256", hs256(base(nil), iss.KeyID()), "unexpected signature algorithm"},
		{"not a JWT", "opaque-access-token", "not a signed JWT"},
		{"too large", strings.Repeat("a", oidc.DefaultMaxTokenBytes+1), "more than"},
	} {
		_, err := v.Verify(ctx, tc.token)
		if !errors.Is(err, oidc.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	if n := iss.Requests("/jwks"); n != 1 {
		t.Errorf("the keys were fetched %d times, want once", n)
	}
	if n := other.Requests("/jwks"); n != 0 {
		t.Errorf("a token of another issuer had that issuer's keys fetched %d times", n)
	}
}

func unsigned(claims map[string]any) string {
	return b64json(map[string]any{"alg": "none", "typ": "JWT"}) + "." + b64json(claims) + "."
}

// hs256 signs with HMAC, the key being the issuer's key ID: a verifier
// that took the algorithm from the token could be made to use a public
// value as the secret.
func hs256(claims map[string]any, secret string) string {
	in := b64json(map[string]any{"alg": "HS256", "typ": "JWT", "kid": secret}) + "." + b64json(claims)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// TestUnknownKeysAreFetchedBoundedly: a token signed with a key the
// verifier has not seen has the keys fetched again (the issuer rotated
// them), but tokens naming keys the issuer does not have cost at most one
// fetch per RefreshInterval, however many arrive at once.
func TestUnknownKeysAreFetchedBoundedly(t *testing.T) {
	t.Parallel()
	iss := oidctest.Start(t)
	v := verifier(t, iss, func(c *oidc.Config) { c.RefreshInterval = time.Hour })
	ctx := context.Background()
	if _, err := v.Verify(ctx, iss.Token("alice", audience, nil)); err != nil {
		t.Fatal(err)
	}
	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() {
			claims := map[string]any{"iss": iss.URL, "sub": "mallory", "aud": audience, "exp": time.Now().Add(time.Minute).Unix()}
			_, err := v.Verify(ctx, oidctest.SignWith(forger, "unknown-"+string(rune('a'+i%26)), claims))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, oidc.ErrInvalid) {
			t.Fatalf("a token of an unknown key: %v", err)
		}
	}
	if n := iss.Requests("/jwks"); n > 2 {
		t.Errorf("200 tokens of unknown keys had the keys fetched %d times; at most once more than the first", n)
	}

	// A rotation is picked up once the interval has passed.
	v2 := verifier(t, iss, func(c *oidc.Config) { c.RefreshInterval = time.Nanosecond })
	if _, err := v2.Verify(ctx, iss.Token("alice", audience, nil)); err != nil {
		t.Fatal(err)
	}
	iss.RotateKey()
	if _, err := v2.Verify(ctx, iss.Token("alice", audience, nil)); err != nil {
		t.Fatalf("a token of the issuer's new key: %v", err)
	}
}

// TestIssuerDown: while the issuer does not answer (it hangs, or refuses
// connections), a token is refused with ErrUnavailable after at most one
// fetch bounded by FetchTimeout, and the tokens that follow within
// FailureRetry are refused without a fetch; keys fetched before the
// issuer went down keep serving its tokens.
func TestIssuerDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	hung := oidctest.Start(t)
	release := hung.Hang()
	defer release()
	v := verifier(t, hung, func(c *oidc.Config) {
		c.FetchTimeout = 200 * time.Millisecond
		c.FailureRetry = time.Hour
	})
	start := time.Now()
	_, err := v.Verify(ctx, hung.Token("alice", audience, nil))
	first := time.Since(start)
	if !errors.Is(err, oidc.ErrUnavailable) {
		t.Fatalf("with the issuer hanging: %v, want ErrUnavailable", err)
	}
	start = time.Now()
	for range 50 {
		if _, err := v.Verify(ctx, hung.Token("alice", audience, nil)); !errors.Is(err, oidc.ErrUnavailable) {
			t.Fatalf("again: %v", err)
		}
	}
	t.Logf("issuer hanging: first refusal after %v (fetch timeout 200ms), 50 more in %v", first, time.Since(start))
	if n := v.Fetches(); n != 1 {
		t.Errorf("%d fetches while the issuer hung; want 1", n)
	}

	stopped := oidctest.Start(t)
	v = verifier(t, stopped, func(c *oidc.Config) { c.FailureRetry = time.Hour })
	good := stopped.Token("alice", audience, nil)
	if _, err := v.Verify(ctx, good); err != nil {
		t.Fatal(err)
	}
	stopped.Close()
	if _, err := v.Verify(ctx, good); err != nil {
		t.Errorf("a token of a key fetched before the issuer stopped: %v", err)
	}
	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forged := oidctest.SignWith(forger, "another-key", map[string]any{"iss": stopped.URL, "sub": "m", "aud": audience, "exp": time.Now().Add(time.Minute).Unix()})
	if _, err := v.Verify(ctx, forged); err == nil {
		t.Error("a token of an unknown key was accepted while the issuer is down")
	}
}

// TestClaims reads lists, paths and flags as the callout and the fronts
// read the agents and operators claims.
func TestClaims(t *testing.T) {
	t.Parallel()
	iss := oidctest.Start(t)
	v := verifier(t, iss)
	tok, err := v.Verify(context.Background(), iss.Token("alice", audience, map[string]any{
		"agents":       "support-bot triage-*",
		"groups":       []any{"staff", "toolbus-operators"},
		"admin":        true,
		"realm_access": map[string]any{"roles": []any{"ops"}},
		"mixed":        []any{"a", 1},
		"count":        3,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got, found, err := tok.Strings("agents"); !found || err != nil || strings.Join(got, ",") != "support-bot,triage-*" {
		t.Errorf("agents: %q %v %v", got, found, err)
	}
	if got, found, _ := tok.Strings("realm_access.roles"); !found || len(got) != 1 || got[0] != "ops" {
		t.Errorf("a path: %q", got)
	}
	if _, found, _ := tok.Strings("absent"); found {
		t.Error("an absent claim was found")
	}
	if _, _, err := tok.Strings("mixed"); err == nil || !strings.Contains(err.Error(), "element 1 is a number") {
		t.Errorf("a list of mixed elements: %v", err)
	}
	if _, _, err := tok.Strings("count"); err == nil || !strings.Contains(err.Error(), "is a number") {
		t.Errorf("a number: %v", err)
	}
	for _, tc := range []struct {
		claim, value string
		want         bool
	}{
		{"groups", "toolbus-operators", true},
		{"groups", "toolbus", false},
		{"admin", "", true},
		{"absent", "", false},
		{"realm_access.roles", "ops", true},
	} {
		if got, err := tok.Holds(tc.claim, tc.value); got != tc.want || err != nil {
			t.Errorf("Holds(%s, %q) = %v, %v", tc.claim, tc.value, got, err)
		}
	}
	if _, err := tok.Holds("groups", ""); err == nil {
		t.Error("a list taken for a flag")
	}
}

func TestNewVerifierRefusesBadConfig(t *testing.T) {
	for _, cfg := range []oidc.Config{
		{Issuer: "login.example.com", Audiences: []string{"a"}},
		{Issuer: "ftp://login.example.com", Audiences: []string{"a"}},
		{Issuer: "https://login.example.com?x=1", Audiences: []string{"a"}},
		{Issuer: "https://login.example.com"},
	} {
		if _, err := oidc.NewVerifier(cfg); err == nil {
			t.Errorf("%+v was accepted", cfg)
		}
	}
}

func b64json(v map[string]any) string {
	data, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(data)
}
